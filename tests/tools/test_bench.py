"""tools/bench.py and its modules without a real asv run (fast); the flows end to end: test_flows.py."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import asvrun  # noqa: E402
import bench  # noqa: E402
import bisection  # noqa: E402
import verdict  # noqa: E402
from benchmarks import _measure  # noqa: E402


def test_config_keeps_the_project_settings(tmp_path):
    from asv import util

    orig = util.load_json(str(bench.ROOT / "asv.conf.json"), js_comments=True)
    with asvrun.config("interpreter", results=tmp_path) as path:
        conf = util.load_json(str(path))
    assert not path.exists() and not path.parent.exists()  # removed on exit
    assert conf.pop("results_dir") == str(tmp_path)
    assert conf.pop("repo") == str(bench.ROOT)
    for key in ("benchmark_dir", "env_dir"):
        assert conf.pop(key) == str(bench.ROOT / orig.pop(key))
    assert conf.pop("install_command") == [c.replace("{conf_dir}", str(bench.ROOT)) for c in orig.pop("install_command")]
    assert conf.pop("regressions_first_commits") == {".*": None}  # nothing is flagged in the interpreter
    for key in ("results_dir", "repo", "html_dir", "regressions_first_commits"):
        orig.pop(key)
    conf.pop("html_dir")
    assert conf == orig


def test_measure_pair_pins_both_commits_into_its_own_results(monkeypatch, tmp_path):
    calls = []

    def fake_asv(args, env, log, echo=print):
        conf = json.loads(pathlib.Path(args[args.index("--config") + 1]).read_text())
        calls.append((args, conf["results_dir"], json.loads(env["FUSEDKERNEL_BENCH_REGEX"])))
        return 0

    monkeypatch.setattr(asvrun, "asv", fake_asv)
    base, head = "b" * 40, "h" * 40
    (b, h), failed = bench.measure_pair("interpreter", "m", None, [r"Inference.track_ratio\('fused'"], base, head,
                                        tmp_path)
    runs = [c for c in calls if c[0][0] == "run"]
    assert [r[0][1] for r in runs] == [f"{base}^!", f"{head}^!"]  # each commit alone, by its full hash
    assert all(r[1] == str(tmp_path) for r in runs)  # never into the history
    assert all(r[0][r[0].index("-b") + 1].startswith(r"^(?=add_rmsnorm\.Inference\.)") for r in runs)
    assert (b, h) == (None, None) and failed == []


@pytest.mark.parametrize("n", sorted({_measure.ROUNDS, 12}))  # this mode's (the interpreter's) and the GPU's
def test_rounds_let_the_verdict_see_a_step(n):
    """Two fully separated sets of ROUNDS samples a side are different in asv's test (6 a side never are)."""
    from asv_runner.statistics import compute_stats

    def ss(samples):
        value, stats = compute_stats(samples, 1)
        return value, (stats, samples)

    good, bad = ss([1.0 + i / 100 for i in range(n)]), ss([3.0 + i / 100 for i in range(n)])
    assert verdict.compare("e", good[0], bad[0], good[1], bad[1], 1.5).regressed
    six_good, six_bad = ss([1.0 + i / 100 for i in range(6)]), ss([3.0 + i / 100 for i in range(6)])
    assert not verdict.compare("e", six_good[0], six_bad[0], six_good[1], six_bad[1], 1.5).regressed


def fake_history(levels):
    """measure/remeasure over commits c0.. whose samples sit at ``levels`` (GOOD first)."""
    from asv_runner.statistics import compute_stats

    names = [f"c{i}" for i in range(len(levels))]
    measured = []

    def one(commit):
        measured.append(commit)
        level = levels[names.index(commit)]
        if level is None:
            return None, (None, None)
        samples = [level * (1 + k / 1000) for k in range(8)]
        value, stats = compute_stats(samples, 1)
        return value, (stats, samples)

    def again(order):
        got = {}
        for c in order:
            got.setdefault(c, []).extend(one(c)[1][1])
        return {c: (compute_stats(s, 1)[0], (compute_stats(s, 1)[1], s)) for c, s in got.items()}

    return names, one, again, measured


@pytest.mark.parametrize("levels, named, order", [
    ([1, 3, 3, 3], "c1", ["c0", "c3", "c1", "c0", "c1", "c0", "c1"]),                   # GOOD's child
    ([1, 1, 1, 3, 3, 3], "c3", ["c0", "c5", "c2", "c3", "c2", "c3", "c2", "c3"]),       # the middle
    ([1, 1, 1, 3], "c3", ["c0", "c3", "c1", "c2", "c2", "c3", "c2", "c3"]),             # BAD itself
])
def test_bisection_names_the_first_commit_beyond_the_threshold(levels, named, order):
    names, one, again, measured = fake_history(levels)
    out = bisection.bisect(names, one, again, 1.5, "e", echo=lambda *_: None)
    assert out.named == named and not out.error
    assert measured == order  # GOOD, BAD, the search, then parent and named alternately
    assert out.confirmation.regressed and out.confirmation.ratio == pytest.approx(3, rel=0.01)


