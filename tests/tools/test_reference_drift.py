"""tools/reference_drift.py: the decode ratio against each candidate reference, over fresh processes."""

import json
import pathlib
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import reference_drift as drift  # noqa: E402


def test_the_references_compute_what_they_claim():
    kernel = drift._kernel()
    x, r, z = (torch.randn(3, 100) for _ in range(3))
    for reduce, want in ((False, x + r * z), (True, (x + r * z) * (x * x).sum(1, keepdim=True))):
        y = torch.empty_like(x)
        kernel[(3,)](x, r, z, y, 100, BLOCK=128, REDUCE=reduce, num_warps=4)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)


def test_each_process_is_recorded_and_summarized(tmp_path, capsys):
    path = tmp_path / "drift.json"
    assert drift.main(["--cases", "1x64", "--processes", "2", "--repeats", "2", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert len({p["pid"] for p in data["processes"]}) == 2  # two fresh processes
    for p in data["processes"]:
        rows = p["cases"]["1x64"]
        assert len(rows) == 2 and set(rows[0]["ratio"]) == set(drift.REFERENCES)
        assert set(rows[0]["us"]) == {"op", *drift.REFERENCES} and min(rows[0]["us"].values()) > 0
    s = {row["reference"]: row for row in data["summary"]}
    medians = s["row"]["process_medians"]
    assert s["row"]["spread_processes"] == pytest.approx(max(medians) / min(medians) - 1)
    assert "| 1x64 | row |" in capsys.readouterr().out


def test_a_failing_process_stops_the_run_and_keeps_the_finished_ones(tmp_path, monkeypatch, capsys):
    path = tmp_path / "drift.json"
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if len(calls) == 2:
            return subprocess.CompletedProcess(cmd, 1, "", "Traceback: planted")
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"pid": 1, "cases": {"1x64": [
            {"mhz": None, "us": {}, "ratio": {k: 1.5 for k in drift.REFERENCES}}]}}) + "\n", "")

    monkeypatch.setattr(drift.subprocess, "run", run)
    assert drift.main(["--cases", "1x64", "--processes", "3", "--json", str(path)]) == 1
    err = capsys.readouterr().err
    assert "process 2 failed" in err and "planted" in err
    assert len(json.loads(path.read_text())["processes"]) == 1


@pytest.mark.parametrize("args, message", [
    (["--cases", "1x"], "a case is '<tokens>x<hidden>'"),
    (["--cases", "0x64"], "at least 1 token"),
    (["--processes", "0"], "--processes must be at least 1"),
])
def test_bad_arguments_name_what_was_expected(args, message, capsys):
    with pytest.raises(SystemExit):
        drift.main(args)
    assert message in capsys.readouterr().err
