"""tools/detection_experiment.py and its modules: the injected slowdown (detection_inject), its calibration, and the
analysis on known pools (detection_trials)."""

import json
import operator
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import asvrun  # noqa: E402
import detection_experiment as d  # noqa: E402
import detection_inject as inject  # noqa: E402
import detection_trials as analysis  # noqa: E402
import verdict  # noqa: E402

FORWARD = (ROOT / "fusedkernel" / "kernels" / "forward.py").read_text()


def test_the_patch_adds_one_chain_per_tile_width_after_the_row_sums():
    out = inject.patched_source(FORWARD, {4096: 24, 8192: 0, 1024: 7})
    assert out.count("tl.static_range(24)") == 1 and out.count("tl.static_range(7)") == 1
    assert "BLOCK_N == 8192" not in out  # a zero chain adds nothing
    assert out.index(inject.ANCHOR) < out.index("BLOCK_N == 1024") < out.index("BLOCK_N == 4096")
    assert inject.patched_source(FORWARD, {}) == FORWARD
    with pytest.raises(ValueError, match="not found once in forward.py"):
        inject.patched_source("no kernel here", {4096: 1})


BACKWARD = (ROOT / "fusedkernel" / "kernels" / "backward.py").read_text()


def test_the_backward_patch_chains_the_dot_products_of_whole_rows_and_both_split_forms():
    out = inject.patched_source(BACKWARD, {8192: 5}, "backward.py")
    for anchor in (inject.BACKWARD_ANCHOR, *inject.SPLIT_ANCHORS):
        at = out.index(anchor) + len(anchor)
        pad = anchor[:len(anchor) - len(anchor.lstrip())]
        assert out[at:].startswith(f"{pad}if BLOCK_N == 8192:  # detection experiment: injected slowdown\n"
                                   f"{pad}    for _ in tl.static_range(5):\n"
                                   f"{pad}        dot = dot * (1.0 + n_cols * 1e-30)\n")
    assert out.count("tl.static_range(5)") == 3 and inject.patched_source(BACKWARD, {}, "backward.py") == BACKWARD


def test_the_backward_patch_needs_every_line_unless_lenient():
    older = BACKWARD.replace(inject.SPLIT_ANCHORS[1], "")  # a base before the exchange behind
    with pytest.raises(ValueError, match="_gather.*not found once in backward.py"):
        inject.patched_source(older, {4096: 2}, "backward.py")
    assert inject.patched_source(older, {4096: 2}, "backward.py", lenient=True).count("tl.static_range(2)") == 2
    twice = BACKWARD + inject.BACKWARD_ANCHOR  # there, but not once: an error even when lenient
    with pytest.raises(ValueError, match="not found once in backward.py"):
        inject.patched_source(twice, {4096: 2}, "backward.py", lenient=True)


@pytest.mark.parametrize("case, max_splits, keys", [
    ("bf16 1x4096", 132, [4096]), ("bf16 8192x8192", 132, [8192]),
    # The wide row splits: forward tiles of 2048 over 32 programs, the backward's of 4096 (the wider tile).
    ("bf16 1024x65536", 132, [2048, 4096]),
])
def test_the_chain_keys_are_the_tile_widths_of_the_cases_launches_on_the_h200(case, max_splits, keys):
    from fusedkernel.kernels.config import HOPPER

    assert inject.chain_keys(case, max_splits, HOPPER) == keys


def test_the_committed_raw_files_chains_are_keyed_by_the_h200s_tile_widths():
    # The keys a new calibration would give are those the measured chains were applied with.
    from fusedkernel.kernels.config import HOPPER

    for raw in (ROOT / "docs" / "detection" / "nvidia-h200").glob("raw*.json"):
        data = json.loads(raw.read_text())
        want = sorted({k for case in data["cases"].values() for k in inject.chain_keys(case, 132, HOPPER)})
        # Seeded files carry their seed's chains for regimes they do not measure.
        assert all(set(want) <= set(map(int, chains)) for chains in data["delays"].values()), raw.name


def test_the_interpreter_keys_are_its_own_tile_widths():
    keys = d.in_child(inject.device_keys, d.experiment_cases(True))
    assert keys == {"decode": [64], "prefill": [1024]}


