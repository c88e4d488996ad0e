"""Running asv for the tracker: mode, machine, config, families, logs, signals, results.

Every asv call goes through :func:`asv`: asv runs in a session of its own
(SIGINT, SIGTERM and SIGHUP are passed on to it as SIGINT, and whatever is
left in that session when it ends is killed: nothing outlives us) with a
temporary folder of its own (removed afterwards: what an interrupted asv
leaves there goes too), its full output goes to a log file, and only its
progress lines reach the terminal. A commit is measured one benchmark family
(one class of the suite, one measuring process) at a time, each saved by asv
when it ends, so an interrupt loses at most the family in progress and the
next run measures only what is missing (``--skip-existing-successful``).

Modes: on a GPU host the results are the committed history (``results/``);
without one, the kernels run in Triton's interpreter and the results go to
``.asv/interpreter/results`` (git-ignored, never beside the GPU's history).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import pathlib
import re
import signal
import shlex
import site
import subprocess
import sys
import tempfile
import threading

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULE = "add_rmsnorm"
FAMILIES = ["Forward", "ForwardResidual", "Inference", "Training", "HostRatio"]
LOGS = ROOT / ".asv" / "logs"


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP stopped the run (and asv with its children, where one was running)."""


# A machine name is a folder name under results/ and provenance/: nothing that leaves them or nests.
MACHINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def valid_machine(name: str) -> bool:
    return bool(MACHINE_NAME.fullmatch(name)) and ".." not in name


def detect() -> tuple[str, str]:
    """(mode, machine name) for this host: ("gpu", e.g. "nvidia-h200") or ("interpreter", "cpu-triton-interpreter").

    TRITON_INTERPRET=1 asks for the interpreter on a GPU host too: the suite would otherwise time the
    interpreter's cases under the GPU's name, into its history.
    """
    import torch
    import triton

    if torch.cuda.is_available() and not triton.knobs.runtime.interpret:
        name = torch.cuda.get_device_name(0)
        mode, machine = "gpu", re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    else:
        mode, machine = "interpreter", "cpu-triton-interpreter"
    machine = os.environ.get("FUSEDKERNEL_MACHINE", machine)
    if not valid_machine(machine):
        raise ValueError(f"machine name {machine!r}: letters, digits, '.', '_' and '-', a letter or digit first, "
                         "no '..'")
    return mode, machine


def results_dir(mode: str) -> pathlib.Path:
    return ROOT / "results" if mode == "gpu" else ROOT / ".asv" / "interpreter" / "results"


def provenance_dir(mode: str) -> pathlib.Path:
    return ROOT / "provenance" if mode == "gpu" else ROOT / ".asv" / "interpreter" / "provenance"


SITE = ROOT / ".asv" / "html"


def html_dir(mode: str, site: pathlib.Path = SITE) -> pathlib.Path:
    """Where ``mode``'s asv site goes in ``site`` (the published one, or one being built)."""
    return site if mode == "gpu" else site / "interpreter"


def load_conf() -> dict:
    from asv import util

    path = ROOT / "asv.conf.json"
    try:
        return util.load_json(str(path), js_comments=True)
    except ValueError as e:  # asv's message names "<string>", not the file
        raise ValueError(f"{path}: not valid JSON ({e})") from None


@contextlib.contextmanager
def config(mode: str, results: pathlib.Path | None = None, site: pathlib.Path = SITE):
    """A temporary asv config for ``mode`` (absolute paths; removed on exit, also on an interrupt).

    ``results`` overrides the results folder (the gate, bisect and compare
    measure into folders of their own, never into the history); ``site``, the
    site's folder (publish builds a new one beside the published one).
    """
    conf = load_conf()
    conf["repo"] = str(ROOT)
    for key in ("benchmark_dir", "env_dir"):
        conf[key] = str(ROOT / conf[key])
    conf["results_dir"] = str(results or results_dir(mode))
    # {conf_dir} would name the temporary folder: the tools live in the repository. Quoted for asv's shlex split
    # (a checkout path with a space), braces doubled for its str.format.
    root = shlex.quote(str(ROOT)).replace("{", "{{").replace("}", "}}")
    conf["install_command"] = [c.replace("{conf_dir}", root) for c in conf["install_command"]]
    conf["html_dir"] = str(html_dir(mode, site))
    if mode == "interpreter":
        # CPU times in the interpreter: nothing is flagged there.
        conf["regressions_first_commits"] = {".*": None}
    with tempfile.TemporaryDirectory(prefix="fk-asv-conf-") as tmp:
        path = pathlib.Path(tmp) / "asv.conf.json"
        path.write_text(json.dumps(conf))
        yield path


