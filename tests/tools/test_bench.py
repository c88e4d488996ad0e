"""tools/bench.py and its modules without a real asv run (fast); the flows end to end: test_flows.py."""

import json
import re
import shutil
import types
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
import revisions  # noqa: E402
import bisection  # noqa: E402
import provenance  # noqa: E402
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
    install = conf.pop("install_command")
    orig.pop("install_command")
    argv = util.interpolate_command(install[0], {"env_dir": "/e", "build_dir": "/b"})[0]
    assert argv == ["python", f"{bench.ROOT}/tools/asv_env_install.py", "/b"]
    assert conf.pop("regressions_first_commits") == {".*": None}  # nothing is flagged in the interpreter
    for key in ("results_dir", "repo", "html_dir", "regressions_first_commits"):
        orig.pop(key)
    conf.pop("html_dir")
    assert conf == orig


def test_a_checkout_path_with_a_space_or_braces_reaches_the_install_command_whole(monkeypatch, tmp_path):
    # asv splits install_command like a shell: "/tmp/bk3 sp" ran "python /tmp/bk3" and every family failed.
    from asv import util

    root, conf = tmp_path / "a {checkout} with spaces", asvrun.load_conf()
    monkeypatch.setattr(asvrun, "ROOT", root)
    monkeypatch.setattr(asvrun, "load_conf", lambda: conf)
    with asvrun.config("interpreter", results=tmp_path) as path:
        install = util.load_json(str(path))["install_command"]
    argv = util.interpolate_command(install[0], {"env_dir": "/e", "build_dir": "/b"})[0]
    assert argv == ["python", f"{root}/tools/asv_env_install.py", "/b"]


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


@pytest.mark.parametrize("levels, named, order", [
    # A review's find: c2 failing read as "not slow", the search went right and the step at c1 was "not confirmed".
    ([1, 3, None, 3, 3], "c1", ["c0", "c4", "c2", "c1", "c0", "c1", "c0", "c1"]),
    ([1, 1, None, 1, 3, 3], "c4", ["c0", "c5", "c2", "c1", "c3", "c4", "c3", "c4", "c3", "c4"]),
])
def test_bisection_skips_a_commit_that_fails_to_measure(levels, named, order):
    names, one, again, measured = fake_history(levels)
    out = bisection.bisect(names, one, again, 1.5, "e", echo=lambda *_: None)
    assert out.named == named and not out.error
    assert measured == order  # the failed one's nearest neighbour instead, as git bisect skip