def test_the_chain_for_a_target_is_read_off_the_calibration_curve():
    raw = json.loads((ROOT / "docs" / "detection" / "nvidia-h200" / "raw.json").read_text())
    curve = raw["calibration"]["decode"]  # measured on the H200; the chains it chose are in raw["delays"]
    for level in d.LEVELS:
        assert d.chain_for(curve, level, raw["calibration"]["delays"]) == raw["delays"][str(level)]["4096"]
    with pytest.raises(ValueError, match="outside the calibrated range"):
        d.chain_for(curve, 0.5, raw["calibration"]["delays"])


def test_training_is_measured_at_prefill_and_the_wide_row_and_calibrated_on_itself_unless_inference_is():
    gpu = {"decode": "bf16 1x4096", "prefill": "bf16 8192x8192"}
    assert d.missing_cases(["Inference", "Training", "ForwardResidual"], gpu, False) == ["Training decode"]
    assert d.missing_cases(["Training"], {"prefill": gpu["prefill"]}, False) == []
    assert d.missing_cases(["Training"], {"wide": d.experiment_cases(False)["wide"]}, False) == []
    assert d.missing_cases(d.CLASSES, d.experiment_cases(True), True) == []  # the interpreter runs every class
    assert d.calibration_class(["Training", "Inference"]) == "Inference"
    assert d.calibration_class(["Training", "ForwardResidual"]) == "Training"


def synthetic(noise=0.002, n_aa=20, per_level=8, seed=0):
    rng = random.Random(seed)

    def proc(level):
        shift = rng.gauss(0, noise / 2)
        return {"level": level, "delays": {}, "ratios": {"Inference": {
            c: [(1 + level) * (1.5 + shift) * (1 + rng.gauss(0, noise)) for _ in range(12)]
            for c in ("bf16 1x4096", "bf16 8192x8192")}}}

    procs = [proc(0.0) for _ in range(n_aa)] + [proc(lv) for lv in d.LEVELS for _ in range(per_level)]
    return {"machine": "m", "cases": {"decode": "bf16 1x4096", "prefill": "bf16 8192x8192"},
            "classes": ["Inference"], "calibration": {}, "delays": {}, "processes": procs}


def test_the_analysis_catches_a_clear_step_and_flags_nothing_unchanged():
    raw, conf = synthetic(), asvrun.load_conf()
    aa = analysis.aa_row(raw, conf, "f", "Inference", "bf16 8192x8192")
    assert aa["aa_commits"] == 20 and aa["false_flags_publish"] == 0 and aa["false_fails_gate"] == 0
    rows = analysis.trials(raw, conf, "f", "Inference", "bf16 8192x8192", 0.10, 10)
    assert [r["placement"] for r in rows] == ["middle", "first"]
    for r in rows:
        assert r["trials"] == 10 and abs(r["slowdown"] - 0.10) < 0.01
        assert r["failed_gate"] == r["bisect_named"] == 10
    assert rows[0]["flagged_by_publish"] == 10
    # The evidence the trials resample: 20 A/A and 8 slow processes, the gate over every pair of them.
    assert rows[0]["processes"] == [20, 8] and rows[0]["gate_every_pair"] == [160, 160]
    assert aa["gate_every_pair"] == [0, 380]  # every ordered pair of two A/A processes


def test_the_gate_over_every_pair_counts_what_a_lone_slow_process_gives():
    # A review's find: 40 trials of 40 rested on a few slow processes; one caught process in 7 gave "2 of 40".
    raw, conf = synthetic(per_level=2), asvrun.load_conf()
    slow = [p for p in raw["processes"] if p["level"] == 0.10]
    slow[1]["ratios"]["Inference"]["bf16 8192x8192"] = list(raw["processes"][0]["ratios"]["Inference"]["bf16 8192x8192"])
    (row, _) = analysis.trials(raw, conf, "f", "Inference", "bf16 8192x8192", 0.10, 4)
    assert row["processes"] == [20, 2] and row["gate_every_pair"] == [20, 40]
    assert "20 of 40 (2 slow × 20 A/A)" in analysis.markdown([row])


