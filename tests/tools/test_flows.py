"""The tracker's flows end to end on CPU: tools/bench.py in Triton's interpreter, on a scratch git history.

Each test says which item of the flows issue it proves. The scratch history
(one per module, built from this working tree, uncommitted changes included)
plants what the flows must find:

    W   this working tree
    h   test settings: the test case's threshold 5, a factor 6 (unchanged
        commits measured at different times read up to ~6x apart in the
        interpreter on a loaded two-core host: the op's ~5 ms of Python slow
        down with the load, its ~2 µs floor hardly does), and
        hooks in ``fusedkernel.add_rmsnorm``: FK_FLOWS_FAIL fails hidden size
        1000, FK_FLOWS_STRAGGLER leaves a ``sleep`` behind in a process group
        of its own (as asv's own children run)
    c1, c2  unchanged
    c3  slow: ~40 ops' worth of CPU work in every call (``sum(range(...))``,
        which the load slows as it slows the interpreted op; a sleep would not:
        under load its step shrank below the factor)
    c4, c5  unchanged (main ends here)
    side branch from h: f1 unchanged, f2 raises at hidden size 1000, f3 fixed

Every command runs the scratch repository's own ``tools/bench.py`` (it finds
its repository from its own path), with a TMPDIR of its own (so what it
leaves there shows) and a HOME of its own (asv's machine file). The asv runs
(~10 s each) go to two lanes, each a thread with a clone of its own (its own
asv environment), longest jobs first, started by the first test that needs
one; the refusals, which never start asv, run meanwhile.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MACHINE = "cpu-triton-interpreter"
CASE = "add_rmsnorm.Inference.track_ratio('fused', 'bf16 1x64')"
CASE_1000 = "add_rmsnorm.Inference.track_ratio('fused', 'fp32 8x1000')"
FORWARD_CASE = "add_rmsnorm.Forward.track_ratio('fused', 'bf16 1x64')"
BENCH = r"Inference.track_ratio\('fused', 'bf16 1x64'\)"  # one family, one case: the cheapest run
BOTH = r"Inference.track_ratio\('fused', '(bf16 1x64|fp32 8x1000)'\)"
CASE_1000_ONLY = r"Inference.track_ratio\('fused', 'fp32 8x1000'\)"
TWO_FAMILIES = r"(Forward|Inference)\.track_ratio\('fused', 'bf16 1x64'\)"

ANCHOR = '    """\n    eps = check_inputs(x, residual, weight, eps)\n'
HOOKS = '''    import os as _os  # tests/tools/test_flows.py: planted hooks
    if _os.environ.get("FK_FLOWS_FAIL") and x.shape[-1] == 1000:
        raise RuntimeError("planted failure (FK_FLOWS_FAIL)")
    _left = globals().setdefault("_FK_FLOWS_STRAGGLER", [])
    if _os.environ.get("FK_FLOWS_STRAGGLER") and not _left:
        import subprocess as _sp
        _left.append(_sp.Popen(["sleep", "600"], process_group=0, stdin=_sp.DEVNULL, stdout=_sp.DEVNULL,
                               stderr=_sp.DEVNULL))
        with open(_os.environ["FK_FLOWS_STRAGGLER"], "a") as _f:
            _f.write(f"{_left[0].pid}\\n")
'''
SLOW = '    sum(range(17_000_000))  # planted slowdown: ~40 times the op in the interpreter\n'
FAIL = '    if x.shape[-1] == 1000:\n        raise RuntimeError("planted failure at hidden size 1000")\n'
IDENTITY = {"GIT_AUTHOR_NAME": "flows test", "GIT_AUTHOR_EMAIL": "flows@localhost",
            "GIT_COMMITTER_NAME": "flows test", "GIT_COMMITTER_EMAIL": "flows@localhost"}
GIT = ["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"]


def git(repo, *args) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **IDENTITY}).stdout.strip()


# ---------------------------------------------------------------- the scratch history

@dataclasses.dataclass
class History:
    repo: pathlib.Path
    c: dict  # name -> full hash

    def clone(self, dest: pathlib.Path) -> pathlib.Path:
        subprocess.run(["git", "clone", "-q", str(self.repo), str(dest)], check=True)
        return dest