def test_bisection_cannot_name_a_step_that_only_failed_commits_hold():
    names, one, again, _ = fake_history([1, None, None, 3])
    out = bisection.bisect(names, one, again, 1.5, "e", echo=lambda *_: None)
    assert out.named is None and out.error
    assert out.reason == "the first slow commit is one of c1..c3: the 2 commits after c0 (not slow) and before c3 " \
                         "(slow) failed to measure"


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
            revisions.resolve([rev], "m", tmp_path)
    assert not target.exists()
    out = subprocess.run([sys.executable, str(bench.ROOT / "tools" / "bench.py"), "run", "--",
                          f"--output={target}"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and not target.exists()


# ---------------------------------------------------------------- the command line, on fakes

NAMES = ["add_rmsnorm.Inference.track_ratio('fused', 'bf16 1x64')", "add_rmsnorm.Inference.track_time('bf16 1x64')",
         "add_rmsnorm.Forward.track_ratio('fused', 'bf16 1x64')"]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """bench.main without torch, asv or the repository's own folders; what it did is in the returned namespace."""
    calls = types.SimpleNamespace(detect=0, asv=[], pair=[], tmp=tmp_path)

    def detect():
        calls.detect += 1
        return "interpreter", "m"

    def asv(args, env, log, echo=print):
        calls.asv.append(args)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        return 0

    monkeypatch.setattr(asvrun, "detect", detect)
    monkeypatch.setattr(asvrun, "asv", asv)
    monkeypatch.setattr(bench, "discovered", lambda mode: NAMES)
    monkeypatch.setattr(asvrun, "results_dir", lambda mode: tmp_path / "results")
    monkeypatch.setattr(asvrun, "provenance_dir", lambda mode: tmp_path / "provenance")
    monkeypatch.setattr(asvrun, "LOGS", tmp_path / "logs")
    monkeypatch.setattr(bench, "STATE", tmp_path / "state")
    monkeypatch.delenv("FUSEDKERNEL_MACHINE", raising=False)
    return calls


def main(*argv) -> int:
    """bench.main's exit status (argparse's SystemExit included)."""
    try:
        return bench.main(list(argv))
    except SystemExit as e:
        return e.code


def records(calls) -> list:
    return sorted((calls.tmp / "provenance").rglob("*.json"))


def refused_before_anything(calls, capsys, *words):
    """One line on stderr, nothing detected (torch), measured or recorded."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for w in words:
        assert w in err, err
    assert calls.detect == 0 and calls.asv == [] and calls.pair == [] and records(calls) == []


@pytest.mark.parametrize("argv, words", [
    (["run", "HEAD", "--bench", "("], ["--bench '('", "not a valid regex"]),
    (["run", "HEAD", "--bench", "Inference", "--bench", "["], ["--bench '['"]),
    (["gate", "HEAD~1", "HEAD", "--bench", "("], ["--bench '('"]),
    (["compare", "--bench", "a)"], ["--bench 'a)'"]),
    (["bisect", "HEAD~1..HEAD", "["], ["BENCH '['"]),
    (["bisect", "HEAD~1..HEAD", "track(?i)_ratio"], ["global flags"]),
    # Each valid alone, not together (asv gets them as one regex).
    (["run", "HEAD", "--bench", "(?P<x>Inference)", "--bench", "(?P<x>Forward)"], ["do not combine"]),
])
def test_an_invalid_regex_is_refused_before_anything(fake, capsys, argv, words):
    """A: a regex that does not compile (alone or combined): one line, exit 2, nothing measured or recorded."""
    assert main(*argv) == 2
    refused_before_anything(fake, capsys, f"bench.py {argv[0]}: ", *words)


def test_leading_global_flags_apply_to_their_regex_alone():
    """A: `(?i)...` stays valid inside the family regex, and its flag does not reach the other regexes."""
    rx = asvrun.family_regex("Inference", ["(?i)inference.TRACK_ratio"])
    assert re.search(rx, NAMES[0]) and not re.search(rx, NAMES[2])
    rx = asvrun.family_regex("Inference", ["(?i)nomatch", "(?x) inference # a verbose comment", "TRACK_TIME"])
    assert not any(re.search(rx, n) for n in NAMES)
    assert re.search(asvrun.family_regex("Inference", ["(?x)(?s) track_time # comment"]), NAMES[1])


def test_run_with_global_flags_measures_what_they_select(fake, capsys):
    """A: `run --bench '(?i)inference.track_ratio'` measures Inference only."""
    assert main("run", "HEAD", "--quiet", "--bench", r"(?i)inference.track_ratio") == 0, capsys.readouterr()
    runs = [a for a in fake.asv if a[0] == "run"]
    assert len(runs) == 1 and re.search(runs[0][runs[0].index("-b") + 1], NAMES[0])


@pytest.mark.parametrize("cmd", [["run", "HEAD"], ["compare"]])
def test_a_selection_matching_no_benchmark_is_a_usage_error(fake, capsys, cmd):
    """B: --bench that matches no benchmark of the suite: exit 2, nothing measured or recorded."""
    assert main(*cmd, "--bench", "NoSuch") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no benchmark" in err, err
    assert fake.asv == [] and records(fake) == []


def test_run_new_with_nothing_new_says_so(fake, capsys, monkeypatch):
    """C: NEW after the newest commit with results is empty: one line, exit 0, no summary, asv never started."""
    head = bench.commit_of("HEAD")
    monkeypatch.setattr(revisions, "newest_with_results", lambda machine, results, prov=None: head)
    assert main("run", "NEW") == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines() == [f"bench.py run: nothing new on m since {head[:10]}"]
    assert fake.asv == [] and records(fake) == []


@pytest.mark.parametrize("rounds", ["0", "-1", "x"])
def test_compare_rounds_must_be_at_least_one(fake, capsys, rounds):
    """E: --rounds below 1 is argparse's usage error (exit 2), before anything runs."""
    assert main("compare", "--rounds", rounds) == 2
    assert "--rounds" in capsys.readouterr().err
    assert fake.detect == 0 and fake.asv == []


def test_wheels_must_be_a_folder_of_wheels(fake, capsys, tmp_path):
    """F: --wheels that is no folder, or holds no .whl file: one line, exit 2, before anything runs."""
    assert main("run", "HEAD", "--wheels", "/nonexistent") == 2
    refused_before_anything(fake, capsys, "--wheels /nonexistent: no such folder")
    (tmp_path / "wheels").mkdir()
    assert main("gate", "HEAD~1", "HEAD", "--wheels", str(tmp_path / "wheels")) == 2
    refused_before_anything(fake, capsys, "no .whl file")
    (tmp_path / "wheels" / "x-1-py3-none-any.whl").touch()
    bench.check_wheels(str(tmp_path / "wheels"))


@pytest.fixture
def fake_pair(fake, monkeypatch):
    """measure_pair: nothing measured, one failed case (the gate's run error); ``fake.on_pair`` runs first."""
    fake.on_pair = lambda: None

    def pair(*args, **kw):
        fake.pair.append(args)
        fake.on_pair()
        return (None, None), ["x"]

    monkeypatch.setattr(bench, "measure_pair", pair)
    return fake


def test_gate_refuses_a_summary_it_cannot_append_to_before_measuring(fake_pair, capsys):
    """G: --summary in a folder that does not exist: exit 2 before measuring."""
    assert main("gate", "HEAD~1", "HEAD", "--summary", "/nonexistent/x.md") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--summary /nonexistent/x.md" in err, err
    assert fake_pair.pair == []


def test_gate_summary_write_error_keeps_the_verdict(fake_pair, capsys, tmp_path):
    """G: a summary that cannot be written at the end is a warning: the exit status stays the verdict's (here 3)."""
    folder = tmp_path / "summary"
    folder.mkdir()
    fake_pair.on_pair = lambda: shutil.rmtree(folder)  # gone while measuring
    assert main("gate", "HEAD~1", "HEAD", "--summary", str(folder / "x.md")) == 3
    captured = capsys.readouterr()
    assert "## Benchmark gate: ERROR" in captured.out
    assert "warning: the summary was not written" in captured.err and "Traceback" not in captured.err


def noisy(samples):
    from asv_runner.statistics import compute_stats

    value, stats = compute_stats(samples, 1)
    return value, (stats, samples)


def test_bisection_says_which_condition_failed():
    """H: BAD far beyond the factor but not significant says so, with p and the level it needs; also when
    the confirmation fails; BAD within the factor says that."""
    good = noisy([1.0 + k / 1000 for k in range(8)])
    wide = noisy([1.0, 1.01, 1.02, 1.03, 5.0, 5.01, 5.02, 5.03])  # median ~3x GOOD's, half of it overlapping
    out = bisection.bisect(["g", "b"], {"g": good, "b": wide}.get, None, 1.5, "e", echo=lambda *_: None)
    assert out.named is None and not out.error
    assert re.search(r"BAD/GOOD = 3(\.\d+)?, beyond x1\.5 but not significant \(p 0\.\d+, needs < 0\.002\)",
                     out.reason), out.reason
    out = bisection.bisect(["g", "b"], {"g": good, "b": noisy([1.2 + k / 1000 for k in range(8)])}.get, None, 1.5,
                           "e", echo=lambda *_: None)
    assert "BAD/GOOD = 1.2, not beyond x1.5" in out.reason, out.reason
    # The search finds c2 (clean samples), the re-measurement does not confirm it.
    clean = {"c0": good, "c1": good, "c2": noisy([3.0 + k / 1000 for k in range(8)])}
    out = bisection.bisect(list(clean), clean.get, lambda order: {"c1": good, "c2": wide}, 1.5, "e",
                           echo=lambda *_: None)
    assert out.named is None and "c2 was not confirmed" in out.reason
    assert re.search(r"named/parent = 3(\.\d+)?, beyond x1\.5 but not significant \(p 0\.\d+, needs < 0\.002\)",
                     out.reason), out.reason


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_while_torch_is_imported_stops_the_run(fake, monkeypatch, capsys, sig, rc):
    """I, J: a signal during the mode's detection (torch's import, whose own `except` may swallow what a handler
    raises, and which may install handlers of its own) stops the run before asv starts; exit 128 + signal."""
    def detect():
        fake.detect += 1
        try:  # what an import may do: catch everything, install handlers of its own
            os.kill(os.getpid(), sig)
            time.sleep(0.1)
        except BaseException:
            pass
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL if s != signal.SIGINT else signal.default_int_handler)
        return "interpreter", "m"

    monkeypatch.setattr(asvrun, "detect", detect)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    seen = []  # a later signal must not kill the test run: our own handler while asserting
    signal.signal(signal.SIGHUP, lambda *a: seen.append(a))
    try:
        assert main("run", "HEAD", "--quiet") == rc
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    assert f"interrupted ({sig.name})" in capsys.readouterr().err
    assert fake.asv == [] and records(fake) == []


def test_handlers_are_ours_again_after_torch_replaced_them(fake, monkeypatch, capsys):
    """I: handlers an import installed are replaced by bench.py's again (asv runs under them)."""
    def detect():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return "interpreter", "m"

    handlers = []
    monkeypatch.setattr(asvrun, "detect", detect)
    monkeypatch.setattr(asvrun, "asv", lambda *a, **k: handlers.append(
        (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))) or 0)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert main("run", "HEAD", "--quiet") == 0, capsys.readouterr()
    assert handlers and all(i is t and callable(i) and i is not signal.default_int_handler for i, t in handlers)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # put back