def test_the_aa_row_gives_each_gpu_its_median():
    raw = synthetic()
    for i, p in enumerate(raw["processes"][:20]):
        p["gpu_uuid"] = "GPU-a" if i < 8 else "GPU-b" if i < 14 else None
    by_gpu = analysis.aa_row(raw, asvrun.load_conf(), "f", "Inference", "bf16 1x4096")["aa_median_by_gpu"]
    assert {g: n for g, (n, _) in by_gpu.items()} == {"GPU-a": 8, "GPU-b": 6, "unrecorded": 6}
    assert all(1.45 < med < 1.55 for _, med in by_gpu.values())


def test_publish_flags_name_the_slow_commit():
    hist = [analysis.stats_of([1.0 + 0.001 * (i % 3) for i in range(12)]) for _ in range(10)]
    hist += [analysis.stats_of([1.2 + 0.001 * (i % 3) for i in range(12)]) for _ in range(3)]
    assert analysis.publish_flags(hist, 0.015) == [10]
    assert analysis.publish_flags(hist[:10], 0.015) == []


def rounds(value: float, lo: float, hi: float) -> list[float]:
    """12 rounds whose asv statistics are ``value`` (the middle pair's mean) and ci_99 = (lo, hi) (the 2nd smallest
    and 2nd largest of 12)."""
    return [lo, lo] + [value] * 8 + [hi, hi]


def asv_publish_flags(tmp_path, cases: dict[str, list[list[float]]]) -> tuple[list[str], dict[str, list[str]]]:
    """Real ``asv publish`` of one Inference history per case (each commit's rounds), its results written as the
    recorded history's (``detection_history.write_results``), under asv.conf.json's thresholds and first commits:
    the commits, and {entry: the commits asv's regressions.json names (a jump's "after")}."""
    import detection_history
    import publish

    n = len(next(iter(cases.values())))
    repo = tmp_path / "repo"
    detection_history.git("init", "-q", "-b", "main", str(repo), cwd=tmp_path)
    commits = []
    for i in range(n):
        date = f"@{1_700_000_000 + 60 * i} +0000"
        env = {**os.environ, **detection_history.IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        detection_history.git("commit", "-q", "--allow-empty", "--no-verify", "-m", f"c{i}", cwd=repo, env=env)
        commits.append(detection_history.git("rev-parse", "HEAD", cwd=repo).stdout.strip())
    # Each commit its own "level", whose one process gives its rounds.
    raw = {"machine": "nvidia-h200", "classes": ["Inference"], "processes": [
        {"level": float(i), "ratios": {"Inference": {case: h[i] for case, h in cases.items()}}} for i in range(n)]}
    detection_history.write_results(raw, commits, [float(i) for i in range(n)], tmp_path / "results",
                                    json.loads((ROOT / "results" / "benchmarks.json").read_text()),
                                    json.loads((ROOT / "results" / "nvidia-h200" / "machine.json").read_text()))
    html = tmp_path / "html"
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps({**asvrun.load_conf(), "repo": str(repo), "results_dir": str(tmp_path / "results"),
                                "html_dir": str(html), "env_dir": str(tmp_path / "env")}))
    log = tmp_path / "publish.log"
    assert asvrun.asv(["publish", "--config", str(conf)], dict(os.environ), log, echo=lambda _: None) == 0, \
        log.read_text()[-3000:]
    to_hash = json.loads((html / "index.json").read_text())["revision_to_hash"]
    return commits, {entry: [to_hash[str(after)] for _, jumps in graphs for _, after, *_ in jumps]
                     for entry, graphs in publish.flags(html).items()}


