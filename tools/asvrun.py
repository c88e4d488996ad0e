"""Running asv for the tracker: mode, machine, config, families, logs, signals, results.

Every asv call goes through :func:`asv`: asv runs in a session of its own
(so Ctrl-C and SIGTERM reach it and every child, and nothing outlives us),
its full output goes to a log file, and only its progress lines reach the
terminal. A commit is measured one benchmark family (one class of the suite,
one measuring process) at a time, each saved by asv when it ends, so an
interrupt loses at most the family in progress and the next run measures
only what is missing (``--skip-existing-successful``).

Modes: on a GPU host the results are the committed history (``results/``);
without one, the kernels run in Triton's interpreter and the results go to
``.asv/interpreter/results`` (git-ignored, never beside the GPU's history).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import site
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULE = "add_rmsnorm"
FAMILIES = ["Forward", "ForwardResidual", "Inference", "Training", "HostRatio"]
LOGS = ROOT / ".asv" / "logs"


class Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped an asv run (asv and its children were stopped too)."""


def detect() -> tuple[str, str]:
    """(mode, machine name) for this host: ("gpu", e.g. "nvidia-h200") or ("interpreter", "cpu-triton-interpreter")."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        mode, machine = "gpu", re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    else:
        mode, machine = "interpreter", "cpu-triton-interpreter"
    return mode, os.environ.get("FUSEDKERNEL_MACHINE", machine)


def results_dir(mode: str) -> pathlib.Path:
    return ROOT / "results" if mode == "gpu" else ROOT / ".asv" / "interpreter" / "results"


def provenance_dir(mode: str) -> pathlib.Path:
    return ROOT / "provenance" if mode == "gpu" else ROOT / ".asv" / "interpreter" / "provenance"


def html_dir(mode: str) -> pathlib.Path:
    return ROOT / ".asv" / "html" if mode == "gpu" else ROOT / ".asv" / "html" / "interpreter"


def load_conf() -> dict:
    from asv import util

    return util.load_json(str(ROOT / "asv.conf.json"), js_comments=True)


@contextlib.contextmanager
def config(mode: str, results: pathlib.Path | None = None):
    """A temporary asv config for ``mode`` (absolute paths; removed on exit, also on an interrupt).

    ``results`` overrides the results folder (the gate, bisect and compare
    measure into folders of their own, never into the history).
    """
    conf = load_conf()
    conf["repo"] = str(ROOT)
    for key in ("benchmark_dir", "env_dir"):
        conf[key] = str(ROOT / conf[key])
    conf["results_dir"] = str(results or results_dir(mode))
    # {conf_dir} would name the temporary folder: the tools live in the repository.
    conf["install_command"] = [c.replace("{conf_dir}", str(ROOT)) for c in conf["install_command"]]
    conf["html_dir"] = str(html_dir(mode))
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
    env["FUSEDKERNEL_HOST_SITE"] = os.pathsep.join(site.getsitepackages())
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

    Raises :class:`Interrupted` after stopping asv's whole process group when
    SIGINT or SIGTERM arrives.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "asv", *args]
    stop = []

    def on_signal(signum, _frame):
        stop.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)

    with open(log, "a") as out:
        out.write("+ " + " ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for line in proc.stdout:
                out.write(line)
                if PROGRESS.match(line) and "===" not in line and not stop:
                    echo("  " + line.strip()[:150])
            rc = proc.wait()
        finally:
            if proc.poll() is None:  # an exception while reading: asv must not outlive us
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for s, handler in old.items():
                signal.signal(s, handler)
    if stop:
        # asv was asked to stop; anything it left behind in its group goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise Interrupted(signal.Signals(stop[0]).name)
    return rc


def family_regex(family: str, regexes: list[str]) -> str:
    """One asv -b regex: the benchmarks of ``family`` that also match one of ``regexes`` (all when none)."""
    head = rf"^(?=add_rmsnorm\.{family}\.)"
    return head + (f"(?=.*?(?:{'|'.join(regexes)}))" if regexes else "")


def result_files(results: pathlib.Path, machine: str, commit: str) -> list[pathlib.Path]:
    return sorted((results / machine).glob(f"{commit[:8]}-*.json"))


def readable(path: pathlib.Path, warn=print) -> bool:
    """False (and a warning naming it) for a results file that is not valid JSON: it is moved aside."""
    try:
        json.loads(path.read_text())
        return True
    except (OSError, ValueError, UnicodeDecodeError) as e:
        aside = path.with_name(path.name + ".corrupt")
        path.replace(aside)
        warn(f"warning: {path} is not a readable asv result ({type(e).__name__}); moved to {aside.name}, "
             "its values will be measured again")
        return False


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
            values = row.get("result")
            if values is None:
                out.append(name)
                continue
            combos = list(itertools.product(*row["params"])) if row["params"] else [()]
            out += [f"{name}({', '.join(c)})" for c, v in zip(combos, values) if v is None]
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
    if restored:
        path.write_text(json.dumps(after, indent=None, sort_keys=True))
    return restored