def test_sigint_stops_a_run_started_with_sigint_ignored(tmp_path):
    """I: a run started with SIGINT ignored (a script's background job: what made Ctrl-C look swallowed by
    torch's import) stops on SIGINT while it detects the mode: exit 130 (not the gate's refusal after it)."""
    env = {k: v for k, v in os.environ.items() if k != "FUSEDKERNEL_MACHINE"}
    proc = subprocess.Popen([sys.executable, str(bench.ROOT / "tools" / "bench.py"), "gate", "HEAD~1", "HEAD",
                             "--bench", "NoSuchBench"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert "interrupted (SIGINT)" in err and "Traceback" not in err, err


def test_sighup_stops_asv_and_everything_it_started(tmp_path):
    """J: SIGHUP (a closed terminal) while asv runs: asv and its session stopped, Interrupted("SIGHUP")."""
    fake_asv = tmp_path / "fake"
    (fake_asv / "asv").mkdir(parents=True)
    (fake_asv / "asv" / "__init__.py").write_text("")
    pid_file = tmp_path / "pid"
    (fake_asv / "asv" / "__main__.py").write_text(f"""
import subprocess, time
p = subprocess.Popen(["sleep", "600"], process_group=0, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
open({str(pid_file)!r}, "w").write(str(p.pid))
print("· Running 1 total benchmarks", flush=True)
time.sleep(10)
""")
    env = {**os.environ, "PYTHONPATH": str(fake_asv)}
    seen = []
    old = signal.signal(signal.SIGHUP, lambda *a: seen.append(a))  # without the fix, not the test's end
    start = time.monotonic()
    try:
        with pytest.raises(asvrun.Interrupted, match="SIGHUP"):
            asvrun.asv(["run"], env, tmp_path / "log", echo=lambda line: os.kill(os.getpid(), signal.SIGHUP))
    finally:
        signal.signal(signal.SIGHUP, old)
        pid = int(pid_file.read_text())
    assert time.monotonic() - start < 8
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and pathlib.Path(f"/proc/{pid}").exists() and \
            pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.05)
    if pathlib.Path(f"/proc/{pid}").exists() and \
            pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        os.kill(pid, signal.SIGKILL)  # ours: end it, by id
        pytest.fail("asv's child outlived a SIGHUP")


@pytest.mark.parametrize("text", ["[]", "{}", '{"results": [], "result_columns": []}', '"x"', '{"resu'])
def test_a_results_file_that_is_no_asv_result_is_moved_aside(tmp_path, text):
    """K: valid JSON of another shape is moved aside like invalid JSON, with a warning naming it."""
    path = tmp_path / "abcdef12-env.json"
    path.write_text(text)
    warnings = []
    assert not asvrun.readable(path, warn=warnings.append)
    assert not path.exists() and path.with_name(path.name + ".corrupt").read_text() == text
    assert len(warnings) == 1 and str(path) in warnings[0] and "moved to abcdef12-env.json.corrupt" in warnings[0]
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"commit_hash": "a" * 40, "results": {}, "result_columns": [], "version": 2}))
    assert asvrun.readable(good, warn=warnings.append) and good.exists()


def test_a_second_corrupt_results_file_does_not_overwrite_the_first(tmp_path):
    # The second went over the first's .corrupt copy, losing values that could be recovered by hand.
    path = tmp_path / "abcdef12-env.json"
    for text in ('{"first', '{"second'):
        path.write_text(text)
        assert not asvrun.readable(path, warn=lambda message: None)
    assert path.with_name(path.name + ".corrupt").read_text() == '{"first'
    assert path.with_name(path.name + ".corrupt2").read_text() == '{"second'


