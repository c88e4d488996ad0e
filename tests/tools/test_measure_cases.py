"""tools/kernel/measure_cases.py: the suite's measurement at any case, as a table and JSON."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel"))
import measure_cases  # noqa: E402


def test_an_off_grid_case_is_measured_with_the_suites_op_and_floor(tmp_path, capsys):
    path = tmp_path / "out.json"
    assert measure_cases.main(["--op", "forward", "--cases", "fp32 2x1032", "--impls", "fused, eager",
                               "--rounds", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    assert sorted(r["impl"] for r in rows) == ["eager", "fused"]
    for r in rows:
        assert r["case"] == "fp32 2x1032" and r["us"] > 0 and r["fraction"] == pytest.approx(r["floor_us"] / r["us"])
    assert "| forward | fp32 2x1032 | fused |" in capsys.readouterr().out


def test_failed_and_skipped_cases_say_why_and_a_failure_sets_the_exit_status(monkeypatch, capsys):
    def plan(op, plan, rounds):
        (case, impls), = plan.items()
        return {("failed", case): "RuntimeError: planted"} if case == "bf16 1x64" else \
            {("skipped", "liger", case): "Liger supports hidden size <= 65536"}

    monkeypatch.setattr(measure_cases, "measure_plan", plan)
    assert measure_cases.main(["--cases", "bf16 1x64,bf16 1x70000"]) == 1
    out = capsys.readouterr().out
    assert "failed: RuntimeError: planted" in out
    assert "| bf16 1x70000 | liger | not run: Liger supports hidden size <= 65536 |" in out


def test_ctrl_c_keeps_the_finished_cases(tmp_path, monkeypatch, capsys):
    def plan(op, plan, rounds):
        (case, impls), = plan.items()
        if case == "bf16 2x64":
            raise KeyboardInterrupt
        return {("fused", case): ([2.0], [1.0])}

    monkeypatch.setattr(measure_cases, "measure_plan", plan)
    path = tmp_path / "out.json"
    assert measure_cases.main(["--cases", "bf16 1x64,bf16 2x64", "--json", str(path)]) == 130
    assert [r["case"] for r in json.loads(path.read_text())] == ["bf16 1x64"]
    assert "interrupted: 1 finished cases kept" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--cases", "bf16 1x"], "a case is"),
    (["--cases", "bf16 -1x64"], "whole numbers >= 1"),
    (["--cases", "bf16 1x64,bf16 1x64"], "--cases: ['bf16 1x64'] given more than once"),
    (["--cases", "bf16 1x64", "--impls", "fused,tvm"], "--impls: ['tvm']"),
    (["--cases", "bf16 1x64", "--rounds", "0"], "argument --rounds: an integer from 1 to 2147483647, got '0'"),
    (["--cases", "bf16 1x64", "--json", ""], "an empty path"),
    (["--cases", "bf16 1x64", "--json", "/"], "is a directory"),
    (["--cases", "bf16 1x64", "--json", "/no/such/dir/x.json"], "/no/such/dir is not an existing directory"),
])
def test_bad_arguments_name_what_was_expected_before_measuring(args, message, monkeypatch, capsys):
    monkeypatch.setattr(measure_cases, "measure_plan", lambda *a: pytest.fail("measured"))
    with pytest.raises(SystemExit):
        measure_cases.main(args)
    assert message in capsys.readouterr().err