def test_publish_flags_names_what_asv_publish_flags_near_the_threshold(tmp_path, monkeypatch):
    # The curves' publish column is publish_flags; the site's flags are asv publish's, which reads the results
    # files. 9 commits at 1.0, then 4 with the step. Prefill flags at 2.5%, decode at 6% (asv.conf.json).
    base = [rounds(v, v - 0.002, v + 0.002) for v in (0.999, 1.0, 1.001) * 3]

    def step(v, s=0.0005):
        return base + [rounds(x, x - 0.002, x + 0.002) for x in (v, v - s, v, v + s)]

    # A segment's level is a weighted median (weights 2 / ci_99 width), and asv saves ci_99 to 5 significant
    # digits: in a segment of 4 alternating a and b, a's interval 2e-7 narrower than b's (5e-5 of its weight)
    # makes a the level; stored, the weights tie and the level is the mean of a and b.
    def tie(a, b, d=1e-7):
        return base + [rounds(a, a - 0.002 + d, a + 0.002 - d), rounds(b, b - 0.002, b + 0.002)] * 2

    cases = {"bf16 8192x2048": step(1.02525), "bf16 8192x4096": step(1.02475),  # 1.01 and 0.99 x 2.5%
             "bf16 1x4096": step(1.0606), "bf16 8x4096": step(1.0594),  # 1.01 and 0.99 x 6%
             "bf16 8192x8192": tie(1.0245, 1.0265),  # +2.45% full precision, +2.55% stored
             "bf16 8192x16384": tie(1.0255, 1.0235)}  # +2.55% full precision, +2.45% stored
    commits, flagged = asv_publish_flags(tmp_path, cases)
    conf = asvrun.load_conf()
    for case, rs in cases.items():
        entry = f"add_rmsnorm.Inference.track_ratio('fused', '{case}')"
        simulated = [commits[i] for i in analysis.publish_flags([analysis.stats_of(r) for r in rs],
                                                                verdict.threshold(conf, entry))]
        assert simulated == flagged.get(entry, []), (case, simulated, flagged.get(entry))
    assert {e.split("'")[3] for e in flagged} == {"bf16 8192x2048", "bf16 1x4096", "bf16 8192x8192"}
    assert all(f == [commits[9]] for f in flagged.values())
    # The ties are borderline: weighed at full precision, each gives the other answer.
    monkeypatch.setattr(analysis, "stored", lambda stats: stats)
    assert analysis.publish_flags([analysis.stats_of(r) for r in cases["bf16 8192x8192"]], 0.025) == []
    assert analysis.publish_flags([analysis.stats_of(r) for r in cases["bf16 8192x16384"]], 0.025) == [9]