@pytest.mark.parametrize("name", ["", "../../evilm", "a/b", "..", ".hidden", "a..b", "-x", "a b"])
def test_a_machine_name_that_is_no_folder_name_is_refused(fake, capsys, monkeypatch, name):
    """Q: FUSEDKERNEL_MACHINE names a folder under results/: one line, exit 2, before anything runs."""
    monkeypatch.setenv("FUSEDKERNEL_MACHINE", name)
    assert main("run", "HEAD") == 2
    refused_before_anything(fake, capsys, "FUSEDKERNEL_MACHINE")
    for ok in ("nvidia-h200", "cpu-triton-interpreter", "runner_1.a"):
        assert asvrun.valid_machine(ok)


def test_a_run_that_measures_nothing_writes_no_provenance(fake, capsys):
    """9: a commit whose families an earlier run finished: no new provenance record, no log named."""
    head = bench.commit_of("HEAD")
    regex = r"Inference.track_ratio\('fused'"
    assert main("run", "HEAD", "--quiet", "--bench", regex) == 0
    assert len(records(fake)) == 1
    rec = json.loads(records(fake)[0].read_text())
    assert (fake.tmp / "logs" / rec["log"]).exists()
    results = fake.tmp / "results" / "m"
    results.mkdir(parents=True)
    (results / f"{head[:8]}-env.json").write_text(json.dumps({  # what asv stored in the first run
        "commit_hash": head, "result_columns": ["result", "params"], "version": 2,
        "results": {"add_rmsnorm.Inference.track_ratio": [[1.0], [["'fused'"], ["'bf16 1x64'"]]]}}))
    capsys.readouterr()
    assert main("run", "HEAD", "--quiet", "--bench", regex) == 0
    out = capsys.readouterr().out
    assert "Inference: finished in an earlier run, kept" in out
    assert "nothing measured, no provenance record" in out and "(log:" not in out, out
    assert len(records(fake)) == 1 and [a[0] for a in fake.asv].count("run") == 1  # the first run's family


def test_gate_with_head_behind_base_says_so(fake, capsys):
    """10: HEAD an ancestor of BASE is not "the same commit" (that is the merge-base)."""
    assert main("gate", "HEAD", "HEAD~1") == 2
    refused_before_anything(fake, capsys, "is an ancestor of BASE", "nothing to gate")
    assert main("gate", "HEAD", "HEAD") == 2
    refused_before_anything(fake, capsys, "same commit")


@pytest.mark.parametrize("argv", [["bisect", "-x..HEAD", "x"], ["run", "-x..HEAD"], ["gate", "-x", "HEAD"]])
def test_an_option_like_revision_is_named(fake, capsys, argv):
    """11: argparse takes '-x..HEAD' for an option (and reports a missing BENCH): the refusal names it."""
    assert main(*argv) == 2
    refused_before_anything(fake, capsys, f"bench.py {argv[0]}: '{argv[1]}' looks like an option")


def test_publish_and_the_gate_take_their_own_thresholds():
    conf = {"regressions_thresholds": {"a.*": 0.025, "ab.*": 0.03}, "gate_thresholds": {"a.*": 0.015}}
    assert verdict.threshold(conf, "abc") == 0.03 and verdict.gate_threshold(conf, "abc") == 0.015
    assert verdict.gate_threshold(conf, "x") == verdict.DEFAULT_THRESHOLD  # no key matches: asv's default
    # No gate regex matches: that benchmark's publish threshold (the gate's key used to give asv's 0.05).
    assert verdict.gate_threshold({**conf, "regressions_thresholds": {"b.*": 0.04}}, "b1") == 0.04
    del conf["gate_thresholds"]
    assert verdict.gate_threshold(conf, "abc") == 0.03  # no gate key: publish's
    # The project's: prefill publish above the lease-to-lease drift, the gate at the one-session spread.
    conf = asvrun.load_conf()
    prefill = "add_rmsnorm.Inference.track_ratio('fused', 'bf16 8192x2880')"
    assert verdict.threshold(conf, prefill) == 0.025 and verdict.gate_threshold(conf, prefill) == 0.015


def test_the_gate_judges_at_the_gate_threshold():
    conf = {"regressions_thresholds": {"e": 0.05}, "gate_thresholds": {"e": 0.01}}
    (row,) = verdict.judge(conf, fake_results({"e": 1.0}), fake_results({"e": 1.02}))  # +2%: beyond the gate's 1%
    assert row.factor == 1.01 and row.regressed


def test_the_table_says_what_each_verdict_means():
    """12: each verdict says its condition; the significance level is stated once, under the table."""
    rows = [verdict.Comparison("slow", 1.0, 1.285, 1.03, True, 0.0002),
            verdict.Comparison("noisy", 1.0, 1.285, 1.03, False, 0.003),
            verdict.Comparison("same", 1.0, 1.01, 1.03, False, 0.4),
            verdict.Comparison("fast", 1.0, 0.5, 1.03, True, 0.0002),
            verdict.Comparison("gone", 1.0, None, 1.03, False, None)]
    text = verdict.table(rows, "base", "head")
    got = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in text.splitlines()[2:7]}
    assert got == {"slow": "REGRESSED (> x1.03, p < 0.002)", "noisy": "not significant (p ≥ 0.002)",
                   "same": "within x1.03", "fast": "faster (< x0.971, p < 0.002)", "gone": "not compared"}
    assert text.count("0.002") == 4 and "Mann-Whitney" in text.splitlines()[-1]


