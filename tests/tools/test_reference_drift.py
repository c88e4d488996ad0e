"""tools/reference_drift.py: the decode ratio against each candidate reference, over fresh processes."""

import json
import pathlib
import signal
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import reference_drift as drift  # noqa: E402


def test_the_references_compute_what_they_claim():
    kernel, pinned = drift._kernel()
    x, r, z = (torch.randn(3, 100) for _ in range(3))
    sumsq = (x * x).sum(1, keepdim=True)
    for reduce, inplace, want in ((False, False, x + r * z), (True, False, (x + r * z) * sumsq),
                                  (True, True, (x + r) * sumsq)):
        y, res = torch.empty_like(x), r.clone()
        kernel[(3,)](x, res, z, y, 100, BLOCK=128, REDUCE=reduce, INPLACE=inplace, num_warps=4)
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(res, x + r if inplace else r)  # the residual written in place, or left
    w, y, res = torch.randn(100), torch.empty_like(x), r.clone()
    pinned[(3,)](x, res, w, y, 100, 1e-6, BLOCK=128, num_warps=4)
    t = x + r
    torch.testing.assert_close(y, t * torch.rsqrt(t.pow(2).mean(1, keepdim=True) + 1e-6) * w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res, t)


def test_each_process_is_recorded_and_summarized(tmp_path, capsys):
    path = tmp_path / "drift.json"
    assert drift.main(["--cases", "1x64", "--processes", "2", "--repeats", "2", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert len({p["pid"] for p in data["processes"]}) == 2  # two fresh processes
    for p in data["processes"]:
        rows = p["cases"]["1x64"]
        assert len(rows) == 2 and set(rows[0]["ratio"]) == set(drift.REFERENCES) and p["failed"] == {}
        assert set(rows[0]["us"]) == {"op", *drift.REFERENCES} and min(rows[0]["us"].values()) > 0
    s = {row["reference"]: row for row in data["summary"]}
    medians = s["row"]["process_medians"]
    assert s["row"]["spread_processes"] == pytest.approx(max(medians) / min(medians) - 1)
    assert "| 1x64 | row |" in capsys.readouterr().out


def test_a_failing_case_costs_only_itself(monkeypatch):
    real = drift._measure_case
    monkeypatch.setattr(drift, "_measure_case", lambda case, n: (_ for _ in ()).throw(RuntimeError("planted"))
                        if case == "2x64" else real(case, n))
    out = drift.measure_process(["2x64", "1x64"], 1)
    assert out["failed"] == {"2x64": "RuntimeError: planted"} and len(out["cases"]["1x64"]) == 1


def _fake_child(results):
    """A stand-in for _child: each call returns the next result, or raises it."""
    def child(a):
        r = results.pop(0)
        if isinstance(r, BaseException):
            raise r
        return r
    return child


def _process(pid, ratio=1.5):
    return {"pid": pid, "cases": {"1x64": [{"mhz": None, "us": {}, "ratio": {k: ratio for k in drift.REFERENCES}}]},
            "failed": {}}


@pytest.mark.parametrize("fault, status, said", [
    (RuntimeError("killed by SIGKILL (out of memory?)"), 1, "process 2 failed: killed by SIGKILL (out of memory?)"),
    (KeyboardInterrupt(), 130, "stopped by Ctrl-C during process 2"),
    (drift._Stop("SIGTERM"), 130, "stopped by SIGTERM during process 2"),
])
def test_a_fault_keeps_the_finished_processes_and_prints_their_summary(fault, status, said, tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.setattr(drift, "_child", _fake_child([_process(1), fault, _process(3)]))
    path = tmp_path / "drift.json"
    assert drift.main(["--cases", "1x64", "--processes", "3", "--json", str(path)]) == status
    assert [p["pid"] for p in json.loads(path.read_text())["processes"]] == [1]
    out, err = capsys.readouterr()
    assert said in err and "| 1x64 | row | 1.500 | n/a | n/a |" in out  # one process: no spread to show
    assert signal.getsignal(signal.SIGTERM) is not drift._stop  # the handlers are given back


def test_a_killed_child_is_named_with_its_signal(monkeypatch):
    class Proc:
        returncode = -9

        def communicate(self):
            return "", ""

        def poll(self):
            return -9

    monkeypatch.setattr(drift.subprocess, "Popen", lambda *a, **k: Proc())
    with pytest.raises(RuntimeError, match="killed by SIGKILL \\(out of memory\\?\\)"):
        drift._child(drift.argparse.Namespace(cases="1x64", repeats=1))


@pytest.mark.parametrize("args, message", [
    (["--cases", "1x"], "a case is '<tokens>x<hidden>'"),
    (["--cases", "0x64"], "whole numbers >= 1"),
    (["--cases", "01x64"], "without leading zeros"),
    (["--cases", "1x2000000"], "at most 1048576"),
    (["--cases", "1x64,1x64"], "--cases: ['1x64'] given more than once"),
    (["--processes", "0"], "--processes must be at least 1"),
    (["--json", "/"], "is a directory"),
])
def test_bad_arguments_name_what_was_expected(args, message, capsys):
    with pytest.raises(SystemExit):
        drift.main(args)
    assert message in capsys.readouterr().err


def test_where_the_op_splits_its_rows_the_whole_row_candidates_are_left_out(monkeypatch):
    import dataclasses

    from fusedkernel.kernels import forward_rule

    real = forward_rule.forward_config
    monkeypatch.setattr(forward_rule, "forward_config",
                        lambda *a, **k: dataclasses.replace(real(*a, **k), path="looped", weight_load="after_sum"))
    (row,) = drift._measure_case("1x64", 1)
    assert set(row["ratio"]) == set(drift.REFERENCES) - {"clone", "pinned"}
