"""Provenance of a benchmark run: GPU, driver, clocks, software versions.

One JSON record per run of a commit under ``provenance/<machine>/``, written
by tools/bench.py around each commit's asv run, and rendered by ``publish`` as
``provenance.html`` in the site. Clocks are read (never set) with nvidia-smi:
once at the run's start and end (when the GPU is idle), and every 0.5 s
during the run (:class:`ClockSampler`), summarized over the samples taken
while the GPU was busy: the clocks the benchmarks actually ran at.
"""

from __future__ import annotations

import datetime
import html
import json
import pathlib
import platform
import os
import statistics
import subprocess
import threading

QUERY = "name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw"


def gpu_id() -> str | None:
    """nvidia-smi's ``-i`` for the GPU the benchmarks run on: CUDA's device 0.

    That is the first entry of CUDA_VISIBLE_DEVICES when it is set, as on a
    multi-GPU runner pinned to one GPU (an index or a full GPU UUID work with
    ``nvidia-smi -i``; a MIG or short UUID does not, and records nothing);
    None when it is set but names no GPU first (CUDA then sees none, e.g. ""
    or ",1"); else GPU 0. Indexes are nvidia-smi's (PCI bus order): CUDA
    numbers GPUs the same way under CUDA_DEVICE_ORDER=PCI_BUS_ID or on a host
    of identical GPUs, like the runners here.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return "0"
    return visible.split(",")[0].strip() or None


def gpu_snapshot() -> dict:
    """Read-only ``nvidia-smi`` query of :func:`gpu_id` (never changes a setting); {} without one."""
    gpu = gpu_id()
    if gpu is None:
        return {}
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                              "-i", gpu], capture_output=True, text=True, timeout=30, check=True).stdout
        name, driver, sm, mem, temp, power = [v.strip() for v in out.strip().splitlines()[0].split(",")]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return {}
    return {"gpu": name, "driver": driver, "sm_clock_mhz": sm, "mem_clock_mhz": mem,
            "temperature_c": temp, "power_w": power}


SAMPLE_QUERY = "clocks.sm,clocks.mem,utilization.gpu,temperature.gpu,power.draw"
BUSY_PERCENT = 50  # a sample counts as "under load" at this GPU utilization or more


def summarize(lines: list[str]) -> dict:
    """Clocks under load from ``nvidia-smi --query-gpu=SAMPLE_QUERY`` CSV lines (no units).

    Returns {} when no sample was taken; otherwise the sample counts and, over
    the samples at >= BUSY_PERCENT utilization: SM clock first/last/min/median/
    max (MHz), memory clock min/max (MHz), the highest temperature (C) and
    power (W). Lines that do not parse (e.g. "[N/A]") are skipped.
    """
    rows = []
    for line in lines:
        try:
            sm, mem, util, temp, power = (float(v) for v in line.split(","))
        except ValueError:
            continue
        rows.append((sm, mem, util, temp, power))
    if not rows:
        return {}
    busy = [r for r in rows if r[2] >= BUSY_PERCENT]
    out = {"samples": len(rows), "busy_samples": len(busy)}
    if busy:
        sm = [r[0] for r in busy]
        out.update(sm_clock_mhz={"first": sm[0], "last": sm[-1], "min": min(sm),
                                 "median": statistics.median(sm), "max": max(sm)},
                   mem_clock_mhz={"min": min(r[1] for r in busy), "max": max(r[1] for r in busy)},
                   max_temperature_c=max(r[3] for r in busy), max_power_w=max(r[4] for r in busy))
    return out


class ClockSampler:
    """Context manager: samples the clocks of :func:`gpu_id` every ``period_ms`` with nvidia-smi (read only).

    ``summary`` holds :func:`summarize` of the samples after the block; {}
    where nvidia-smi is missing (a CPU host).
    """

    def __init__(self, period_ms: int = 500) -> None:
        self.period_ms = period_ms
        self.lines: list[str] = []
        self.summary: dict = {}
        self._proc = None
        self._reader = None

    def __enter__(self) -> "ClockSampler":
        gpu = gpu_id()
        if gpu is None:
            return self
        try:
            self._proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={SAMPLE_QUERY}", "--format=csv,noheader,nounits", "-i", gpu,
                 "-lms", str(self.period_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        self._reader = threading.Thread(target=lambda: self.lines.extend(self._proc.stdout), daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._reader.join(timeout=10)
        self.summary = summarize(self.lines)


def software() -> dict:
    import torch
    import triton

    return {"python": platform.python_version(), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "host": platform.node()}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def record(folder: pathlib.Path, machine: str, commit: str, mode: str, start: dict, end: dict,
           started_at: str, under_load: dict | None = None) -> pathlib.Path:
    """Write one run's provenance to ``folder/<commit12>-<start time>.json``; return its path.

    GPU facts come from ``start``; clocks are kept from both ``start`` and
    ``end``, and ``under_load`` (a :class:`ClockSampler` summary) when given.
    One file per run, so re-running a commit adds a record instead of replacing one.
    """
    rec = {"machine": machine, "commit": commit, "mode": mode, "started_at": started_at,
           "ended_at": now(), **software(),
           "gpu": start.get("gpu"), "driver": start.get("driver"),
           "start": {k: start.get(k) for k in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w")},
           "end": {k: end.get(k) for k in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w")},
           "under_load": under_load or {}}
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
            "python", "cuda", "sm_clock_mhz", "mem_clock_mhz", "under_load"]

    def cell(r, c):
        if c in ("sm_clock_mhz", "mem_clock_mhz"):
            return f"{r['start'].get(c)} &rarr; {r['end'].get(c)}"
        if c == "under_load":
            load = r.get("under_load") or {}
            sm = load.get("sm_clock_mhz")
            if not sm:
                return "not sampled" if not load else f"idle ({load['samples']} samples)"
            return (f"SM {sm['first']:.0f} &rarr; {sm['last']:.0f} MHz (min {sm['min']:.0f}, median "
                    f"{sm['median']:.0f}, max {sm['max']:.0f}), mem {load['mem_clock_mhz']['min']:.0f}&ndash;"
                    f"{load['mem_clock_mhz']['max']:.0f} MHz, &le; {load['max_temperature_c']:.0f} C, "
                    f"&le; {load['max_power_w']:.0f} W; {load['busy_samples']} of {load['samples']} samples busy")
        v = r.get(c)
        return html.escape(str(v[:10] if c == "commit" else v))

    rows = "\n".join("<tr>" + "".join(f"<td>{cell(r, c)}</td>" for c in cols) + "</tr>" for r in recs)
    head = "".join(f"<th>{c}</th>" for c in cols)
    out.write_text(f"""<!doctype html><meta charset="utf-8"><title>fusedkernel provenance</title>
<style>body{{font-family:sans-serif}}td,th{{border:1px solid #ccc;padding:2px 6px}}</style>
<h1>Provenance of every benchmarked commit</h1>
<p>Clocks are read (never set) with nvidia-smi at the start and end of each commit's run
(the GPU idle), and every 0.5 s during it: "under_load" summarizes the samples taken at
&ge; 50% GPU utilization.
<a href="index.html">Back to the benchmarks</a>.</p>
<table id="provenance"><tr>{head}</tr>
{rows}
</table>
""")
    return len(recs)
