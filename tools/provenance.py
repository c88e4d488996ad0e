"""Provenance of a benchmark run: the conditions it ran under.

One JSON record per run of a commit under ``provenance/<machine>/``, written
by tools/bench.py around each commit's asv run, and rendered by ``publish`` as
``provenance.html`` in the site. A record names the host, CPU, GPU (name,
nvidia-smi index and UUID, driver), software versions, and, at the run's start
and end, the clocks, the host's load average and the other compute processes
on the GPU: decode-shape times moved between runs on "the same" machine, and
these are the conditions that can explain it. Clocks are read (never set) with
nvidia-smi: once at the start and end (the GPU idle), and every 0.5 s during
the run (:class:`ClockSampler`), summarized over the samples taken while the
GPU was busy: the clocks the benchmarks actually ran at.
"""

from __future__ import annotations

import datetime
import html
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import threading

import asvrun

SMI_TIMEOUT_S = 20  # nvidia-smi hangs on a GPU in a bad state: a record without it beats no record
# Snapshot key -> nvidia-smi --query-gpu field; values are kept as the text nvidia-smi prints.
GPU_FIELDS = {"index": "index", "uuid": "uuid", "gpu": "name", "driver": "driver_version",
              "sm_clock_mhz": "clocks.sm", "mem_clock_mhz": "clocks.mem",
              "temperature_c": "temperature.gpu", "power_w": "power.draw"}
QUERY = ",".join(GPU_FIELDS.values())
APPS_QUERY = "pid,process_name,used_memory"
# What record() keeps of the start and end snapshots.
CONDITIONS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "load_average", "gpu_processes")
NOT_RECORDED = "not recorded"


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


def _smi(*args: str) -> list[str] | None:
    """The lines ``nvidia-smi ARGS`` prints (callers pass queries only); None if it is missing, fails or hangs."""
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                             timeout=SMI_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()