def test_compare_of_a_clean_tree_measures_a_commit_of_its_own(monkeypatch, tmp_path):
    """A clean tree is a commit with HEAD's content and another hash: asv keys results by commit, and HEAD
    measured against itself overwrote one side with the other (ratio 1.000 from one set of samples)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}
    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, env=env, check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "one")
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(revisions, "ROOT", tmp_path)  # where git runs
    for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(k, raising=False)  # no identity needed
    commit, changed = bench.working_tree_commit()
    assert not changed and commit != git("rev-parse", "HEAD")
    assert git("rev-parse", f"{commit}^{{tree}}") == git("rev-parse", "HEAD^{tree}")
    (tmp_path / "a.py").write_text("x = 2\n")
    commit, changed = bench.working_tree_commit()
    assert changed and git("show", f"{commit}:a.py") == "x = 2"
    assert git("status", "--porcelain") == "M a.py"  # the index and HEAD untouched


def test_compare_of_a_clean_tree_names_the_ref_it_measures(monkeypatch, capsys):
    # It printed the placeholder "REF" (a new user's trial).
    import argparse

    monkeypatch.setattr(bench, "commit_of", lambda rev: "a" * 40)
    monkeypatch.setattr(bench, "detect", lambda: ("interpreter", "m"))
    monkeypatch.setattr(bench, "working_tree_commit", lambda: ("b" * 40, False))
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: ((None, None), []))
    args = argparse.Namespace(ref="v1.2", bench=None, wheels=None, rounds=1)
    assert bench.cmd_compare(args) == 3  # the faked run measured nothing
    out = capsys.readouterr().out
    assert "measuring v1.2 against a copy of HEAD" in out and "REF" not in out


def test_compare_with_a_failed_case_is_a_run_error(monkeypatch, capsys):
    # It printed the cases that ran and exited 0: a kernel that fails in the tree looked like no regression.
    import argparse

    monkeypatch.setattr(bench, "commit_of", lambda rev: "a" * 40)
    monkeypatch.setattr(bench, "detect", lambda: ("interpreter", "m"))
    monkeypatch.setattr(bench, "working_tree_commit", lambda: ("b" * 40, True))
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: ((object(), object()), ["fp32 8x1000 at bbbbbbbbbb"]))
    monkeypatch.setattr(bench.verdict, "entries", lambda res: [])
    args = argparse.Namespace(ref="HEAD", bench=None, wheels=None, rounds=1)
    assert bench.cmd_compare(args) == 3
    assert "1 failed cases, not in the table: fp32 8x1000 at bbbbbbbbbb" in capsys.readouterr().out


def test_measure_pair_names_the_commit_each_case_failed_at(monkeypatch, tmp_path):
    # The gate's ERROR listed failed cases without saying whether the base or the head failed them.
    monkeypatch.setattr(asvrun, "asv", lambda *a, **k: 0)
    monkeypatch.setattr(bench, "measure", lambda commit, *a, **k: ["bf16 1x64"] if commit.startswith("h") else [])
    _, failed = bench.measure_pair("interpreter", "m", None, ["x"], "b" * 40, "h" * 40, tmp_path)
    assert failed == ["bf16 1x64 at hhhhhhhhhh"]


def test_a_second_signal_while_asv_unwinds_keeps_the_provenance(fake, monkeypatch, capsys):
    """A Ctrl-C that asvrun.asv turned into Interrupted, then another while the provenance is written: the
    second raised inside the write and the record was lost (asv's signal was not counted as raised)."""
    def asv(args, env, log, echo=print):
        fake.asv.append(args)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        if args[0] == "run":
            raise asvrun.Interrupted("SIGINT")
        return 0

    real = provenance.record

    def record(*args, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C
        time.sleep(0.1)
        return real(*args, **kw)

    monkeypatch.setattr(asvrun, "asv", asv)
    monkeypatch.setattr(provenance, "record", record)
    assert main("run", "HEAD", "--quiet") == 130
    assert "interrupted (SIGINT)" in capsys.readouterr().err
    [path] = records(fake)
    assert json.loads(path.read_text())["status"] == "interrupted"


@pytest.mark.parametrize("state", [None, "{corrupt"])
def test_without_its_state_a_run_resumes_from_the_commits_provenance(fake, capsys, state):
    """CI's checkout removes .asv/ (the state): a commit cut off was measured again in every family; so
    was one whose state is unreadable."""
    head = bench.commit_of("HEAD")
    if state:
        (fake.tmp / "state" / "m").mkdir(parents=True)
        (fake.tmp / "state" / "m" / f"{head}.json").write_text(state)
    done = {f: asvrun.family_regex(f, []) for f in bench.FAMILIES[:2]}
    results = fake.tmp / "results" / "m"
    results.mkdir(parents=True)
    (results / f"{head[:8]}-env.json").write_text(json.dumps({
        "commit_hash": head, "result_columns": ["result", "params"], "version": 2,
        "results": {f"add_rmsnorm.{f}.track_ratio": [[1.0], [["'fused'"]]] for f in done}}))
    provenance.record(fake.tmp / "provenance" / "m", "m", head, "interpreter", {}, {}, provenance.now(),
                      status="interrupted", extra={"selection": [], "finished_families": done})
    assert main("run", "HEAD", "--quiet") == 0
    out = capsys.readouterr().out
    assert all(f"{f}: finished in an earlier run, kept" in out for f in done), out
    measured = [a[a.index("-b") + 1] for a in fake.asv if a[0] == "run"]
    assert measured == [asvrun.family_regex(f, []) for f in bench.FAMILIES[2:]]
    rec = json.loads(max(records(fake)).read_text())
    assert rec["status"] == "complete" and rec["selection"] == []
    assert rec["finished_families"] == {f: asvrun.family_regex(f, []) for f in bench.FAMILIES}


def test_a_signal_after_the_last_family_keeps_the_provenance(fake, monkeypatch, capsys):
    """A first Ctrl-C while the record is made (nvidia-smi's snapshot), every family finished: it was raised
    there, the record was lost, and the state said nothing was left to measure."""
    real, calls = provenance.gpu_snapshot, []

    def snapshot():
        calls.append(1)
        if len(calls) == 2:  # the one after the families, for the record
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
        return real()

    monkeypatch.setattr(provenance, "gpu_snapshot", snapshot)
    assert main("run", "HEAD", "--quiet") == 130
    [path] = records(fake)
    assert json.loads(path.read_text())["status"] == "complete"


def test_new_does_not_measure_again_a_commit_whose_every_family_failed(fake, monkeypatch, capsys):
    """Nothing stored (asv failed in every family), so no results file: NEW started before it at every run."""
    def asv(args, env, log, echo=print):
        fake.asv.append(args)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        return 1 if args[0] == "run" else 0

    monkeypatch.setattr(asvrun, "asv", asv)
    assert main("run", "NEW", "--quiet") == 1
    assert [a[0] for a in fake.asv].count("run") == len(bench.FAMILIES)
    assert json.loads(max(records(fake)).read_text())["status"] == "failed cases"
    capsys.readouterr()
    assert main("run", "NEW", "--quiet") == 0
    assert "nothing new on m since" in capsys.readouterr().out
    assert [a[0] for a in fake.asv].count("run") == len(bench.FAMILIES)


@pytest.mark.parametrize("module", ["asvrun", "bisection", "provenance", "publish", "report", "revisions", "signals",
                                    "site_offline", "verdict"])
def test_the_tracker_modules_say_they_are_not_commands(module):
    out = subprocess.run([sys.executable, str(bench.ROOT / "tools" / f"{module}.py")], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip() == (f"tools/{module}.py is a module of the tracker's command "
                                                         "line: python tools/bench.py --help"), out.stderr[-500:]


ENTRY = "add_rmsnorm.Inference.track_ratio('fused', 'bf16 1x64')"


@pytest.fixture
def fake_bisect(fake, monkeypatch):
    """bench.py bisect over g (GOOD), c1, c2 (BAD) with values from ``fake.levels`` ({commit: level, or None
    for a failure}); ``fake.fail_at`` (a visit number) makes that measurement fail: listed as failed and the
    stored samples kept, as asv and keep_earlier_values leave them; ``fake.silent`` leaves them without a
    failure listed (asv stopped before it stored anything)."""
    from asv.results import Results
    from asv_runner.statistics import compute_stats

    commits = {"g": "a" * 40, "c1": "b" * 40, "c2": "c" * 40}
    names = {v: k for k, v in commits.items()}
    store, visits = {}, []
    fake.levels, fake.fail_at, fake.silent = {"g": 1.0, "c1": 3.0, "c2": 3.0}, None, False

    def measure(commit, mode, machine, conf, wheels, regexes, results, *, resume=True, append=False, prov=None):
        visits.append(names[commit])
        if len(visits) == fake.fail_at:
            return [] if fake.silent else [ENTRY]
        level = fake.levels[names[commit]]
        if level is None:
            store[commit] = [None]
            return [ENTRY]
        new = [level * (1 + k / 1000) for k in range(8)]
        store[commit] = (store.get(commit, []) if append else []) + new
        return []

    def entries(res):
        samples = store.get(res)
        if samples is None:
            return []
        if samples == [None]:
            return [(ENTRY, None, (None, None))]
        value, stats = compute_stats(samples, 1)
        return [(ENTRY, value, (stats, samples))]

    monkeypatch.setattr(bench, "range_commits", lambda text: (commits["g"], [commits["c1"], commits["c2"]]))
    monkeypatch.setattr(bench, "selection_matches", lambda mode, regexes: True)
    monkeypatch.setattr(bench, "measure", measure)
    class File(str):
        def unlink(self):
            del store[self]

    monkeypatch.setattr(asvrun, "result_files", lambda results, machine, c: [File(c)] if c in store else [])
    monkeypatch.setattr(Results, "load", staticmethod(lambda path: str(path)))
    monkeypatch.setattr(bench.verdict, "entries", entries)
    monkeypatch.setattr(bench, "git", lambda *args: "bbbbbbb subject")
    fake.visits = visits
    return fake


def test_bisect_names_a_step_it_confirmed_on_new_samples(fake_bisect, capsys):
    assert main("bisect", "g..c2", r"Inference.track_ratio\('fused', 'bf16 1x64'\)") == 0
    assert fake_bisect.visits == ["g", "c2", "c1", "g", "c1", "g", "c1"]
    assert f"bisect: first slow commit {'b' * 40}" in capsys.readouterr().out


def bisect_workflow() -> dict:
    import yaml

    return yaml.safe_load((bench.ROOT / ".github" / "workflows" / "bench-bisect.yml").read_text())


def test_bisect_workflow_summary_keeps_the_named_commit(fake_bisect, capsys):
    # A review's find: the workflow grepped for asv find's "Greatest regression found", which bisect never prints.
    script = bisect_workflow()["jobs"]["bisect"]["steps"][-1]["run"]
    pattern = re.search(r'grep "([^"]+)" bisect\.log', script).group(1)
    assert main("bisect", "g..c2", r"Inference.track_ratio\('fused', 'bf16 1x64'\)") == 0
    kept = [line for line in capsys.readouterr().out.splitlines() if re.search(pattern, line)]
    assert any(line.startswith(f"bisect: first slow commit {'b' * 40}") for line in kept), kept


def test_bisect_workflow_default_is_a_flagged_benchmark_of_the_gpu_grid():
    # A review's find: the default was Forward.time_device, a benchmark the suite no longer has.
    from benchmarks import _cases, add_rmsnorm

    default = bisect_workflow()[True]["workflow_dispatch"]["inputs"]["bench"]["default"]
    ops = {f: getattr(add_rmsnorm, f).op for f in asvrun.FAMILIES if hasattr(getattr(add_rmsnorm, f), "op")}
    grid = [f"add_rmsnorm.{f}.track_ratio('fused', '{c}')" for f, op in ops.items() for c in _cases.gpu_cases(op)]
    matched = [e for e in grid if re.search(default, e)]
    conf = asvrun.load_conf()
    assert matched and all(verdict.flagged(conf, e) for e in matched), (default, matched)


@pytest.mark.parametrize("visit", [4, 5, 6, 7])
@pytest.mark.parametrize("silent", [False, True])
def test_bisect_refuses_to_confirm_on_values_it_did_not_measure_again(fake_bisect, capsys, visit, silent):
    # A review's find: a failed re-measurement kept the search's values (keep_earlier_values), and the step was
    # "confirmed" on them.
    fake_bisect.fail_at, fake_bisect.silent = visit, silent
    assert main("bisect", "g..c2", r"Inference.track_ratio\('fused', 'bf16 1x64'\)") == 3
    commit = ("a" if visit % 2 == 0 else "b") * 10
    assert f"run error: {ENTRY} failed to measure again at {commit} while confirming" in capsys.readouterr().err


def test_bisect_takes_a_failed_commit_for_neither_slow_nor_not(fake_bisect, capsys):
    fake_bisect.levels["c1"] = None  # the step's only candidate besides BAD failed: BAD is named, its parent
    assert main("bisect", "g..c2", r"Inference.track_ratio\('fused', 'bf16 1x64'\)") == 3  # cannot confirm
    out = capsys.readouterr()
    assert "the first slow commit is one of bbbbbbbbbb..cccccccccc" in out.out, out


@pytest.mark.parametrize("bench_args", [("bisect", "g..c2", ""), ("gate", "HEAD~1", "HEAD", "--bench", "")])
def test_an_empty_regex_is_refused(fake, capsys, bench_args):
    assert main(*bench_args) == 2
    refused_before_anything(fake, capsys, "is empty: name a benchmark")


@pytest.mark.parametrize("key, value, words", [
    ("gate_thresholds", "abc", "must be a number >= 0, got 'abc'"),
    ("gate_thresholds", None, "must be a number >= 0, got None"),
    ("gate_thresholds", -1, "must be a number >= 0, got -1"),
    ("gate_thresholds", "0.015", "must be a number >= 0, got '0.015'"),
    ("regressions_thresholds", True, "must be a number >= 0, got True"),
    ("regressions_thresholds", float("inf"), "must be a number >= 0, got inf"),
])
def test_a_bad_threshold_is_refused_before_anything_runs(fake, capsys, monkeypatch, key, value, words):
    # A review's find: "abc" crashed the gate after measuring both commits, -1 divided by zero, "0.015" passed.
    conf = asvrun.load_conf()
    conf[key] = {**conf[key], ".*x": value}
    monkeypatch.setattr(asvrun, "load_conf", lambda: conf)
    for argv in (("gate", "HEAD~1", "HEAD"), ("compare",), ("publish",), ("run", "HEAD")):
        assert main(*argv) == 2
        refused_before_anything(fake, capsys, f"asv.conf.json's {key}['.*x'] {words}")


def test_a_threshold_regex_that_does_not_compile_is_refused(fake, capsys, monkeypatch):
    conf = {**asvrun.load_conf(), "gate_thresholds": {"(": 0.01}}
    monkeypatch.setattr(asvrun, "load_conf", lambda: conf)
    assert main("gate", "HEAD~1", "HEAD") == 2
    refused_before_anything(fake, capsys, "asv.conf.json's gate_thresholds: '(' is not a valid regex")


@pytest.mark.parametrize("before, after", [(0.0, 1.0), (float("inf"), 1.0), (1.0, float("inf")),
                                           (1.0, float("nan")), (None, 1.0)])
def test_a_value_that_gives_no_ratio_is_not_compared(before, after):
    # NaN at BAD read "BAD/GOOD = nan, beyond x1.05 but not significant"; inf at HEAD read REGRESSED.
    row = verdict.compare("e", before, after, None, None, 1.05)
    assert row.ratio is None and not row.regressed and verdict.label(row) == "not compared"
    assert row.why("BAD/GOOD") == "BAD/GOOD: not compared (a value is missing, skipped, zero or infinite)"


def fake_results(values: dict):
    """An object verdict.entries reads: {entry: value}, no stats or samples."""
    class R:
        def get_all_result_keys(self):
            return list(values)

        def get_result_params(self, name):
            return []

        def get_result_value(self, name, params):
            return [values[name]]

        def get_result_stats(self, name, params):
            return [None]

        def get_result_samples(self, name, params):
            return [None]
    return R()


def test_the_gate_with_a_value_it_cannot_compare_is_a_run_error(fake, capsys, monkeypatch):
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: ((fake_results({ENTRY: 1.0}),
                                                                   fake_results({ENTRY: float("inf")})), []))
    assert main("gate", "HEAD~1", "HEAD") == 3
    assert ("## Benchmark gate: ERROR: 1 flagged values give no ratio (zero, infinite, or skipped at head)"
            in capsys.readouterr().out)


def test_the_gate_fails_where_the_head_skipped_a_case_the_base_measured(fake, capsys, monkeypatch):
    # A head whose op raised NotImplementedError at a case (asv: skipped, NaN) was dropped from the verdict: the
    # gate passed having compared nothing there. NaN at the base (outside the selection) is still no verdict.
    nan = float("nan")
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: (
        (fake_results({ENTRY: 1.0, ENTRY + "x": nan}), fake_results({ENTRY: nan, ENTRY + "x": 1.0})), []))
    assert main("gate", "HEAD~1", "HEAD") == 3
    out = capsys.readouterr().out
    assert "ERROR: 1 flagged values give no ratio (zero, infinite, or skipped at head)" in out
    assert f"| {ENTRY} | 1 | skipped | – | – | not compared |" in out and f"| {ENTRY}x |" not in out


@pytest.mark.parametrize("before, after", [(1.0, float("inf")), (0.0, 1.0), (1.0, float("nan"))])
def test_compare_with_a_flagged_value_that_gives_no_ratio_is_a_run_error(monkeypatch, capsys, before, after):
    import argparse

    monkeypatch.setattr(bench, "commit_of", lambda rev: "a" * 40)
    monkeypatch.setattr(bench, "detect", lambda: ("interpreter", "m"))
    monkeypatch.setattr(bench, "working_tree_commit", lambda: ("b" * 40, True))
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: ((fake_results({ENTRY: before}),
                                                                   fake_results({ENTRY: after})), []))
    assert bench.cmd_compare(argparse.Namespace(ref="HEAD", bench=None, wheels=None, rounds=1)) == 3
    assert f"1 flagged values give no ratio (zero, infinite, or skipped by working tree): {ENTRY}" in (
        capsys.readouterr().out)