@pytest.mark.parametrize("args, message", [
    (["analyze", "--raw", "/nonexistent.json"], "--raw /nonexistent.json: not readable JSON"),
    (["analyze", "--raw", "RAW", "--regimes", "nosuch"], "--regimes nosuch"),
    (["analyze", "--raw", "RAW", "--trials", "0"], "must be an integer >= 1"),
    (["history", "--raw", "RAW", "--levels", "x", "--out", "OUT"], "levels are fractions"),
    (["analyze", "--raw", "EMPTY"], "no unchanged (A/A) process"),
    (["measure", "--raw", "RAW", "--regimes", "decode"], "pass --regimes decode,prefill"),
    (["measure", "--raw", "RAW", "--classes", "Inference,Forward"], "pass --classes Inference"),
    (["measure", "--raw", "NEW", "--regimes", "decode,nosuch"], "each one of decode, prefill"),
    (["measure", "--raw", "NEW", "--regimes", "decode,decode"], "a name given twice"),
    (["measure", "--raw", "NEW", "--regimes", "wide"], "the interpreter has no wide row"),
    (["measure", "--raw", "NEW", "--classes", "Nope"], "each one of Forward, Inference, ForwardResidual, Training"),
    (["measure", "--raw", "NEW", "--seed", "SEED_DECODE", "--regimes", "prefill"], "a calibration for decode only"),
    (["measure", "--raw", "NEW", "--seed", "SEED", "--levels", "0.07"], "no calibrated chain for 0.07"),
    # The H200's chains are for its tile widths, not the interpreter's: its processes would not be slowed.
    (["measure", "--raw", "NEW", "--seed", "H200"], "do not give a chain length to each tile width this host "
                                                      "launches (64, 1024)"),
    (["measure", "--raw", "NEW", "--seed", "SEED_ODD_KEY"], "do not give a chain length"),
    (["measure", "--raw", "NEW", "--seed", "/nonexistent.json"], "--seed /nonexistent.json: not readable JSON"),
    (["measure", "--raw", "BROKEN"], "not readable JSON"),
    (["measure", "--raw", "/proc/nope/raw.json"], "not a file in a writable folder"),
    # A review's finds: tracebacks, or NaN and "0 false flags" written into the curve.
    (["analyze", "--raw", "NO_SAMPLES"], "process 1: its Inference bf16 1x4096 ratios are no list of positive numbers"),
    (["analyze", "--raw", "NAN"], "process 1: its Inference bf16 1x4096 ratios are no list of positive numbers"),
    (["analyze", "--raw", "STRINGS"], "process 1: its Inference bf16 1x4096 ratios are no list of positive numbers"),
    (["analyze", "--raw", "NO_RATIOS"], "process 1: its Inference bf16 1x4096 ratios are no list"),
    (["analyze", "--raw", "NO_CASE"], "process 1: its Inference bf16 8192x8192 ratios are no list"),
    (["analyze", "--raw", "NO_OBJECT"], "process 1: no slowdown level"),
    (["analyze", "--raw", "CASE_NUMBER"], "its cases ({'prefill': 5}) or classes (['Inference']) are not the suite's"),
    (["analyze", "--raw", "CLASS"], "or classes (['Nope']) are not the suite's"),
    (["analyze", "--raw", "ONE_AA"], "fewer than 2 unchanged (A/A) commits"),
    (["measure", "--raw", "NAN"], "process 1: its Inference bf16 1x4096 ratios are no list of positive numbers"),
    (["history", "--raw", "RAW", "--levels", "0,0", "--out", "NOT_EMPTY"], "exists, and is no empty folder"),
    # A StatisticsError traceback after the setup; negative counts were taken.
    (["measure", "--raw", "NEW", "--calibration-rounds", "0"], "must be an integer >= 1, got '0'"),
    (["measure", "--raw", "NEW", "--aa", "-1"], "must be an integer >= 1, got '-1'"),
    (["measure", "--raw", "NEW", "--per-level", "\u0663"], "must be an integer >= 1"),
])
def test_bad_arguments_are_one_line_and_leave_the_curve_alone(args, message, tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(synthetic()))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({**synthetic(), "processes": []}))
    seed_decode = tmp_path / "seed-decode.json"
    seed_decode.write_text(json.dumps({**synthetic(), "cases": {"decode": "bf16 1x64"}}))
    interpreter = {"decode": "bf16 1x64", "prefill": "fp32 8x1000"}
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({**synthetic(), "cases": interpreter, "delays": {"0.02": {"64": 1, "1024": 2}}}))
    seed_odd = tmp_path / "seed-odd.json"
    seed_odd.write_text(json.dumps({**synthetic(), "cases": interpreter, "delays": {"0.02": {"64.0": 1, "1024": 2}}}))
    broken = tmp_path / "broken.json"
    broken.write_text('{"cases": {')  # a raw file cut short
    paths = {"RAW": str(raw), "EMPTY": str(empty), "OUT": str(tmp_path / "out"), "NEW": str(tmp_path / "new.json"),
             "SEED_DECODE": str(seed_decode), "SEED": str(seed), "SEED_ODD_KEY": str(seed_odd), "BROKEN": str(broken),
             "H200": str(ROOT / "docs" / "detection" / "nvidia-h200" / "raw.json"), "NOT_EMPTY": str(tmp_path)}
    def first(ratios):  # the first process's ratios replaced
        return {**synthetic(), "processes": [{"level": 0.0, "ratios": ratios}, *synthetic()["processes"][1:]]}

    samples = synthetic()["processes"][0]["ratios"]["Inference"]
    for name, bad in {"NO_SAMPLES": first({"Inference": {**samples, "bf16 1x4096": []}}),
                      "NAN": first({"Inference": {**samples, "bf16 1x4096": [float("nan")] * 12}}),
                      "STRINGS": first({"Inference": {**samples, "bf16 1x4096": ["1.5"] * 12}}),
                      "NO_RATIOS": {**synthetic(), "processes": [{"level": 0.0}, *synthetic()["processes"][1:]]},
                      "NO_CASE": first({"Inference": {"bf16 1x4096": samples["bf16 1x4096"]}}),
                      "NO_OBJECT": {**synthetic(), "processes": ["x", *synthetic()["processes"][1:]]},
                      "CASE_NUMBER": {**synthetic(), "cases": {"prefill": 5}},
                      "CLASS": {**synthetic(), "classes": ["Nope"]},
                      "ONE_AA": synthetic(n_aa=1)}.items():
        paths[name] = str(tmp_path / f"{name.lower()}.json")
        pathlib.Path(paths[name]).write_text(json.dumps(bad))
    args = [paths.get(a, a) for a in args]
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "detection_experiment.py"), *args],
                         capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "curve.json").exists() and not (tmp_path / "new.json").exists()


