"""Provenance: the clocks a run's benchmarks ran at, from nvidia-smi samples."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import provenance  # noqa: E402


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


def fake_nvidia_smi(tmp_path, monkeypatch, output: str) -> pathlib.Path:
    """An nvidia-smi on PATH that prints ``output`` and logs its arguments."""
    log = tmp_path / "calls"
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nprintf '{output}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    return log


def test_snapshot_reads_the_first_line_only(tmp_path, monkeypatch):
    # nvidia-smi can print a warning line after the values and still exit 0.
    log = fake_nvidia_smi(tmp_path, monkeypatch, "NVIDIA H200, 580.1, 345, 3201, 35, 80.5\\nWARNING: infoROM\\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    snap = provenance.gpu_snapshot()
    assert snap["gpu"] == "NVIDIA H200" and snap["sm_clock_mhz"] == "345" and snap["power_w"] == "80.5"
    assert "-i 1" in log.read_text()


def test_no_gpu_visible_to_cuda_records_nothing(tmp_path, monkeypatch):
    log = fake_nvidia_smi(tmp_path, monkeypatch, "NVIDIA H200, 580.1, 345, 3201, 35, 80.5\\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert provenance.gpu_snapshot() == {}
    with provenance.ClockSampler() as clocks:
        pass
    assert clocks.summary == {} and not log.exists()


def test_render_shows_the_clocks_under_load(tmp_path):
    folder = tmp_path / "prov" / "nvidia-h200"
    busy = provenance.summarize(["1980, 3201, 100, 41, 520", "1900, 3201, 99, 44, 600"])
    provenance.record(folder, "nvidia-h200", "a" * 40, "gpu", {"sm_clock_mhz": "345"}, {"sm_clock_mhz": "345"},
                      "2026-11-30T07:00:00+00:00", busy)
    provenance.record(folder, "nvidia-h200", "b" * 40, "gpu", {}, {}, "2026-11-30T08:00:00+00:00")
    assert provenance.render(tmp_path / "prov", tmp_path / "p.html") == 2
    page = (tmp_path / "p.html").read_text()
    assert "SM 1980 &rarr; 1900 MHz (min 1900, median 1940, max 1980)" in page
    assert "2 of 2 samples busy" in page and "not sampled" in page