@pytest.mark.parametrize("command", ["gate", "compare"])
def test_a_failed_case_that_is_not_flagged_costs_no_verdict(fake, monkeypatch, capsys, command):
    # A peer failing at a case (its install, its compile) failed the whole gate and compare with --bench Forward.
    peer = "add_rmsnorm.Inference.track_ratio('eager', 'bf16 1x64')"
    pair = ((fake_results({ENTRY: 1.0}), fake_results({ENTRY: 1.5})), [f"{peer} at aaaaaaaaaa"])
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: pair)
    monkeypatch.setattr(bench, "working_tree_commit", lambda: ("b" * 40, True))
    args = ("gate", "HEAD~1", "HEAD") if command == "gate" else ("compare",)
    assert main(*args, "--bench", "Inference") == 1  # the flagged value's verdict: slower
    out = capsys.readouterr().out
    assert "REGRESSED" in out and f"{peer} at aaaaaaaaaa" in out
    pair = ((fake_results({ENTRY: 1.0}), fake_results({ENTRY: 1.0})), [f"{ENTRY} at aaaaaaaaaa"])
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: pair)
    assert main(*args, "--bench", "Inference") == 3  # a flagged one failed: no verdict


def test_compare_judges_flagged_values_only(monkeypatch, capsys):
    # A review's find: `compare --bench Forward` judged GB/s (higher is faster) and the peers' ratios, so a
    # faster kernel exited 1 with its GB/s "REGRESSED".
    import argparse

    gbps, peer = "add_rmsnorm.Forward.track_gbps('bf16 1x64')", "add_rmsnorm.Forward.track_ratio('eager', 'bf16 1x64')"
    flagged = "add_rmsnorm.Forward.track_ratio('fused', 'bf16 1x64')"
    before = fake_results({gbps: 10.0, peer: 3.0, flagged: 1.25})
    after = fake_results({gbps: 12.5, peer: 3.6, flagged: 1.0})  # 20% faster; the peer's ratio noise +20%
    monkeypatch.setattr(bench, "commit_of", lambda rev: "a" * 40)
    monkeypatch.setattr(bench, "detect", lambda: ("gpu", "m"))
    monkeypatch.setattr(bench, "families", lambda mode, regexes: ["Forward"])
    monkeypatch.setattr(bench, "working_tree_commit", lambda: ("b" * 40, True))
    monkeypatch.setattr(bench, "measure_pair", lambda *a, **k: ((before, after), []))
    assert bench.cmd_compare(argparse.Namespace(ref="HEAD", bench=["Forward"], wheels=None, rounds=1)) == 0
    out = capsys.readouterr().out
    judged, shown = out.split("Not flagged, so not judged (shown only):")
    assert flagged in judged and "faster" in judged and gbps not in judged and peer not in judged
    assert f"| {gbps} | 10 | 12.5 | 1.250 |" in shown and f"| {peer} | 3 | 3.6 | 1.200 |" in shown
    assert "REGRESSED" not in out