def test_regimes_whose_tile_widths_overlap_are_refused_before_calibrating(monkeypatch, tmp_path, capsys):
    # On the H200 decode (4096) and the wide row (2048, 4096) share a width; the interpreter's cases do not.
    monkeypatch.setattr(d, "device_keys", lambda cases: {"decode": [64, 1024], "prefill": [1024]})
    monkeypatch.setattr(d, "calibrate", lambda *a, **k: pytest.fail("calibrated regimes that share a chain"))
    monkeypatch.setattr(sys, "argv", ["detection_experiment.py", "measure", "--raw", str(tmp_path / "new.json")])
    with pytest.raises(SystemExit) as stop:
        d.main()
    assert stop.value.code == 2 and "their tile widths {'decode': [64, 1024], 'prefill': [1024]} overlap" in \
        capsys.readouterr().err
    assert not (tmp_path / "new.json").exists()


def test_each_commit_measures_each_class_in_a_fresh_child_with_the_injected_kernel(monkeypatch, tmp_path):
    from benchmarks import add_rmsnorm as suite
    from fusedkernel.kernels import launch

    def fake(op, plan, rounds=suite.ROUNDS):
        # Stands in for the timing: 2.0 where the injected kernel launches; the pid of the measuring process.
        injected = launch._rows_kernel.fn.__module__.startswith("fk_forward_")
        assert injected == launch._bwd_rows_kernel.fn.__module__.startswith("fusedkernel.kernels.fk_backward_")
        assert injected == launch._bwd_split_kernel.fn.__module__.startswith("fusedkernel.kernels.fk_backward_")
        return {("fused", case): ([2.0 if injected else 1.0] * rounds, [1.0] * rounds) for case in plan} | \
            {("pid",): os.getpid()}

    monkeypatch.setattr(suite, "measure_plan", fake)
    monkeypatch.setattr(d, "measure_once", lambda delays, cases, tmp, cls, real=d.measure_once: (
        real(delays, cases, tmp, cls) | {"pid": os.getpid()}))
    cases = d.experiment_cases(True)
    keys = d.in_child(inject.device_keys, cases)
    slow = d.measure_classes({k: 3 for r in cases for k in keys[r]}, cases, tmp_path,
                             ["Forward", "Inference", "Training"])
    same = d.measure_classes({}, cases, tmp_path, ["Inference"])
    pids = [slow[c].pop("pid") for c in ("Forward", "Inference", "Training")] + [same["Inference"].pop("pid")]
    assert len(set(pids)) == 4 and os.getpid() not in pids  # a fresh child per class and commit
    assert {v for c in slow.values() for r in c.values() for v in r} == {2.0}
    assert {v for r in same["Inference"].values() for v in r} == {1.0}
    assert launch._rows_kernel.fn.__module__ == "fusedkernel.kernels.forward"  # this process untouched
    assert launch._bwd_rows_kernel.fn.__module__ == "fusedkernel.kernels.backward"
    assert launch._bwd_split_kernel.fn.__module__ == "fusedkernel.kernels.backward"


def interrupted_after(seconds: float, fn, *args) -> float:
    """Run ``fn(*args)`` until a Ctrl-C (KeyboardInterrupt) ``seconds`` in, which it must let through; wall s."""
    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return time.monotonic() - start


def test_a_stopped_measurement_kills_its_child(tmp_path):
    marker = tmp_path / "child.pid"

    def forever():
        marker.write_text(str(os.getpid()))
        time.sleep(60)

    assert interrupted_after(1.0, d.in_child, forever) < 30  # it did not wait for the child's minute
    assert marker.exists() and not pathlib.Path(f"/proc/{marker.read_text()}").exists()  # killed and reaped