def build_history(repo: pathlib.Path) -> History:
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(repo)], check=True)
    git(repo, "checkout", "-q", "-B", "main", git(ROOT, "rev-parse", "HEAD"))
    changed = git(ROOT, "diff", "--name-only", "HEAD").splitlines()
    changed += git(ROOT, "ls-files", "--others", "--exclude-standard").splitlines()
    for rel in changed:
        src, dst = ROOT / rel, repo / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif dst.exists():
            dst.unlink()
    c = {}

    def commit(name: str, message: str) -> None:
        (repo / "docs").mkdir(exist_ok=True)
        (repo / "docs" / "flows.txt").write_text(f"{name}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
        c[name] = git(repo, "rev-parse", "HEAD")

    commit("W", "the working tree")
    ops = repo / "fusedkernel" / "ops.py"
    original = ops.read_text()
    assert original.count(ANCHOR) == 1, "add_rmsnorm's first statement moved: update ANCHOR"

    def plant(*lines: str) -> None:
        ops.write_text(original.replace(ANCHOR, '    """\n' + "".join(lines) + ANCHOR[8:]))

    conf = repo / "asv.conf.json"
    text = conf.read_text()
    for key in ("regressions_thresholds", "gate_thresholds"):  # publish's, and the gate's and bisect's
        assert text.count(f'"{key}": {{') == 1, key
        text = text.replace(f'"{key}": {{',
                            f'"{key}": {{\n        ".*track_ratio\\\\(\'fused\', \'bf16 1x64\'\\\\)": 5.0,')
    conf.write_text(text)
    plant(HOOKS)
    commit("h", "test settings and hooks")
    commit("c1", "unchanged 1")
    commit("c2", "unchanged 2")
    plant(HOOKS, SLOW)
    commit("c3", "slow: ~40x the op's work per call")
    commit("c4", "unchanged 4")
    commit("c5", "unchanged 5")
    git(repo, "checkout", "-q", "-b", "side", c["h"])
    plant(HOOKS)
    commit("f1", "side: unchanged")
    plant(HOOKS, FAIL)
    commit("f2", "side: fails at hidden size 1000")
    plant(HOOKS)
    commit("f3", "side: fixed")
    git(repo, "checkout", "-q", "main")
    return History(repo, c)


# ---------------------------------------------------------------- running bench.py

@dataclasses.dataclass
class Run:
    args: tuple
    rc: int
    lines: list  # (seconds since start, line) of stdout, as they arrived
    stderr: str
    tmpdir: pathlib.Path
    wall: float

    @property
    def out(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def at(self, text: str, nth: int = 0) -> float:
        """When the ``nth`` stdout line containing ``text`` arrived."""
        return [t for t, line in self.lines if text in line][nth]

    def __str__(self) -> str:  # for assertion messages
        return f"bench.py {' '.join(self.args)}: exit {self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.stderr}"


def cli(repo: pathlib.Path, *args: str, home: pathlib.Path, tmp: pathlib.Path, env: dict | None = None,
        on_line=None, timeout: float = 400) -> Run:
    """``python tools/bench.py ARGS`` in ``repo``, stdout read line by line as it comes (``on_line(proc, line)``).

    Its TMPDIR is a new folder in ``tmp`` (a short path: asv's forkserver socket lives below it).
    """
    tmpdir = pathlib.Path(tempfile.mkdtemp(prefix="t-", dir=tmp))
    full = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONUNBUFFERED", "FUSEDKERNEL_MACHINE", "FUSEDKERNEL_BENCH_REGEX")}
    full.update(TMPDIR=str(tmpdir), HOME=str(home), **(env or {}))
    home.mkdir(parents=True, exist_ok=True)
    lines, start = [], time.monotonic()
    with tempfile.TemporaryFile("w+", dir=repo.parent) as err:
        proc = subprocess.Popen([sys.executable, "tools/bench.py", *args], cwd=repo, env=full, text=True,
                                stdout=subprocess.PIPE, stderr=err)

        def stop():  # too long: bench.py stops asv itself on SIGTERM
            proc.terminate()
            time.sleep(30)
            proc.kill()

        timer = threading.Timer(timeout, stop)
        timer.daemon = True
        timer.start()
        try:
            for line in proc.stdout:
                lines.append((time.monotonic() - start, line.rstrip("\n")))
                if on_line:
                    on_line(proc, line)
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        return Run(args, rc, lines, err.read(), tmpdir, time.monotonic() - start)


@dataclasses.dataclass
class Scratch:
    """A clone of the history with its own HOME: where a job runs bench.py."""
    repo: pathlib.Path
    home: pathlib.Path
    tmp: pathlib.Path
    c: dict

    def run(self, *args, **kw) -> Run:
        return cli(self.repo, *args, home=self.home, tmp=self.tmp, **kw)

    def results_file(self, commit: str) -> pathlib.Path | None:
        files = sorted((self.repo / ".asv" / "interpreter" / "results" / MACHINE).glob(f"{commit[:8]}-*.json"))
        return files[0] if files else None

    def values(self, commit: str) -> dict:
        """{"benchmark(params)": value} stored for ``commit`` ({} without a results file)."""
        path = self.results_file(commit)
        if path is None:
            return {}
        data = json.loads(path.read_text())
        out = {}
        for name, row in data["results"].items():
            row = dict(zip(data["result_columns"], row))
            for combo, v in zip(itertools.product(*row["params"]), row["result"] or itertools.repeat(None)):
                out[f"{name}({', '.join(combo)})"] = v
        return out

    def provenance(self, commit: str) -> list[pathlib.Path]:
        """``commit``'s provenance records, oldest first."""
        return sorted((self.repo / ".asv" / "interpreter" / "provenance" / MACHINE).glob(f"{commit[:12]}-*.json"))

    def state(self, commit: str) -> dict:
        path = self.repo / ".asv" / "state" / MACHINE / f"{commit}.json"
        return json.loads(path.read_text()) if path.exists() else {}


class Lanes:
    """Jobs (functions of a Scratch) on two threads, each thread with a clone of the history of its own."""

    def __init__(self, history: History, tmp: pathlib.Path, short_tmp: pathlib.Path, lanes: int = 2):
        self.history, self.tmp, self.short_tmp = history, tmp, short_tmp
        self.pool = concurrent.futures.ThreadPoolExecutor(lanes, thread_name_prefix="lane")
        self.local = threading.local()
        self.jobs: dict[str, concurrent.futures.Future] = {}

    def submit(self, name: str, fn) -> None:
        self.jobs[name] = self.pool.submit(self._run, fn)

    def _run(self, fn):
        if not hasattr(self.local, "scratch"):
            lane = self.tmp / threading.current_thread().name
            lane.mkdir()
            self.local.scratch = Scratch(self.history.clone(lane / "repo"), lane / "home", self.short_tmp,
                                         self.history.c)
        return fn(self.local.scratch)

    def __getitem__(self, name: str):
        return self.jobs[name].result(timeout=900)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> History:
    return build_history(tmp_path_factory.mktemp("flows") / "history")


@pytest.fixture(scope="module")
def short_tmp():
    """A folder with a short path for the commands' TMPDIRs (pytest's own are long)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="fkflows-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def main_repo(history, short_tmp) -> Scratch:
    """The history itself, for what never starts asv (refusals)."""
    return Scratch(history.repo, history.repo.parent / "home", short_tmp, history.c)


@pytest.fixture(scope="module")
def jobs(history, tmp_path_factory, short_tmp):
    lanes = Lanes(history, tmp_path_factory.mktemp("lanes"), short_tmp)
    # Longest first (asv runs: 8, 7, 7, 6, ...), so the two lanes end together.
    for name, fn in JOBS.items():
        lanes.submit(name, fn)
    yield lanes
    lanes.pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- processes

def marked(mark: str) -> list[tuple[int, int, int, str]]:
    """(pid, pgid, session, command) of every live process whose environment holds FK_FLOWS_MARK=mark."""
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"FK_FLOWS_MARK={mark}".encode() not in (d / "environ").read_bytes():
                continue
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] == "Z":
                continue
            out.append((int(d.name), int(stat[2]), int(stat[3]), (d / "cmdline").read_text().replace("\0", " ")))
        except (OSError, IndexError, ValueError):
            continue
    return out


def alive(pid: int) -> bool:
    try:
        return (pathlib.Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def gone(pgid: int, timeout: float = 5) -> bool:
    """Has process group ``pgid`` no process left (os.killpg(pgid, 0) fails) within ``timeout`` s?"""
    def check():
        try:
            os.killpg(pgid, 0)
            return False
        except ProcessLookupError:
            return True
    try:
        return wait_for(check, timeout, f"process group {pgid}")
    except AssertionError:
        return False


def group_members(pgid: int) -> list[str]:
    out = []
    for d in pathlib.Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if d.name.isdigit() and int(stat[2]) == pgid:
                out.append(f"{d.name} {stat[0]} {(d / 'cmdline').read_text().replace(chr(0), ' ')}")
        except (OSError, IndexError, ValueError):
            continue
    return out


def marked_with(mark: str, text: str) -> list | None:
    """``marked(mark)`` once a process whose command holds ``text`` is among them; None before."""
    got = marked(mark)
    return got if any(text in cmd for *_, cmd in got) else None


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def leftovers(run: Run, repo: pathlib.Path) -> list[str]:
    """What a command left behind: anything in its TMPDIR (but torch's compile cache, kept on purpose),
    temporary configs or gate folders in the repository, files git sees."""
    left = [str(p) for p in run.tmpdir.iterdir() if not p.name.startswith("torchinductor_")]
    left += [str(p) for p in repo.iterdir() if p.name.startswith((".asv-gate-", "fk-", "asv.conf.json."))]
    left += git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    return left


# ---------------------------------------------------------------- the jobs (each runs in a lane)

def job_bisect(good: str, bad: str):
    def job(s: Scratch):
        return s.run("bisect", f"{s.c[good][:12]}..{s.c[bad][:12]}", BENCH)
    return job


def job_gate(base: str, head: str, bench: str):
    def job(s: Scratch):
        summary = s.repo.parent / f"gate-{base}-{head}.md"
        run = s.run("gate", s.c[base], s.c[head], "--bench", bench, "--summary", str(summary))
        return run, (summary.read_text() if summary.exists() else None), leftovers(run, s.repo)
    return job


def job_history(s: Scratch):
    """Backfill h..f3 (f2 fails a case), rerun f3 with a case failing now, a corrupt results file, publish."""
    c, out = s.c, {}
    out["backfill"] = s.run("run", "--bench", BOTH, f"{c['h']}..{c['f3']}")
    out["after_backfill"] = {k: s.values(c[k]) for k in ("f1", "f2", "f3")}
    out["provenance"] = {k: [json.loads(p.read_text()) for p in s.provenance(c[k])] for k in ("f1", "f2", "f3")}
    files = {k: s.results_file(c[k]).read_bytes() for k in ("f1", "f2")}
    out["rerun"] = s.run("run", "--force", "--bench", BOTH, c["f3"], env={"FK_FLOWS_FAIL": "1"})
    out["after_rerun"] = s.values(c["f3"])
    out["rerun_provenance"] = json.loads(s.provenance(c["f3"])[-1].read_text())
    out["others_unchanged"] = {k: s.results_file(c[k]).read_bytes() == v for k, v in files.items()}
    # A truncated results file of the commit being run (its state file says it is finished).
    path = s.results_file(c["f1"])
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    out["corrupt_path"], out["state_before"] = path, s.state(c["f1"])
    out["corrupt"] = s.run("run", "--bench", BOTH, c["f1"], "--quiet")
    out["after_corrupt"] = s.values(c["f1"])
    out["aside"] = path.with_name(path.name + ".corrupt").exists()
    # A truncated provenance record, then publish.
    rec = s.provenance(c["f2"])[0]
    rec.write_text(rec.read_text()[:40])
    out["record"] = rec
    out["publish"] = s.run("publish")
    return out


def job_interrupt(sig: signal.Signals, commit: str):
    """``run`` of two families, ``sig`` while asv measures the second, with a straggler planted; then the rerun."""
    def job(s: Scratch):
        mark, stragglers = uuid.uuid4().hex, s.repo.parent / f"stragglers-{sig.name}"
        env = {"FK_FLOWS_MARK": mark, "FK_FLOWS_STRAGGLER": str(stragglers)}
        seen, phase = [], []

        def pids():
            return stragglers.read_text().split() if stragglers.exists() else []

        def on_line(proc, line):
            if "Inference: measuring" in line:
                phase.append(len(pids()))  # the first family's stragglers (one a process that called the op)
            if phase and not seen and "Benchmarking" in line:
                # The second family's benchmark process has called the op (its straggler is
                # there): asv, its forkserver, the benchmark and the straggler are running.
                wait_for(lambda: len(pids()) > phase[0], 60, "the second family's straggler")
                # Its pid is written as it starts: wait until /proc shows it too (once, in a clean-clone
                # CI run, the snapshot held everything but the straggler).
                seen.extend(wait_for(lambda: marked_with(mark, "sleep 600"), 10, "the straggler in /proc"))
                proc.send_signal(sig)

        c = s.c[commit]
        run = s.run("run", "--bench", TWO_FAMILIES, c, "--quiet", env=env, on_line=on_line)
        time.sleep(0.5)  # killed orphans are reaped by init
        out = {"run": run, "seen": seen, "survivors": marked(mark), "left": leftovers(run, s.repo),
               "stragglers": [int(p) for p in stragglers.read_text().split()] if stragglers.exists() else [],
               "state": s.state(c), "values": s.values(c),
               "status": json.loads(s.provenance(c)[-1].read_text())["status"] if s.provenance(c) else None}
        out["alive_stragglers"] = [p for p in out["stragglers"] if alive(p)]
        for p in out["alive_stragglers"]:  # ours: end them, by id
            os.kill(p, signal.SIGKILL)
        # Every process group seen (but ours: bench.py's) is gone; a killed process may stay a
        # zombie for a moment, until init reaps it.
        groups = {g for _, g, _, _ in seen} - {os.getpgid(0)}
        out["pgids_alive"] = {g: group_members(g) for g in groups if not gone(g)}
        out["rerun"] = s.run("run", "--bench", TWO_FAMILIES, c, "--quiet")
        out["rerun_values"] = s.values(c)
        return out
    return job


def job_sigterm_early(s: Scratch):
    """SIGTERM as soon as a commit starts (bench.py's own code, before or at asv's start)."""
    mark = uuid.uuid4().hex

    def on_line(proc, line):
        if line.startswith("== "):
            proc.send_signal(signal.SIGTERM)

    run = s.run("run", "--bench", BENCH, s.c["c4"], "--quiet", env={"FK_FLOWS_MARK": mark}, on_line=on_line)
    time.sleep(0.5)
    return run, marked(mark), leftovers(run, s.repo)


JOBS = {
    "bisect middle": job_bisect("h", "c5"),
    "bisect child": job_bisect("c2", "c5"),
    "bisect bad": job_bisect("c1", "c3"),
    "history": job_history,
    "interrupt SIGINT": job_interrupt(signal.SIGINT, "c1"),
    "interrupt SIGTERM": job_interrupt(signal.SIGTERM, "c2"),
    "interrupt SIGHUP": job_interrupt(signal.SIGHUP, "c5"),
    "gate slow": job_gate("c2", "c3", BENCH),
    "gate error": job_gate("h", "f2", CASE_1000_ONLY),
    "bisect no step": job_bisect("h", "c2"),
    "sigterm early": job_sigterm_early,
}


# ---------------------------------------------------------------- refusals (no asv; the lanes run meanwhile)

@pytest.fixture(scope="module", autouse=True)
def _lanes_started(jobs):
    """The lanes start with the module's first test."""


def refused(run: Run, command: str, *words: str) -> None:
    """One line on stderr, exit 2, nothing on stdout (asv never started)."""
    assert run.rc == 2, str(run)
    assert run.out == "", str(run)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench.py {command}: "), str(run)
    for w in words:
        assert w in lines[0], str(run)


def test_bisect_refusals(main_repo):
    """Item 1: one line and exit 2 for a range without `..`, an empty range, GOOD not an ancestor of BAD,
    a regex that matches no flagged benchmark; asv is never started."""
    s, c = main_repo, main_repo.c
    refused(s.run("bisect", c["c3"], BENCH), "bisect", "not a range")
    refused(s.run("bisect", f"{c['c3']}..{c['c3']}", BENCH), "bisect", "empty")
    refused(s.run("bisect", "nosuchrev..nosuchrev", BENCH), "bisect", "fatal: Needed a single revision")
    refused(s.run("bisect", f"{c['c5']}..{c['c3']}", BENCH), "bisect", "not an ancestor")
    refused(s.run("bisect", f"{c['f1']}..{c['c3']}", BENCH), "bisect", "not an ancestor")
    refused(s.run("bisect", f"{c['h']}..{c['c5']}", "NoSuchBench"), "bisect", "matches no flagged benchmark")
    # Matches benchmarks, but none that is flagged (track_time is shown, not flagged).
    refused(s.run("bisect", f"{c['h']}..{c['c5']}", r"Inference.track_time"), "bisect",
            "matches no flagged benchmark")
    # A GPU-grid case, as the site's bisect commands name them, on this CPU-only host: the refusal says
    # where such cases run (it used to name results/benchmarks.json).
    refused(s.run("bisect", f"{c['h']}..{c['c5']}", r"Training\.track_ratio\('fused', 'fp32 8192x4096'\)"),
            "bisect", "matches no flagged benchmark this host runs", "interpreter's cases only",
            "bisected and gated on a GPU host")
    assert not (s.repo / ".asv").exists()


def test_gate_refusals(main_repo):
    """Item 2: base == head (or head behind base) and a selection that matches no flagged benchmark: exit 2."""
    s, c = main_repo, main_repo.c
    refused(s.run("gate", c["c3"], c["c3"]), "gate", "same commit")
    refused(s.run("gate", c["c3"], c["c2"]), "gate", "is an ancestor of BASE")  # merge-base(c3, c2) is c2 itself
    refused(s.run("gate", c["c2"], c["c3"], "--bench", "NoSuchBench"), "gate", "matches no flagged benchmark")
    refused(s.run("gate", c["c2"], c["c3"], "--bench", "Inference.track_gbps"), "gate",
            "matches no flagged benchmark")
    assert not (s.repo / ".asv").exists()


def test_run_refusals(main_repo, tmp_path):
    """Item 3: a bad revision or range: one line with git's message, exit 2; arguments that look like
    options are refused, and no file is created or truncated."""
    s, c = main_repo, main_repo.c
    refused(s.run("run", "nosuchrev"), "run", "fatal: Needed a single revision")
    refused(s.run("run", f"nosuchrev..{c['c5']}"), "run", "fatal: Needed a single revision")
    refused(s.run("run", f"{c['c5']}..{c['c2']}"), "run", "not an ancestor")
    new, kept = tmp_path / "created", tmp_path / "kept"
    kept.write_text("keep me\n")
    refused(s.run("run", "--", f"--output={new}"), "run", "looks like an option")
    refused(s.run("run", f"{c['c2']}..--output={kept}"), "run", "looks like an option")
    refused(s.run("run", "--", "--output=created-in-repo"), "run", "looks like an option")
    refused(s.run("gate", "--", f"--output={new}", c["c3"]), "gate", "looks like an option")
    refused(s.run("run", c["c2"], "--bench", "NoSuchBench"), "run", "matches no benchmark of the suite")
    refused(s.run("run", c["c2"], "--bench", "("), "run", "not a valid regex")
    refused(s.run("run", c["c2"], env={"FUSEDKERNEL_MACHINE": "../evil"}), "run", "no machine name")
    assert not new.exists() and not (s.repo / "created-in-repo").exists()
    assert kept.read_text() == "keep me\n"
    assert not (s.repo / ".asv").exists()


# ---------------------------------------------------------------- 1. bisect

def measured_order(run: Run) -> list[str]:
    """The commits asv measured, in order (8-digit prefixes, one per `measuring` line)."""
    return [m.group(1) for m in re.finditer(r"^(\w{8}) Inference: measuring", run.out, re.M)]


def check_bisect(run: Run, c: dict, good: str, bad: str, named: str, parent: str, order: list[str]):
    assert run.rc == 0, str(run)
    # GOOD and BAD first, then the binary search, then parent and named alternately.
    assert measured_order(run) == [c[k][:8] for k in order], str(run)
    assert measured_order(run)[:2] == [c[good][:8], c[bad][:8]]
    assert measured_order(run)[-4:] == [c[parent][:8], c[named][:8]] * 2
    # The family's threshold from asv.conf.json (the scratch history's: 1.0 for this case).
    assert f"bisect: {CASE}, threshold x6," in run.out, str(run)
    m = re.search(r"^bisect: first slow commit (\w{40}) \(\w+ (.*)\): first commit beyond x6 of GOOD", run.out, re.M)
    assert m and m.group(1) == c[named], str(run)
    conf = re.search(r"^bisect: re-measured, alternating: parent ([\d.e+]+), named ([\d.e+]+), ratio ([\d.]+), "
                     r"Mann-Whitney p ([\d.e-]+)$", run.out, re.M)
    assert conf, str(run)
    before, after, ratio, p = (float(v) for v in conf.groups())
    assert ratio == pytest.approx(after / before, rel=2e-3) and ratio > 6, str(run)
    assert p < 0.002, str(run)  # 2 x 8 samples a side, completely apart


def test_bisect_names_goods_child(jobs, history):
    """Item 1: the first slow commit is GOOD's child."""
    check_bisect(jobs["bisect child"], history.c, "c2", "c5", named="c3", parent="c2",
                 order=["c2", "c5", "c3", "c2", "c3", "c2", "c3"])


def test_bisect_names_a_commit_in_the_middle(jobs, history):
    """Item 1: the first slow commit lies between GOOD and BAD (unchanged commits on both sides)."""
    check_bisect(jobs["bisect middle"], history.c, "h", "c5", named="c3", parent="c2",
                 order=["h", "c5", "c2", "c3", "c2", "c3", "c2", "c3"])


def test_bisect_names_bad_itself(jobs, history):
    """Item 1: the first slow commit is BAD."""
    check_bisect(jobs["bisect bad"], history.c, "c1", "c3", named="c3", parent="c2",
                 order=["c1", "c3", "c2", "c2", "c3", "c2", "c3"])


def test_bisect_without_a_step_exits_1(jobs, history):
    """Item 1: a range whose BAD is not beyond the threshold of GOOD names nothing, exit 1."""
    run = jobs["bisect no step"]
    assert run.rc == 1, str(run)
    assert measured_order(run) == [history.c["h"][:8], history.c["c2"][:8]], str(run)
    assert re.search(r"^bisect: no commit named: BAD \w+ is not a step from GOOD \(.*\): BAD/GOOD = [\d.]+, "
                     r"(not beyond x6|beyond x6 but not significant \(p [\d.e-]+, needs < 0\.002\))$", run.out, re.M), \
        str(run)
    assert "first slow commit" not in run.out


# ---------------------------------------------------------------- 2. gate

def test_gate_fails_a_slower_head_and_streams_its_progress(jobs, history):
    """Item 2: exit 1 with the table; progress lines reach a pipe while the gate runs, not at its end."""
    run, summary, left = jobs["gate slow"]
    assert run.rc == 1, str(run)
    assert "## Benchmark gate: FAILED: 1 slower beyond the threshold" in run.out, str(run)
    assert "1 flagged values compared" in run.out, run  # the one measured case, not the suite's NaNs
    assert re.search(rf"^\| {re.escape(CASE)} \| \S+ \| \S+ \| \S+ \| \S+ \| REGRESSED \(> x6, p < 0\.002\) \|$", run.out,
                     re.M), str(run)
    assert "p < 0.002 (with too few samples" in run.out and summary.count("Mann-Whitney test") == 1, str(run)
    assert summary and "FAILED" in summary
    # Streamed: asv's "Benchmarking" line of the base came well before its result ("Setting up ... ok"):
    # a block-buffered stdout hands both over together when the next commit starts.
    assert run.at("Setting up") - run.at("Benchmarking") > 1.0, str(run)
    assert run.at(f"gate: base {history.c['c2'][:10]}") < run.wall - 5, str(run)
    assert left == [], left


def test_gate_run_error_is_exit_3(jobs):
    """Item 2: a failing case is a run error (exit 3), neither "passed" nor "slower"."""
    run, summary, left = jobs["gate error"]
    assert run.rc == 3, str(run)
    assert "## Benchmark gate: ERROR" in run.out, str(run)
    assert CASE_1000 in run.out, str(run)
    assert "FAILED" not in run.out and "passed" not in run.out, str(run)
    assert summary and "ERROR" in summary
    assert left == [], left


# ---------------------------------------------------------------- 3. run and backfill

def test_backfill_records_a_failed_case_and_goes_on(jobs, history):
    """Item 3: f2 fails one case: recorded as failed, its provenance written (status, failed cases), f3 still
    measured; exit 1 and the last line says how many cases failed where."""
    got, c = jobs["history"], history.c
    run = got["backfill"]
    assert run.rc == 1, str(run)
    assert [m for m in re.findall(r"^== (\w{10}) \((\d)/3\)", run.out, re.M)] == \
        [(c["f1"][:10], "1"), (c["f2"][:10], "2"), (c["f3"][:10], "3")], str(run)
    assert run.lines[-1][1] == f"bench.py run: 3 commits on {MACHINE}, 1 failed cases ({c['f2'][:10]}: 1)", str(run)
    vals = got["after_backfill"]
    assert vals["f2"][CASE_1000] is None and vals["f2"][CASE] > 0
    for k in ("f1", "f3"):
        assert vals[k][CASE] > 0 and vals[k][CASE_1000] > 0, (k, vals[k])
    prov = got["provenance"]
    assert [(r["status"], r["failed_cases"]) for r in prov["f2"]] == [("failed cases", [CASE_1000])]
    assert [(r["status"], r["failed_cases"]) for r in prov["f1"] + prov["f3"]] == [("complete", [])] * 2


def test_rerun_with_a_case_failing_now_keeps_the_earlier_value(jobs, history):
    """Item 3: a rerun where a case now fails reports the failure and keeps the earlier value; the other
    commits' results are untouched."""
    got, c = jobs["history"], history.c
    run = got["rerun"]
    assert run.rc == 1, str(run)
    assert run.lines[-1][1] == f"bench.py run: 1 commits on {MACHINE}, 1 failed cases ({c['f3'][:10]}: 1)", str(run)
    assert got["after_rerun"][CASE_1000] == got["after_backfill"]["f3"][CASE_1000]  # kept, not nulled
    assert got["after_rerun"][CASE] > 0
    assert (got["rerun_provenance"]["status"], got["rerun_provenance"]["failed_cases"]) == \
        ("failed cases", [CASE_1000])
    assert got["others_unchanged"] == {"f1": True, "f2": True}


# ---------------------------------------------------------------- 4. interrupts

@pytest.mark.parametrize("sig, commit", [(signal.SIGINT, "c1"), (signal.SIGTERM, "c2"), (signal.SIGHUP, "c5")])
def test_interrupt_stops_everything_and_keeps_finished_families(jobs, history, sig, commit):
    """Item 4: SIGINT/SIGTERM/SIGHUP (a closed terminal) while asv measures the second family: no process of
    asv's session survives (a straggler in a process group of its own included), the first family's results
    and state are kept, the provenance says "interrupted", nothing temporary is left, and the next run measures
    only the second family."""
    if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
        pytest.skip("SIGHUP is ignored here (nohup): bench.py keeps it ignored")
    got, c = jobs[f"interrupt {sig.name}"], history.c[commit]
    run = got["run"]
    assert run.rc == {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}[sig], str(run)
    assert f"interrupted ({sig.name}); finished results are kept" in run.stderr, str(run)
    commands = [cmd for _, _, _, cmd in got["seen"]]
    assert any("-m asv run" in cmd for cmd in commands) and any("sleep 600" in cmd for cmd in commands), \
        "\n".join(commands + [f"stragglers: {got['stragglers']}", str(run)])
    assert len(got["seen"]) >= 4, commands  # bench.py, asv, the forkserver and benchmark, the straggler
    assert got["survivors"] == [], got["survivors"]
    assert got["alive_stragglers"] == [], got["alive_stragglers"]
    assert got["pgids_alive"] == {}, got["pgids_alive"]
    assert got["left"] == [], got["left"]
    assert list(got["state"]) == ["Forward"], got["state"]
    assert got["values"][FORWARD_CASE] > 0
    assert not any(k.startswith("add_rmsnorm.Inference.") for k in got["values"]), got["values"]
    assert got["status"] == "interrupted"
    rerun = got["rerun"]
    assert rerun.rc == 0, str(rerun)
    assert f"{c[:8]} Forward: finished in an earlier run, kept" in rerun.out, str(rerun)
    assert f"{c[:8]} Forward: measuring" not in rerun.out and f"{c[:8]} Inference: measuring" in rerun.out, str(rerun)
    assert got["rerun_values"][FORWARD_CASE] == got["values"][FORWARD_CASE]
    assert got["rerun_values"][CASE] > 0


def test_sigterm_outside_asv_cleans_up(jobs):
    """Item 4: SIGTERM while bench.py itself works (a commit starting): exit 143, nothing left behind."""
    run, survivors, left = jobs["sigterm early"]
    assert run.rc == 143, str(run)
    assert "interrupted (SIGTERM)" in run.stderr, str(run)
    assert survivors == [] and left == [], (survivors, left)


# ---------------------------------------------------------------- 5. corrupt files

def test_truncated_results_file_is_moved_aside_and_measured_again(jobs, history):
    """Item 5: the commit's truncated results file: a warning naming it, moved aside, measured again (its
    state file said finished), exit 0."""
    got, c = jobs["history"], history.c
    run = got["corrupt"]
    assert list(got["state_before"]) == ["Inference"]  # finished, says the state
    assert run.rc == 0, str(run)
    assert f"warning: {got['corrupt_path']} is not a readable asv result" in run.out, str(run)
    assert f"{c['f1'][:8]} Inference: measuring" in run.out and "finished in an earlier run" not in run.out, str(run)
    assert got["aside"]
    assert got["after_corrupt"][CASE] > 0 and got["after_corrupt"][CASE_1000] > 0
    assert run.lines[-1][1] == f"bench.py run: 1 commits on {MACHINE}, 0 failed cases", str(run)


def test_truncated_provenance_record_is_skipped_by_publish(jobs):
    """Item 5: publish warns naming the truncated record, skips it, exits 0."""
    got = jobs["history"]
    run = got["publish"]
    assert run.rc == 0, str(run)
    assert f"warning: provenance record {got['record']} skipped" in run.stderr, str(run)