@pytest.mark.parametrize("levels, error", [([1, 1.2, 1.4], False), ([1, 3, 1], False),
                                           ([None, 3], True), ([1, 3, None], True)])
def test_bisection_names_nothing(levels, error):
    """No step (BAD within the threshold, or a step that went away) is not an error; GOOD or BAD failing is."""
    names, one, again, _ = fake_history(levels)
    out = bisection.bisect(names, one, again, 1.5, "e", echo=lambda *_: None)
    assert out.named is None and out.error is error


def test_failed_cases_names_every_case_of_a_failed_benchmark(tmp_path):
    (tmp_path / "m").mkdir()
    cols = ["result", "params", "version"]
    params = [["'fused'"], ["'a'", "'b'"]]
    (tmp_path / "m" / "abcdef12-env.json").write_text(json.dumps({"result_columns": cols, "results": {
        "x.track_ratio": [None, params, "1"], "x.track_time": [[1.0, None], params[1:], "1"]}}))
    assert asvrun.failed_cases(tmp_path, "m", "abcdef12" + "0" * 32) == [
        "x.track_ratio('fused', 'a')", "x.track_ratio('fused', 'b')", "x.track_time('b')"]


def test_unreadable_state_means_measure_again(tmp_path, capsys):
    path = tmp_path / "state.json"
    bench.save_state(path, {"Forward": "r"})
    assert bench.load_state(path) == {"Forward": "r"}
    path.write_text('{"Forw')
    assert bench.load_state(path) == {}
    assert f"warning: {path} is unreadable" in capsys.readouterr().out
    assert bench.load_state(tmp_path / "missing.json") == {}


def test_new_starts_after_the_newest_commit_with_results_of_the_mode(tmp_path):
    head, parent = bench.commit_of("HEAD"), bench.commit_of("HEAD~1")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / f"{parent[:8]}-env.json").write_text(json.dumps({"commit_hash": parent}))
    (tmp_path / "m" / "garbage-env.json").write_text("{")
    assert bench.newest_with_results("m", tmp_path) == parent
    if set(bench._under(head, "results/") + bench._under(head, "provenance/")) != set(
            bench.git("diff-tree", "--no-commit-id", "--name-only", "-r", head).split()):
        assert bench.resolve(["NEW"], "m", tmp_path) == [head]


def test_asv_leaves_no_process_and_no_temporary_file(tmp_path, monkeypatch):
    """asvrun.asv: a child in a process group of its own (as asv runs its children) is killed when asv
    ends, and asv's temporary folder goes."""
    fake = tmp_path / "fake"
    (fake / "asv").mkdir(parents=True)
    (fake / "asv" / "__init__.py").write_text("")
    pid_file, tmp_file = tmp_path / "pid", tmp_path / "tmpdir"
    (fake / "asv" / "__main__.py").write_text(f"""
import os, subprocess, tempfile
p = subprocess.Popen(["sleep", "600"], process_group=0, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
open({str(pid_file)!r}, "w").write(str(p.pid))
d = tempfile.mkdtemp(prefix="asv-forkserver-")
open({str(tmp_file)!r}, "w").write(d)
print("· Running 1 total benchmarks", flush=True)
""")
    env = {**os.environ, "PYTHONPATH": str(fake)}
    lines = []
    assert asvrun.asv(["run"], env, tmp_path / "log", echo=lines.append) == 0
    assert lines == ["  · Running 1 total benchmarks"]
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)  # ours: end it, by id
        pytest.fail("the child left in its own process group outlived asv")
    left = pathlib.Path(tmp_file.read_text())
    if left.exists():
        left.rmdir()
        pytest.fail(f"asv's temporary folder {left} outlived asv")


def test_option_like_revisions_are_refused_before_git_sees_them(tmp_path):
    target = tmp_path / "out"
    for rev in (f"--output={target}", f"HEAD~1..--output={target}"):
        with pytest.raises(bench.UsageError, match="looks like an option"):
            bench.resolve([rev], "m", tmp_path)
    assert not target.exists()
    out = subprocess.run([sys.executable, str(bench.ROOT / "tools" / "bench.py"), "run", "--",
                          f"--output={target}"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and not target.exists()