def test_a_child_returns_its_result_or_reports_its_error():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        d.in_child(lambda: 1 / 0)
    assert d.in_child(lambda: {"x": [1, 2]}) == {"x": [1, 2]}


def test_pooling_makes_each_commit_of_k_processes_of_its_level_in_order():
    procs = [{"level": lv, "ratios": {"Inference": {"c": [float(i)] * 12}}}
             for i, lv in enumerate([0.0, 0.1, 0.0, 0.0, 0.1, 0.0, 0.1, 0.0, 0.0])]
    out = analysis.pooled({"cases": {}, "processes": procs}, 3)["processes"]
    # A/A: processes 0, 2, 3 then 5, 7, 8; 10%: 1, 4, 6. Each gives its first 4 of 12 rounds.
    assert [(p["level"], p["ratios"]["Inference"]["c"]) for p in out] == [
        (0.0, [0.0] * 4 + [2.0] * 4 + [3.0] * 4), (0.0, [5.0] * 4 + [7.0] * 4 + [8.0] * 4),
        (0.1, [1.0] * 4 + [4.0] * 4 + [6.0] * 4)]
    assert analysis.pooled({"processes": procs}, 1)["processes"] is procs
    assert len(analysis.pooled({"processes": procs}, 4)["processes"]) == 1  # 6 A/A make one commit; 3 slow none


def test_the_analysis_of_pooled_commits_is_tagged_and_needs_enough_processes(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(synthetic(n_aa=6, per_level=4)))
    run = lambda *args: subprocess.run([sys.executable, str(ROOT / "tools" / "detection_experiment.py"), "analyze",  # noqa: E731
                                        "--raw", str(raw), "--regimes", "prefill", "--trials", "2", *args],
                                       capture_output=True, text=True)
    out = run("--pool", "2")
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "curve.json").read_text())["rows"]
    assert {r["pooled_processes"] for r in rows} == {2} and rows[0]["aa_commits"] == 3
    out = run("--pool", "7", "--out", str(tmp_path / "pooled7.json"))
    assert out.returncode == 2 and "fewer than 2 unchanged (A/A) commits of 7 processes" in out.stderr
    # A review's find: levels with fewer processes than --pool were left out without a word.
    raw.write_text(json.dumps(synthetic(n_aa=10, per_level=4)))
    out = run("--pool", "5", "--out", str(tmp_path / "pooled5.json"))
    assert out.returncode == 0 and "processes left out by --pool 5 (fewer processes than that): 0.02, 0.03, " \
        "0.05, 0.1" in out.stderr, out.stderr


def test_processes_at_a_level_the_analysis_does_not_know_are_named(tmp_path):
    # A review's find: they were ignored without a word.
    data = synthetic(n_aa=4, per_level=2)
    data["processes"][-1]["level"] = 0.04
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(data))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "detection_experiment.py"), "analyze", "--raw", str(raw),
                          "--regimes", "prefill", "--trials", "2", "--out", str(tmp_path / "c.json")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "raw.json: processes at levels this analysis does not know: 0.04" in out.stderr