def gpu_facts(gpu: str) -> dict:
    """GPU_FIELDS of GPU ``gpu`` (clocks in MHz, temperature in C, power in W, as text); {} when unreadable."""
    lines = _smi(f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-i", gpu)
    # Only the first line: nvidia-smi can print a warning after the values and still exit 0.
    values = [v.strip() for v in lines[0].split(",")] if lines else []
    return dict(zip(GPU_FIELDS, values)) if len(values) == len(GPU_FIELDS) else {}


def gpu_processes(gpu: str) -> list[dict] | None:
    """Other compute processes on GPU ``gpu``: [{pid, name, used_memory_mib}], [] when none, None when unreadable.

    This process is left out (it is the one asking). In a container,
    nvidia-smi may list other containers' processes with PIDs of the host.
    """
    lines = _smi(f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits", "-i", gpu)
    if lines is None:
        return None
    procs = []
    for line in lines:
        fields = [v.strip() for v in line.split(",")]
        # A line without a numeric PID is a message ("No running processes found", a warning).
        if len(fields) < 3 or not fields[0].isdigit() or int(fields[0]) == os.getpid():
            continue
        mem = fields[-1]  # "[N/A]" where the driver does not account memory per process
        procs.append({"pid": int(fields[0]), "name": ",".join(fields[1:-1]),
                      "used_memory_mib": int(mem) if mem.isdigit() else None})
    return procs


def load_average() -> dict | None:
    """The host's load average over 1, 5 and 15 minutes (runnable processes); None where the OS has none."""
    try:
        one, five, fifteen = os.getloadavg()
    except (OSError, AttributeError):
        return None
    return {"1min": round(one, 2), "5min": round(five, 2), "15min": round(fifteen, 2)}


def gpu_snapshot() -> dict:
    """The conditions now: :func:`gpu_facts` and :func:`gpu_processes` of :func:`gpu_id`, and the load average.

    Read only (never changes a setting). Without a GPU (a CPU host, or none
    visible to CUDA) only ``load_average`` is read, and ``gpu_processes`` is None.
    """
    gpu = gpu_id()
    snap = {"load_average": load_average(), "gpu_processes": None}
    if gpu is not None:
        snap.update(gpu_facts(gpu), gpu_processes=gpu_processes(gpu))
    return snap


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


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's "model name" from ``cpuinfo``, else platform.processor(), else "not recorded"."""
    try:
        for line in pathlib.Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except (OSError, ValueError):
        pass
    return platform.processor() or NOT_RECORDED


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _stem(commit: str, started_at: str) -> str:
    return f"{commit[:12]}-{started_at.replace('-', '').replace(':', '')[:15]}"


def anchor(path_or_record: str | os.PathLike | dict) -> str:
    """The id of a run's row in provenance.html (link ``provenance.html#<anchor>``): its record file's stem.

    Takes the path :func:`record` returned, or a record (its commit and start time).
    """
    if isinstance(path_or_record, dict):
        return _stem(path_or_record["commit"], path_or_record["started_at"])
    return pathlib.Path(path_or_record).stem


def record(folder: pathlib.Path, machine: str, commit: str, mode: str, start: dict, end: dict,
           started_at: str, under_load: dict | None = None, *, extra: dict | None = None,
           status: str = "complete") -> pathlib.Path:
    """Write one run's provenance to ``folder/<commit12>-<start time>.json``; return its path.

    ``start`` and ``end`` are :func:`gpu_snapshot` s: GPU facts come from
    ``start``; clocks, load average and GPU processes are kept from both, and
    ``under_load`` (a :class:`ClockSampler` summary) when given. ``status`` says
    how the run ended (e.g. "complete", "interrupted", "failed cases");
    ``extra``'s keys are added to the record and must not replace a recorded one
    (ValueError). One file per run, so re-running a commit adds a record.
    """
    rec = {"machine": machine, "commit": commit, "mode": mode, "status": status, "started_at": started_at,
           "ended_at": now(), **software(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "gpu": start.get("gpu"), "driver": start.get("driver"),
           "gpu_index": start.get("index"), "gpu_uuid": start.get("uuid"),
           "start": {k: start.get(k) for k in CONDITIONS}, "end": {k: end.get(k) for k in CONDITIONS},
           "under_load": under_load or {}}
    clash = sorted(set(extra or {}) & set(rec))
    if clash:
        raise ValueError(f"extra would replace recorded fields: {', '.join(clash)}")
    rec.update(extra or {})
    path = folder / f"{_stem(commit, started_at)}.json"
    folder.mkdir(parents=True, exist_ok=True)
    asvrun.write_whole(path, json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return path


def newest(folder: pathlib.Path, commit: str) -> dict | None:
    """The newest readable record of ``commit`` in ``folder`` (a machine's), or None."""
    return _newest_of(folder.glob(f"{commit[:12]}-*.json")).get(commit)


def newest_by_commit(folder: pathlib.Path) -> dict[str, dict]:
    """{commit: its newest readable record} of every commit with one in ``folder`` (a machine's)."""
    return _newest_of(folder.glob("*.json"))


def _newest_of(paths) -> dict[str, dict]:
    # File names sort by start time within a commit (:func:`_stem`): a later record replaces an earlier
    # one. Unreadable records are skipped.
    out = {}
    for path in sorted(paths):
        rec = _load(path)
        if rec is not None:
            out[rec["commit"]] = rec
    return out


# ---- provenance.html. Cells are built as plain text and escaped once, in _text.

REQUIRED = ("machine", "commit", "started_at")  # a record without them cannot be placed on the page
KNOWN = {"machine", "commit", "mode", "status", "started_at", "ended_at", "python", "torch", "triton", "cuda",
         "host", "cpu_model", "cpu_count", "cuda_visible_devices", "gpu", "driver", "gpu_index", "gpu_uuid",
         "start", "end", "under_load"}
COLUMNS = {"machine": 10, "commit": 9, "started (UTC)": 12, "status": 8, "GPU": 12,
           "SM clock under load": 27, "load average (1 min)": 12, "other GPU processes": 10}  # % of the width


def _text(v) -> str:
    return NOT_RECORDED if v is None else html.escape(str(v))


def _pair(a, b) -> str:
    """ "a → b" (start → end), or one "not recorded" when neither was."""
    return NOT_RECORDED if a is None and b is None else f"{_text(a)} → {_text(b)}"


def _num(v) -> str:
    """A number of a ClockSampler summary, rounded; anything else as it is."""
    return f"{v:.0f}" if isinstance(v, (int, float)) else NOT_RECORDED if v is None else str(v)


def _under_load(load: dict) -> tuple[str | None, str | None]:
    """(SM clock summary, memory clock/temperature/power) of a ClockSampler summary, as plain text."""
    if not load:
        return "not sampled", None
    sm = load.get("sm_clock_mhz")
    if not sm:
        return f"idle ({_num(load.get('samples'))} samples)", None
    mem = load.get("mem_clock_mhz") or {}
    return (f"SM {_num(sm['first'])} → {_num(sm['last'])} MHz (min {_num(sm['min'])}, median "
            f"{_num(sm['median'])}, max {_num(sm['max'])}); "
            f"{_num(load.get('busy_samples'))} of {_num(load.get('samples'))} samples busy",
            f"memory {_num(mem.get('min'))}–{_num(mem.get('max'))} MHz, at most "
            f"{_num(load.get('max_temperature_c'))} C and {_num(load.get('max_power_w'))} W")


def _loads(snap: dict) -> str | None:
    la = snap.get("load_average")
    return None if la is None else f"{la['1min']} / {la['5min']} / {la['15min']}"


def _procs(snap: dict) -> str | None:
    procs = snap.get("gpu_processes")
    if procs is None:
        return None

    def one(p: dict) -> str:
        mem = NOT_RECORDED if p["used_memory_mib"] is None else f"{p['used_memory_mib']} MiB"
        return f"pid {p['pid']} {p['name']} (memory {mem})"
    return "; ".join(map(one, procs)) or "none"


def _load1(snap: dict) -> float | None:
    return None if snap.get("load_average") is None else snap["load_average"]["1min"]


def _count(snap: dict) -> int | None:
    return None if snap.get("gpu_processes") is None else len(snap["gpu_processes"])


def _row(stem: str, r: dict) -> str:
    """A run's main row (id ``stem``) and a full-width row with its other facts in a <details>."""
    start, end = r.get("start") or {}, r.get("end") or {}
    sm, rest = _under_load(r.get("under_load") or {})
    cpus = "" if r.get("cpu_count") is None else f"<br><small>of {_text(r['cpu_count'])} CPUs</small>"
    cells = [f"{_text(r['machine'])}<br><small>host {_text(r.get('host'))}</small>",
             f"<code>{_text(r['commit'][:10])}</code>", _text(r["started_at"].replace("T", " ")),
             _text(r.get("status")), f"{_text(r.get('gpu'))}, index {_text(r.get('gpu_index'))}", _text(sm),
             _pair(_load1(start), _load1(end)) + cpus, _pair(_count(start), _count(end))]
    versions = " / ".join(_text(r.get(k)) for k in ("python", "torch", "triton", "cuda"))
    # Unset (every GPU visible) differs from "" (none visible) and from a record made before the field.
    visible = r.get("cuda_visible_devices")
    visible = json.dumps(visible) if visible is not None else "unset" if "cuda_visible_devices" in r else None
    facts = {"commit": _text(r["commit"]), "mode": _text(r.get("mode")), "ended": _text(r.get("ended_at")),
             "driver": _text(r.get("driver")), "Python / torch / triton / CUDA": versions,
             "GPU UUID": _text(r.get("gpu_uuid")), "CPU": _text(r.get("cpu_model")),
             "CUDA_VISIBLE_DEVICES": _text(visible),
             "SM clock, start → end (MHz)": _pair(start.get("sm_clock_mhz"), end.get("sm_clock_mhz")),
             "memory clock, start → end (MHz)": _pair(start.get("mem_clock_mhz"), end.get("mem_clock_mhz")),
             "temperature, start → end (C)": _pair(start.get("temperature_c"), end.get("temperature_c")),
             "power, start → end (W)": _pair(start.get("power_w"), end.get("power_w")),
             "load average 1 / 5 / 15 min, start → end": _pair(_loads(start), _loads(end)),
             "other GPU processes at start": _text(_procs(start)), "at end": _text(_procs(end)),
             "under load": _text(rest), "record": _text(f"{stem}.json")}
    facts.update((k, _text(json.dumps(r[k], sort_keys=True))) for k in sorted(set(r) - KNOWN))
    dl = "".join(f"<dt>{_text(k)}</dt><dd>{v}</dd>" for k, v in facts.items())
    return (f'<tr id="{html.escape(stem)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>\n"
            f'<tr class="more"><td colspan="{len(cells)}"><details><summary>details</summary>'
            f"<dl>{dl}</dl></details></td></tr>")


def _load(path: pathlib.Path) -> dict | None:
    """The record in ``path``, or None (with a warning on stderr) when it is unreadable or lacks REQUIRED."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # ValueError: invalid JSON or text (a truncated write)
        problem = f"unreadable ({e})"
    else:
        missing = [k for k in REQUIRED if not isinstance(rec, dict) or not isinstance(rec.get(k), str)]
        if not missing:
            return rec
        problem = "not a JSON object" if not isinstance(rec, dict) else f"no {', '.join(missing)}"
    print(f"warning: provenance record {path} skipped: {problem}", file=sys.stderr)
    return None


STYLE = """body{font-family:sans-serif;font-size:14px;margin:1em}
table{table-layout:fixed;width:100%;border-collapse:collapse;margin-bottom:2em}
td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top;text-align:left;overflow-wrap:anywhere}
tr.more td{border-top:none;font-size:13px}
tr:target,tr:target+tr.more{background:#ffd}
dl{display:grid;grid-template-columns:minmax(10em,max-content) 1fr;gap:0 1em;margin:0}
dt{color:#555}dd{margin:0}"""


NAV = ('<nav><a href="index.html">Benchmarks</a> · <a href="now.html">Where we stand now</a> · '
       '<a href="regressions.html">Regressions</a></nav>')


def render(prov_dir: pathlib.Path, out: pathlib.Path, nav: str = NAV) -> int:
    """Write provenance.html of every record under ``prov_dir`` (``<machine>/*.json``) to ``out``.

    One section per machine (sorted), newest run first; a file that cannot be
    read or rendered is skipped with a warning on stderr. ``nav``: the page's
    navigation (HTML; the site's own links). Returns the number of records rendered.
    """
    machines: dict[str, list[tuple[str, str, str]]] = {}
    for path in sorted(prov_dir.glob("*/*.json")):
        rec = _load(path)
        if rec is None:
            continue
        try:
            row = _row(path.stem, rec)
        except (AttributeError, KeyError, TypeError, ValueError) as e:  # a field of an unexpected shape
            print(f"warning: provenance record {path} skipped: malformed field ({e!r})", file=sys.stderr)
            continue
        machines.setdefault(rec["machine"], []).append((rec["started_at"], path.stem, row))
    cols = "".join(f'<col style="width:{w}%">' for w in COLUMNS.values())
    head = "".join(f"<th>{_text(c)}</th>" for c in COLUMNS)
    sections = "".join(
        f'<h2 id="machine-{_text(m)}">{_text(m)}</h2>\n<table><colgroup>{cols}</colgroup>'
        f"<thead><tr>{head}</tr></thead><tbody>\n"
        + "\n".join(row for *_, row in sorted(machines[m], reverse=True)) + "\n</tbody></table>\n"
        for m in sorted(machines))
    out.write_text(f"""<!doctype html><meta charset="utf-8"><title>fusedkernel provenance</title>
<style>{STYLE}</style>
{nav}
<h1>Provenance of every benchmark run</h1>
<p>Clocks are read (never set) with nvidia-smi at the start and end of each commit's run
(the GPU idle), and every 0.5 s during it: "SM clock under load" summarizes the samples taken at
&ge; {BUSY_PERCENT}% GPU utilization. The load average and the other compute processes on the GPU are
read at the start and end. A run's row links as <code>provenance.html#&lt;record file name&gt;</code>.</p>
{sections}""")
    return sum(len(rows) for rows in machines.values())


if __name__ == "__main__":
    raise SystemExit("tools/provenance.py is a module of the tracker's command line: python tools/bench.py --help")
