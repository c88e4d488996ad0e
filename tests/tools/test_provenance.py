"""Provenance: the conditions a run ran under (host, GPU, clocks, load, other GPU processes) and their page."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import provenance  # noqa: E402

GPU_LINE = "0, GPU-8f2a1c3e-0000-1111-2222-333344445555, NVIDIA H200, 580.1, 345, 3201, 35, 80.5\n"


def test_summary_keeps_only_busy_samples():
    lines = ["345, 3201, 0, 29, 76.5\n",       # idle before the run
             "1980, 3201, 100, 41, 520.1\n",
             "[N/A], 3201, 100, 41, 500\n",   # unparsable: skipped
             "1755, 3201, 97, 47, 690.0\n",
             "1980, 3201, 60, 45, 610.3\n",
             "345, 3201, 0, 40, 80.0\n"]      # idle after
    s = provenance.summarize(lines)
    assert s["samples"] == 5 and s["busy_samples"] == 3
    assert s["sm_clock_mhz"] == {"first": 1980, "last": 1980, "min": 1755, "median": 1980, "max": 1980}
    assert s["mem_clock_mhz"] == {"min": 3201, "max": 3201}
    assert s["max_temperature_c"] == 47 and s["max_power_w"] == 690.0


def test_summary_of_an_idle_or_unsampled_run():
    assert provenance.summarize([]) == {}
    assert provenance.summarize(["345, 3201, 3, 29, 76.5"]) == {"samples": 1, "busy_samples": 0}


def test_sampler_without_nvidia_smi_records_nothing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with provenance.ClockSampler() as clocks:
        pass
    assert clocks.summary == {}


@pytest.mark.parametrize("visible, want", [(None, "0"), ("3", "3"), ("2,0", "2"), (" 1 , 0", "1"),
                                           ("GPU-8f2a1c3e-0000-1111-2222-333344445555,1",
                                            "GPU-8f2a1c3e-0000-1111-2222-333344445555"),
                                           ("", None), (",1", None)])
def test_clocks_are_read_from_the_gpu_the_benchmarks_run_on(monkeypatch, visible, want):
    # A runner pinned to one GPU of several (CUDA_VISIBLE_DEVICES=3) must record GPU 3, not GPU 0;
    # one that hides every GPU from CUDA ("") must record none.
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert provenance.gpu_id() == want


class FakeSmi:
    """Stands in for subprocess.run: answers nvidia-smi's --query-gpu and --query-compute-apps.

    An answer that is an exception is raised instead (nvidia-smi missing, failing or hanging).
    """

    def __init__(self, gpu=GPU_LINE, apps=""):
        self.gpu, self.apps, self.calls = gpu, apps, []

    def __call__(self, cmd, **kwargs):
        self.calls.append((cmd, kwargs))
        answer = self.gpu if cmd[1].startswith("--query-gpu=") else self.apps
        if isinstance(answer, BaseException):
            raise answer
        return subprocess.CompletedProcess(cmd, 0, stdout=answer, stderr="")


@pytest.fixture
def smi(monkeypatch):
    fake = FakeSmi()
    monkeypatch.setattr(subprocess, "run", fake)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.234, 0.5, 0.25))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def test_snapshot_reads_index_uuid_clocks_processes_and_load(smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    smi.gpu = GPU_LINE + "WARNING: infoROM is corrupted\n"   # nvidia-smi can warn after the values and exit 0
    smi.apps = f"4242, python3, 2048\n{os.getpid()}, python, 500\n77, /usr/bin/x, [N/A]\n"
    snap = provenance.gpu_snapshot()
    assert snap == {"index": "0", "uuid": "GPU-8f2a1c3e-0000-1111-2222-333344445555", "gpu": "NVIDIA H200",
                    "driver": "580.1", "sm_clock_mhz": "345", "mem_clock_mhz": "3201", "temperature_c": "35",
                    "power_w": "80.5", "load_average": {"1min": 1.23, "5min": 0.5, "15min": 0.25},
                    # this process (the one asking) is not an "other" process; [N/A] memory is unknown
                    "gpu_processes": [{"pid": 4242, "name": "python3", "used_memory_mib": 2048},
                                      {"pid": 77, "name": "/usr/bin/x", "used_memory_mib": None}]}
    assert len(smi.calls) == 2
    for cmd, kwargs in smi.calls:
        # Read only: queries of the GPU the benchmarks use, each with a timeout.
        assert cmd[0] == "nvidia-smi" and cmd[-2:] == ["-i", "1"] and 0 < kwargs["timeout"] <= 60
        assert all(a.startswith(("--query-gpu=", "--query-compute-apps=", "--format=")) for a in cmd[1:-2])
    assert smi.calls[1][0][1] == "--query-compute-apps=pid,process_name,used_memory"


@pytest.mark.parametrize("apps", ["", "No running processes found\n"])
def test_no_other_process_is_an_empty_list(smi, apps):
    smi.apps = apps
    assert provenance.gpu_snapshot()["gpu_processes"] == []


@pytest.mark.parametrize("failure", [FileNotFoundError("nvidia-smi"),
                                     subprocess.TimeoutExpired("nvidia-smi", 20),
                                     subprocess.CalledProcessError(9, "nvidia-smi")])
def test_unreadable_gpu_records_nothing_but_the_load(smi, failure):
    smi.gpu = smi.apps = failure
    assert provenance.gpu_snapshot() == {"load_average": {"1min": 1.23, "5min": 0.5, "15min": 0.25},
                                         "gpu_processes": None}


def test_a_partial_gpu_line_records_no_gpu_facts(smi):
    smi.gpu = "0, GPU-8f2a, NVIDIA H200\n"
    snap = provenance.gpu_snapshot()
    assert "gpu" not in snap and "index" not in snap and snap["gpu_processes"] == []


def test_no_load_average_where_the_os_has_none(smi, monkeypatch):
    def unavailable():
        raise OSError("getloadavg")
    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert provenance.gpu_snapshot()["load_average"] is None


def fake_nvidia_smi(tmp_path, monkeypatch, output: str) -> pathlib.Path:
    """An nvidia-smi on PATH that prints ``output`` and logs its arguments."""
    log = tmp_path / "calls"
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nprintf '{output}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    return log


def test_no_gpu_visible_to_cuda_records_nothing(tmp_path, monkeypatch):
    log = fake_nvidia_smi(tmp_path, monkeypatch, "345, 3201, 100, 35, 80.5\\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    snap = provenance.gpu_snapshot()
    assert set(snap) == {"load_average", "gpu_processes"} and snap["gpu_processes"] is None
    with provenance.ClockSampler() as clocks:
        pass
    assert clocks.summary == {} and not log.exists()


def test_cpu_model_from_cpuinfo_else_platform(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core\n")
    assert provenance.cpu_model(str(cpuinfo)) == "AMD EPYC 9654 96-Core"
    monkeypatch.setattr(provenance.platform, "processor", lambda: "x86_64")
    assert provenance.cpu_model(str(tmp_path / "missing")) == "x86_64"
    cpuinfo.write_text("processor\t: 0\nCPU part\t: 0xd4f\n")   # ARM: no model name
    monkeypatch.setattr(provenance.platform, "processor", lambda: "")
    assert provenance.cpu_model(str(cpuinfo)) == "not recorded"


def bench_run(folder, smi, monkeypatch, **kwargs):
    """A record made as tools/bench.py makes it: snapshots at start and end around the run."""
    monkeypatch.setattr(provenance, "cpu_model", lambda: "AMD EPYC 9654 96-Core")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    start = provenance.gpu_snapshot()
    smi.apps = "4242, python3, 2048\n77, , [N/A]\n"     # other jobs started on the GPU during the run
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 2.0, 1.0))
    end = provenance.gpu_snapshot()
    load = provenance.summarize(["1980, 3201, 100, 41, 520", "1900, 3201, 99, 44, 600"])
    return provenance.record(folder, "nvidia-h200", "274b2b69739c" + "0" * 28, "gpu", start, end,
                             "2026-11-30T14:19:17+00:00", load, **kwargs)


def test_record_keeps_the_run_conditions(tmp_path, smi, monkeypatch):
    path = bench_run(tmp_path / "nvidia-h200", smi, monkeypatch)
    assert path.name == "274b2b69739c-20261130T141917.json"
    rec = json.loads(path.read_text())
    assert rec["status"] == "complete" and rec["host"] and rec["cuda_visible_devices"] is None
    assert (rec["cpu_model"], rec["cpu_count"]) == ("AMD EPYC 9654 96-Core", 16)
    assert (rec["gpu"], rec["driver"], rec["gpu_index"], rec["gpu_uuid"]) == (
        "NVIDIA H200", "580.1", "0", "GPU-8f2a1c3e-0000-1111-2222-333344445555")
    assert rec["start"] == {"sm_clock_mhz": "345", "mem_clock_mhz": "3201", "temperature_c": "35",
                            "power_w": "80.5", "load_average": {"1min": 1.23, "5min": 0.5, "15min": 0.25},
                            "gpu_processes": []}
    assert rec["end"]["load_average"] == {"1min": 3.0, "5min": 2.0, "15min": 1.0}
    assert rec["end"]["gpu_processes"] == [{"pid": 4242, "name": "python3", "used_memory_mib": 2048},
                                           {"pid": 77, "name": "", "used_memory_mib": None}]
    assert rec["under_load"]["busy_samples"] == 2


def test_record_status_extra_and_visible_devices(tmp_path, smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    extra = {"failed_cases": ["Forward.time_device('fused', '1x4096')"], "timing_methods": {"Forward": "events"}}
    path = bench_run(tmp_path, smi, monkeypatch, extra=extra, status="failed cases")
    rec = json.loads(path.read_text())
    assert rec["status"] == "failed cases" and rec["cuda_visible_devices"] == "1,0"
    assert rec["failed_cases"] == extra["failed_cases"] and rec["timing_methods"] == {"Forward": "events"}


def test_extra_must_not_replace_a_recorded_field(tmp_path, smi, monkeypatch):
    with pytest.raises(ValueError, match="commit"):
        bench_run(tmp_path, smi, monkeypatch, extra={"commit": "something else"})
    assert not list(tmp_path.iterdir())


def test_anchor_is_the_record_file_stem(tmp_path, smi, monkeypatch):
    path = bench_run(tmp_path, smi, monkeypatch)
    assert provenance.anchor(path) == provenance.anchor(str(path)) == "274b2b69739c-20261130T141917"
    assert provenance.anchor(json.loads(path.read_text())) == "274b2b69739c-20261130T141917"


def test_render_shows_the_clocks_under_load(tmp_path, smi, monkeypatch):
    bench_run(tmp_path / "prov" / "nvidia-h200", smi, monkeypatch)
    provenance.record(tmp_path / "prov" / "nvidia-h200", "nvidia-h200", "b" * 40, "gpu", {}, {},
                      "2026-11-30T08:00:00+00:00")
    assert provenance.render(tmp_path / "prov", tmp_path / "p.html") == 2
    page = (tmp_path / "p.html").read_text()
    assert "SM 1980 → 1900 MHz (min 1900, median 1940, max 1980); 2 of 2 samples busy" in page
    assert "memory 3201–3201 MHz, at most 44 C and 600 W" in page and "not sampled" in page


def test_render_shows_the_run_conditions(tmp_path, smi, monkeypatch):
    bench_run(tmp_path / "nvidia-h200", smi, monkeypatch)
    provenance.render(tmp_path, tmp_path / "p.html")
    page = (tmp_path / "p.html").read_text()
    main, details = page.split('<tr class="more">')
    main = main[main.index('<tr id='):]
    # Main row: GPU and its index, 1-min load start → end of the CPUs, other GPU processes start → end.
    assert "NVIDIA H200, index 0" in main and "1.23 → 3.0<br><small>of 16 CPUs" in main and "0 → 2" in main
    for fact in ("580.1", "GPU-8f2a1c3e-0000-1111-2222-333344445555", "AMD EPYC 9654 96-Core",
                 "<dd>unset</dd>", "345 → 345", "1.23 / 0.5 / 0.25 → 3.0 / 2.0 / 1.0",
                 "<dd>none</dd>", "pid 4242 python3 (memory 2048 MiB); pid 77  (memory not recorded)"):
        assert fact in details and fact not in main, fact
    assert "None" not in page


def write(folder: pathlib.Path, name: str, rec) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(rec if isinstance(rec, str) else json.dumps(rec))
    return path


GOOD = {"machine": "nvidia-h200", "commit": "a" * 40, "started_at": "2026-11-30T07:00:00+00:00"}


@pytest.mark.parametrize("content, problem", [
    (json.dumps(GOOD)[:37], "unreadable"),                          # a truncated write
    ("", "unreadable"), (b"\xff\xfe".decode("latin-1"), "unreadable"),  # empty; not UTF-8
    ("[1, 2]", "not a JSON object"), ("null", "not a JSON object"),
    (json.dumps({**GOOD, "started_at": None}), "no started_at"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "machine"}), "no machine"),
    (json.dumps({**GOOD, "start": [1]}), "malformed field"),        # a field of the wrong shape
    (json.dumps({**GOOD, "under_load": {"sm_clock_mhz": {"min": 1}}}), "malformed field")])
def test_an_unreadable_record_is_skipped_with_a_warning(tmp_path, capsys, content, problem):
    write(tmp_path / "nvidia-h200", "good.json", GOOD)
    bad = tmp_path / "nvidia-h200" / "bad.json"
    bad.write_bytes(content.encode("latin-1"))
    assert provenance.render(tmp_path, tmp_path / "p.html") == 1
    err = capsys.readouterr().err
    assert "warning" in err and str(bad) in err and problem in err and "good.json" not in err
    page = (tmp_path / "p.html").read_text()
    assert 'id="good"' in page and 'id="bad"' not in page


def test_every_field_is_escaped(tmp_path, smi, monkeypatch):
    # Every text and number of a full record replaced by markup naming its place: each must show, escaped.
    rec = json.loads(bench_run(tmp_path / "src", smi, monkeypatch, extra={"note": 1}).read_text())

    def poison(v, where):
        if isinstance(v, dict):
            return {k: poison(x, f"{where}.{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [poison(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return f"<script>{where}</script>&"

    rec = poison(rec, "r")
    rec["<b>key&"] = "x"   # an extra field's name is text too
    write(tmp_path / "prov" / "nvidia-h200", 'a"b<c.json', rec)
    assert provenance.render(tmp_path / "prov", tmp_path / "p.html") == 1
    page = (tmp_path / "p.html").read_text()
    assert "<script" not in page and "<b>" not in page and 'id="a&quot;b&lt;c"' in page
    leaves = re.findall(r"<script>(r[^<]*)</script>&", json.dumps(rec))
    assert len(leaves) > 40
    for where in leaves:
        assert f"&lt;script&gt;{where}&lt;/script&gt;&amp;" in page, where
    assert "&lt;b&gt;key&amp;" in page


def test_missing_values_read_not_recorded(tmp_path):
    # A CPU host's record: no GPU, no clocks, no samples.
    write(tmp_path / "cpu-triton-interpreter", "c.json",
          {**GOOD, "machine": "cpu-triton-interpreter", "mode": "interpreter", "gpu": None, "driver": None,
           "start": {"sm_clock_mhz": None, "mem_clock_mhz": None}, "end": {}, "under_load": {}})
    provenance.render(tmp_path, tmp_path / "p.html")
    page = (tmp_path / "p.html").read_text()
    assert "None" not in page and "not recorded, index not recorded" in page
    assert "<dt>SM clock, start → end (MHz)</dt><dd>not recorded</dd>" in page


def test_page_layout_sections_order_and_navigation(tmp_path):
    for machine, started in [("nvidia-h200", "2026-11-30T07:00:00+00:00"),
                             ("nvidia-h200", "2026-11-30T14:19:17+00:00"),
                             ("cpu-triton-interpreter", "2026-11-29T10:00:00+00:00"),
                             ("nvidia-h200", "2026-11-30T09:30:00+00:00")]:
        rec = {**GOOD, "machine": machine, "started_at": started}
        write(tmp_path / machine, provenance.anchor(rec) + ".json", rec)
    assert provenance.render(tmp_path, tmp_path / "p.html") == 4
    page = (tmp_path / "p.html").read_text()
    ids = re.findall(r'<tr id="([^"]+)"', page)
    assert ids == ["aaaaaaaaaaaa-20261129T100000", "aaaaaaaaaaaa-20261130T141917",
                   "aaaaaaaaaaaa-20261130T093000", "aaaaaaaaaaaa-20261130T070000"]
    assert re.findall(r"<h2[^>]*>([^<]+)</h2>", page) == ["cpu-triton-interpreter", "nvidia-h200"]
    assert page.count("<details>") == 4 and page.count("<table>") == 2
    nav = page[page.index("<nav>"):page.index("</nav>")]
    assert all(f'href="{h}"' in nav for h in ("index.html", "now.html", "regressions.html"))
    assert "table-layout:fixed" in page and "overflow-wrap:anywhere" in page
    assert len(re.findall(r"<th>", page)) == 2 * 8   # eight main columns per machine


def test_the_committed_records_render(tmp_path, capsys):
    # Records of the older schema (no status, load, processes; the first ones without samples) still render.
    files = list((ROOT / "provenance").glob("*/*.json"))
    assert files
    assert provenance.render(ROOT / "provenance", tmp_path / "p.html") == len(files)
    assert "warning" not in capsys.readouterr().err
    page = (tmp_path / "p.html").read_text()
    assert 'id="274b2b69739c-20261130T141917"' in page and "None" not in page