@pytest.mark.parametrize("interpret, want", [("1", ("interpreter", "cpu-triton-interpreter")),
                                             ("0", ("gpu", "nvidia-h200"))])
def test_triton_interpret_on_a_gpu_host_is_the_interpreter_mode(monkeypatch, interpret, want):
    # A review's find: TRITON_INTERPRET=1 in a GPU host's environment reached asv in GPU mode, and the suite
    # would have timed the interpreter's cases into the H200's history.
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    monkeypatch.delenv("FUSEDKERNEL_MACHINE", raising=False)
    assert asvrun.detect() == want


def test_samples_without_statistics_are_judged_by_the_test_alone():
    # A review's find: samples whose stats were missing counted as significant without a test, and the verdict
    # then read "too few samples ... intervals apart".
    same = [1.0 + k / 1000 for k in range(8)]
    row = verdict.compare("e", 1.0, 1.2, (None, same), (None, [1.2 * v for v in same]), 1.05)
    assert row.regressed and row.why().startswith("ratio = 1.2, beyond x1.05 and significant (p ")
    row = verdict.compare("e", 1.0, 1.2, (None, same), (None, [1.2, 0.9, 1.3, 1.0, 0.95, 1.1, 1.2, 1.0]), 1.05)
    assert not row.regressed and "but not significant (p " in row.why() and "needs < 0.002" in row.why()
    assert verdict.compare("e", 1.0, 1.2, (None, [1.0]), (None, [1.2]), 1.05).regressed  # one value each