def asv_env(mode: str, wheels: str | None, regexes: list[str] | None = None) -> dict:
    """The environment asv runs in: the host's site-packages (for torch), the mode, the selection."""
    env = dict(os.environ)
    # Only the folders that exist: Debian-style interpreters list ones that do not (the H200's
    # python3 lists three), which tools/asv_env_install.py refuses as typos.
    host_site = [d for d in site.getsitepackages() if os.path.isdir(d)]
    if not host_site:
        raise SystemExit(f"none of this interpreter's site-packages folders exists ({site.getsitepackages()}): "
                         "asv's environment could not borrow its torch")
    env["FUSEDKERNEL_HOST_SITE"] = os.pathsep.join(host_site)
    env["FUSEDKERNEL_BENCH_REGEX"] = json.dumps(regexes or [])
    env["PYTHONUNBUFFERED"] = "1"
    if mode == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    if wheels:
        env["PIP_NO_INDEX"] = "1"
        env["PIP_FIND_LINKS"] = str(pathlib.Path(wheels).resolve())
    return env


PROGRESS = re.compile(r"^\s*(\[\s*\d+(\.\d+)?%\]|·* ?(Creating|Installing|Building|Discovering|Running|"
                      r"Uninstalling|Setting up|Benchmarking)\b)")


def asv(args: list[str], env: dict, log: pathlib.Path, echo=print) -> int:
    """Run ``python -m asv ARGS``; its output to ``log``, its progress lines to ``echo``; its exit status.

    Raises :class:`Interrupted` after stopping asv and every process of its
    session when SIGINT, SIGTERM or SIGHUP arrives (asv runs in a session of
    its own: a closed terminal's SIGHUP reaches only us). A SIGHUP ignored
    where we started (nohup) stays ignored.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "asv", *args]
    stop, timers, proc = [], [], None

    def on_signal(signum, _frame):
        stop.append(signum)
        if proc is None:  # before asv started: it is not started at all
            return
        if len(stop) == 1:
            # asv stops its benchmark and install processes itself on SIGINT; a
            # second signal, or an asv still running after the grace period, is not waited for.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            timers.append(threading.Timer(GRACE_S, kill_session, (proc.pid,)))
            timers[0].daemon = True
            timers[0].start()
        else:
            kill_session(proc.pid)

    # asv's temporary files (setup_cache folders, forkserver sockets, result files) go to a folder
    # of ours: an interrupted asv does not remove its own. torch's compile cache stays where it was.
    env = {"TORCHINDUCTOR_CACHE_DIR": inductor_cache(), **env}
    with tempfile.TemporaryDirectory(prefix="fk-") as tmp, open(log, "a") as out:
        # ...unless the forkserver's socket path would grow past what a socket address holds.
        if len(os.path.join(tmp, FORKSERVER_SOCKET)) <= SOCKET_PATH_MAX:
            env["TMPDIR"] = tmp
        out.write("+ " + " ".join(cmd) + "\n")
        out.flush()
        # The handlers come first: a signal between the start and them would leave asv running.
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
               if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN}
        try:
            if not stop:
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
                if stop:  # the signal came while it started
                    kill_session(proc.pid)
            for line in proc.stdout if proc else ():
                out.write(line)
                if PROGRESS.match(line) and "===" not in line and not stop:
                    echo("  " + line.strip()[:150])
            rc = proc.wait() if proc else 1
        finally:
            if proc is not None:
                if proc.poll() is None:  # an exception while reading: asv must not outlive us
                    kill_session(proc.pid)
                    proc.wait()
                # asv runs its children in process groups of their own (setpgid), all in
                # its session: a killpg of asv's group does not reach them.
                kill_session(proc.pid)
            for t in timers:
                t.cancel()
            for s, handler in old.items():
                signal.signal(s, handler)
    if stop:
        raise Interrupted(signal.Signals(stop[0]).name)
    return rc


def inductor_cache() -> str:
    """torch inductor's default cache folder (torch._inductor's default_cache_dir), for this TMPDIR."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


FORKSERVER_SOCKET = "asv-forkserver-xxxxxxxx/socket"  # asv's mkdtemp(prefix="asv-forkserver-") + "socket"
SOCKET_PATH_MAX = 103  # sun_path: 108 bytes on Linux, 104 on macOS, with its terminating NUL

GRACE_S = 20  # how long asv may take to stop after SIGINT before its whole session is killed


def session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (/proc on Linux, ``ps`` elsewhere)."""
    proc = pathlib.Path("/proc")
    if proc.is_dir():
        out = []
        for d in proc.iterdir():
            if d.name.isdigit():
                try:
                    # Field 6 of stat is the session; the command name before it may hold spaces.
                    if int((d / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                        out.append(int(d.name))
                except (OSError, ValueError, IndexError):
                    continue
        return out
    ps = subprocess.run(["ps", "-A", "-o", "pid=,sess="], capture_output=True, text=True)
    return [int(p) for p, s in (line.split() for line in ps.stdout.splitlines() if line.strip()) if int(s) == sid]


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (asv's, started with start_new_session)."""
    for pid in session_pids(sid):
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def family_regex(family: str, regexes: list[str]) -> str:
    """One asv -b regex: the benchmarks of ``family`` that also match one of ``regexes`` (all when none)."""
    head = rf"^(?=add_rmsnorm\.{family}\.)"
    return head + (f"(?=.*?(?:{'|'.join(map(scoped, regexes))}))" if regexes else "")