def test_analyze_replaces_the_curve_only_with_an_analysis_of_all_its_raw_files(tmp_path):
    # A review's find: `analyze --raw raw-training.json` replaced the committed curve of 9 raw files (132 rows)
    # with its own 9 rows.
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(synthetic(n_aa=4, per_level=2)))
    def run(*args):
        tool = ROOT / "tools" / "detection_experiment.py"
        return subprocess.run([sys.executable, str(tool), "analyze", *args], capture_output=True, text=True)

    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"raws": ["a.json", "b.json"], "rows": ["the curve"]}))
    a, b = (["--raw", str(tmp_path / n)] for n in ("a.json", "b.json"))
    for args in (a, b + a, a + b + ["--regimes", "prefill"], a + b + ["--pool", "2"], a + b + ["--trials", "2"]):
        out = run(*args)  # each condition alone: a part, another order, narrowed, pooled, fewer trials
        assert out.returncode == 2 and "is the curve of ['a.json', 'b.json'], unnarrowed, at 40 trials: this " \
            "analysis would replace it; pass --out FILE" in out.stderr, (args, out.stderr)
    assert json.loads(curve.read_text())["rows"] == ["the curve"]
    curve.write_text("{")
    assert "is no curve this analysis can read" in run(*a, *b).stderr
    for bad, why in ((tmp_path, "is a directory"), (tmp_path / "no" / "c.json", "is not an existing directory")):
        out = run(*a, "--out", str(bad))  # refused before the analysis, not a traceback after it
        assert out.returncode == 2 and why in out.stderr and "Traceback" not in out.stderr, out.stderr
    out = run(*a, "--trials", "2", "--out", str(tmp_path / "a-curve.json"))
    assert out.returncode == 0 and json.loads((tmp_path / "a-curve.json").read_text())["raws"] == ["a.json"]
    curve.write_text(json.dumps({"raws": ["a.json", "b.json"], "rows": ["the curve"]}))
    out = run(*a, *b)  # what it was made of, as it was made
    assert out.returncode == 0 and json.loads(curve.read_text())["rows"] != ["the curve"], out.stderr

def test_a_spawned_child_is_a_fresh_interpreter_and_reports_its_error():
    assert d.in_child(os.getpid, start="spawn") != os.getpid()
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        d.in_child(operator.truediv, 1, 0, start="spawn")


def test_a_stopped_spawned_measurement_kills_its_child():
    assert interrupted_after(3.0, lambda: d.in_child(time.sleep, 60, start="spawn")) < 30  # killed, not waited for


def test_each_class_can_be_measured_in_a_fresh_interpreter(tmp_path):
    cases = {"decode": d.experiment_cases(True)["decode"]}
    got = d.measure_classes({}, cases, tmp_path, ["Inference"], "spawn")
    (ratios,) = got["Inference"].values()
    from benchmarks._measure import ROUNDS
    assert len(ratios) == ROUNDS and min(ratios) > 0


def test_the_training_call_runs_its_backward_after_the_injected_forward(tmp_path):
    cases = {"prefill": d.experiment_cases(True)["prefill"]}
    got = d.measure_classes({1024: 2}, cases, tmp_path, ["Training"])
    (ratios,) = got["Training"].values()
    from benchmarks._measure import ROUNDS
    assert len(ratios) == ROUNDS and min(ratios) > 0


def test_the_published_curve_is_what_analyze_gives_from_the_committed_raw_files(tmp_path):
    folder = ROOT / "docs" / "detection" / "nvidia-h200"
    published = json.loads((folder / "curve.json").read_text())
    args = []
    for name in published["raws"]:
        (tmp_path / name).write_text((folder / name).read_text())
        args += ["--raw", str(tmp_path / name)]
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "detection_experiment.py"), "analyze", *args],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "curve.json").read_text())["rows"] == published["rows"]
    # Every flagged family has its curve: each class at each regime of its grid (Training has no decode).
    assert {r["family"] for r in published["rows"]} == {
        f"{cls}.track_ratio {regime}" for cls in ("Forward", "Inference", "ForwardResidual", "Training")
        for regime in ("decode", "prefill", "wide") if (cls, regime) != ("Training", "decode")}


def test_the_progress_line_names_each_class_in_full():
    raw = {"classes": ["Forward", "ForwardResidual"], "cases": {"wide": "bf16 1024x65536"}}
    got = {"Forward": {"bf16 1024x65536": [1.0, 1.2, 1.1]}, "ForwardResidual": {"bf16 1024x65536": [2.0, 2.0]}}
    assert d.medians(raw, got) == {"Forward wide": "1.1000", "ForwardResidual wide": "2.0000"}


@pytest.mark.parametrize("module", ["detection_history", "detection_inject", "detection_trials"])
def test_the_experiment_modules_say_they_are_not_commands(module):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / f"{module}.py")], capture_output=True, text=True)
    want = f"tools/{module}.py is a module of the detection experiment: python tools/detection_experiment.py --help"
    assert out.returncode == 1 and out.stderr.strip() == want, out.stderr[-500:]
