"""Provenance of a benchmark run: GPU, driver, clocks, software versions.

One JSON record per run of a commit under ``provenance/<machine>/``, written
by tools/bench.py around each commit's asv run (clocks read at its start and
end), and rendered by ``publish`` as ``provenance.html`` in the site.
"""

from __future__ import annotations

import datetime
import html
import json
import pathlib
import platform
import subprocess

QUERY = "name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw"


def gpu_snapshot() -> dict:
    """Read-only ``nvidia-smi`` query of GPU 0 (never changes a setting); {} without one."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    name, driver, sm, mem, temp, power = [v.strip() for v in out.strip().split(",")]
    return {"gpu": name, "driver": driver, "sm_clock_mhz": sm, "mem_clock_mhz": mem,
            "temperature_c": temp, "power_w": power}


def software() -> dict:
    import torch
    import triton

    return {"python": platform.python_version(), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "host": platform.node()}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def record(folder: pathlib.Path, machine: str, commit: str, mode: str, start: dict, end: dict,
           started_at: str) -> pathlib.Path:
    """Write one run's provenance to ``folder/<commit12>-<start time>.json``; return its path.

    GPU facts come from ``start``; clocks are kept from both ``start`` and ``end``.
    One file per run, so re-running a commit adds a record instead of replacing one.
    """
    rec = {"machine": machine, "commit": commit, "mode": mode, "started_at": started_at,
           "ended_at": now(), **software(),
           "gpu": start.get("gpu"), "driver": start.get("driver"),
           "start": {k: start.get(k) for k in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w")},
           "end": {k: end.get(k) for k in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w")}}
    stamp = started_at.replace("-", "").replace(":", "")[:15]
    path = folder / f"{commit[:12]}-{stamp}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return path


def render(prov_dir: pathlib.Path, out: pathlib.Path) -> int:
    """Write an HTML table of every record under ``prov_dir``; return the record count."""
    recs = [json.loads(p.read_text()) for p in sorted(prov_dir.glob("*/*.json"))]
    recs.sort(key=lambda r: (r["machine"], r["started_at"]))
    cols = ["machine", "commit", "started_at", "mode", "gpu", "driver", "torch", "triton",
            "python", "cuda", "sm_clock_mhz", "mem_clock_mhz"]

    def cell(r, c):
        if c in ("sm_clock_mhz", "mem_clock_mhz"):
            return f"{r['start'].get(c)} &rarr; {r['end'].get(c)}"
        v = r.get(c)
        return html.escape(str(v[:10] if c == "commit" else v))

    rows = "\n".join("<tr>" + "".join(f"<td>{cell(r, c)}</td>" for c in cols) + "</tr>" for r in recs)
    head = "".join(f"<th>{c}</th>" for c in cols)
    out.write_text(f"""<!doctype html><meta charset="utf-8"><title>fusedkernel provenance</title>
<style>body{{font-family:sans-serif}}td,th{{border:1px solid #ccc;padding:2px 6px}}</style>
<h1>Provenance of every benchmarked commit</h1>
<p>Clocks are read (never set) with nvidia-smi at the start and end of each commit's run.
<a href="index.html">Back to the benchmarks</a>.</p>
<table id="provenance"><tr>{head}</tr>
{rows}
</table>
""")
    return len(recs)