LEADING_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")


def scoped(regex: str) -> str:
    """``regex`` with its leading global flags made local to it: ``(?i)abc`` -> ``(?i:abc)``.

    Python takes global flags only at the start of a whole pattern, and
    :func:`family_regex` puts each regex inside a larger one (where they
    would also reach the other regexes). A newline closes a verbose (``x``)
    regex's trailing comment before the group's ``)``.
    """
    flags = ""
    while m := LEADING_FLAGS.match(regex):
        flags, regex = flags + m.group(1), regex[m.end():]
    return f"(?{flags}:{regex}{chr(10) if 'x' in flags else ''})" if flags else regex


def result_files(results: pathlib.Path, machine: str, commit: str) -> list[pathlib.Path]:
    return sorted((results / machine).glob(f"{commit[:8]}-*.json"))


def readable(path: pathlib.Path, warn=print) -> bool:
    """False (and a warning naming it) for a results file that is not an asv result: it is moved aside.

    Valid JSON of another shape (``[]``, ``{}``) is moved aside too: asv and
    the tools would fail on it at every run.
    """
    try:
        why = None if is_result(json.loads(path.read_text())) else "not an asv results object"
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = type(e).__name__
    if why is None:
        return True
    # Never over an earlier one: a file moved aside may hold values worth recovering by hand.
    aside, k = path.with_name(path.name + ".corrupt"), 1
    while aside.exists():
        k += 1
        aside = path.with_name(f"{path.name}.corrupt{k}")
    path.replace(aside)
    warn(f"warning: {path} is not a readable asv result ({why}); moved to {aside.name}, "
         "its values will be measured again")
    return False


def is_result(data) -> bool:
    """Has ``data`` the shape of an asv results file (the keys asv and the tools read)?"""
    return (isinstance(data, dict) and isinstance(data.get("results"), dict)
            and isinstance(data.get("result_columns"), list) and isinstance(data.get("commit_hash"), str))


def failed_cases(results: pathlib.Path, machine: str, commit: str, benchmarks: list[str] | None = None) -> list[str]:
    """'benchmark(params)' of every stored value of ``commit`` that failed (None)."""
    import itertools

    out = []
    for path in result_files(results, machine, commit):
        data = json.loads(path.read_text())
        cols = data.get("result_columns", [])
        for name, row in data.get("results", {}).items():
            if benchmarks is not None and name not in benchmarks:
                continue
            row = dict(zip(cols, row))
            combos = list(itertools.product(*row["params"])) if row.get("params") else [()]
            values = row.get("result") or [None] * len(combos)  # None: the whole benchmark failed
            out += [f"{name}({', '.join(c)})" if c else name for c, v in zip(combos, values) if v is None]
    return out


def keep_earlier_values(path: pathlib.Path, before: dict | None) -> int:
    """Put back, into the results file ``path``, values that a rerun turned into failures; return how many.

    asv replaces a stored value by None when the case fails in a later run of
    the same commit: a failure must not erase a finished measurement.
    """
    if before is None or not path.exists():
        return 0
    after = json.loads(path.read_text())
    cols = after["result_columns"]
    restored = 0
    for name, row in after["results"].items():
        old = before.get("results", {}).get(name)
        if old is None or before.get("result_columns") != cols:
            continue
        new, old = dict(zip(cols, row)), dict(zip(cols, old))
        if new["params"] != old["params"] or new.get("version") != old.get("version") or old["result"] is None:
            continue
        new_vals = new["result"] or [None] * len(old["result"])
        for i, (nv, ov) in enumerate(zip(new_vals, old["result"])):
            if nv is None and ov is not None:
                new_vals[i] = ov
                for col in cols:
                    if col not in ("result", "params", "version", "started_at", "duration") and old.get(col):
                        new.setdefault(col, None)
                        new[col] = new[col] or [None] * len(old["result"])
                        new[col][i] = old[col][i]
                restored += 1
        new["result"] = new_vals
        after["results"][name] = [new.get(c) for c in cols]
    if restored:  # whole or not at all: the file holds every finished value of the commit
        write_whole(path, json.dumps(after, indent=None, sort_keys=True))
    return restored


def write_whole(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: an interrupt leaves the old file or
    the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    raise SystemExit("tools/asvrun.py is a module of the tracker's command line: python tools/bench.py --help")