@pytest.mark.parametrize("changed, warned", [({"benchmarks": " M benchmarks/_measure.py"}, True),
                                             ({"fusedkernel": " M fusedkernel/ops.py"}, False), ({}, False)])
def test_run_warns_where_the_suite_it_measures_every_commit_with_is_uncommitted(monkeypatch, capsys, changed, warned):
    # asv runs the working tree's suite on each commit: an edited benchmarks/_measure.py (3 rounds, not 8)
    # went into the history without a word. fusedkernel/ of an older commit is that commit's own: no warning.
    def git(*args):
        assert args[:2] == ("status", "--porcelain")
        return "\n".join(v for k, v in changed.items() if k in args)

    monkeypatch.setattr(bench, "git", git)
    monkeypatch.setattr(bench, "commit_of", lambda rev: "h" * 40)
    bench.warn_uncommitted(["o" * 40])
    out = capsys.readouterr().out
    assert ("the suite (benchmarks/, asv.conf.json) has uncommitted changes" in out) == warned, out
    assert "fusedkernel/ has uncommitted changes" not in out


def test_a_second_command_in_one_checkout_is_refused_while_one_runs(fake, capsys):
    # Two runs at once shared the one asv environment: each installed its commit into it, and both measured
    # one commit's code under two commits' names.
    import os

    with bench.checkout_lock("run"):
        assert main("run", "HEAD", "--quiet") == 2
    err = capsys.readouterr().err
    assert f"is in use by bench.py run (pid {os.getpid()}): wait for it to end, or run from another clone" in err
    assert fake.asv == [] and records(fake) == []
    assert main("run", "HEAD", "--quiet") == 0  # released
