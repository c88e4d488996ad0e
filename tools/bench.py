"""Run the asv suite on commits of this repo and publish the site.

    python tools/bench.py run [REV ...]   benchmark each commit (default HEAD), one
                                          at a time at its own code; REV may be a
                                          range (A..B), backfilled oldest first
    python tools/bench.py publish         asv publish + provenance page

Mode: with a CUDA GPU, shapes are the GPU grid and the machine is named after
the GPU model (e.g. ``nvidia-h200``); without one, kernels run in Triton's
interpreter on small shapes under the machine ``cpu-triton-interpreter``.
Set FUSEDKERNEL_MACHINE to name a machine yourself (one per runner). On a host
with no package registry, ``--wheels DIR`` installs asv's environment needs
(asv-runner, pip, wheel, setuptools) from that folder.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shlex
import site
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import provenance  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def detect() -> tuple[str, str]:
    """(mode, machine name) for this host."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        mode, machine = "gpu", re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    else:
        mode, machine = "interpreter", "cpu-triton-interpreter"
    return mode, os.environ.get("FUSEDKERNEL_MACHINE", machine)


def asv_env(mode: str, wheels: str | None) -> dict:
    env = dict(os.environ)
    env["FUSEDKERNEL_HOST_SITE"] = os.pathsep.join(site.getsitepackages())
    if mode == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    if wheels:
        env["PIP_NO_INDEX"] = "1"
        env["PIP_FIND_LINKS"] = str(pathlib.Path(wheels).resolve())
    return env


def asv(*args: str, env: dict | None = None, check: bool = True) -> int:
    cmd = [sys.executable, "-m", "asv", *args]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, check=check).returncode


def commits(revs: list[str]) -> list[str]:
    """Full hashes, oldest first; a bare REV means that one commit."""
    out = []
    for rev in revs:
        spec = [rev] if ".." in rev else ["-1", rev]
        out += subprocess.run(["git", "rev-list", "--reverse", *spec], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.split()
    return out


def run(revs: list[str], wheels: str | None, asv_args: list[str]) -> None:
    mode, machine = detect()
    env = asv_env(mode, wheels)
    asv("machine", "--machine", machine, "--yes", env=env)
    for commit in commits(revs or ["HEAD"]):
        started_at, start = provenance.now(), provenance.gpu_snapshot()
        asv("run", f"{commit}^!", "--machine", machine, *asv_args, env=env)
        provenance.record(ROOT / "provenance" / machine, machine, commit, mode, start,
                          provenance.gpu_snapshot(), started_at)


def publish() -> None:
    asv("publish")
    html_dir = ROOT / ".asv" / "html"
    n = provenance.render(ROOT / "provenance", html_dir / "provenance.html")
    print(f"site: {html_dir}/index.html  (provenance of {n} runs: {html_dir}/provenance.html)")
    print(f"browse it with: python -m asv preview  (or any static file server on {html_dir})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark commits and append to results/")
    r.add_argument("revs", nargs="*", help="commits or ranges A..B (default HEAD)")
    r.add_argument("--wheels", help="folder of wheels for offline asv environments")
    r.add_argument("--asv-args", default="", help="extra arguments for asv run, e.g. '-b Forward'")
    sub.add_parser("publish", help="build the HTML site from results/")
    a = p.parse_args()
    if a.cmd == "run":
        run(a.revs, a.wheels, shlex.split(a.asv_args))
    else:
        publish()


if __name__ == "__main__":
    main()
