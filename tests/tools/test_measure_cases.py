"""tools/kernel/measure_cases.py: the suite's measurement at any case, as a table and JSON."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel"))
import measure_cases  # noqa: E402


def test_an_off_grid_case_is_measured_with_the_suites_op_and_floor(tmp_path, capsys):
    path = tmp_path / "out.json"
    assert measure_cases.main(["--op", "forward", "--cases", "fp32 2x1032", "--impls", "fused,eager",
                               "--rounds", "1", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    assert sorted(r["impl"] for r in rows) == ["eager", "fused"]
    for r in rows:
        assert r["case"] == "fp32 2x1032" and r["us"] > 0 and r["fraction"] == pytest.approx(r["floor_us"] / r["us"])
    assert "| forward | fp32 2x1032 | fused |" in capsys.readouterr().out


def test_a_failing_case_is_reported_and_sets_the_exit_status(monkeypatch, capsys):
    def plan(op, plan, rounds):
        return {("failed", "bf16 1x64"): "RuntimeError: planted"}

    monkeypatch.setattr(measure_cases, "measure_plan", plan)
    assert measure_cases.main(["--cases", "bf16 1x64"]) == 1
    assert "failed: RuntimeError: planted" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--cases", "bf16 1x"], "a case is"),
    (["--cases", "bf16 1x64", "--impls", "fused,tvm"], "--impls: ['tvm']"),
    (["--cases", "bf16 1x64", "--rounds", "0"], "--rounds must be at least 1"),
])
def test_bad_arguments_name_what_was_expected(args, message, capsys):
    with pytest.raises(SystemExit):
        measure_cases.main(args)
    assert message in capsys.readouterr().err
