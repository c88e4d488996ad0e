"""tools/kernel/head_to_head.py: named launch settings timed head to head (on the GPU, or in the interpreter)."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel"))
import head_to_head  # noqa: E402
from fusedkernel.kernels.config import ForwardConfig  # noqa: E402


def test_each_setting_is_checked_timed_and_written_and_a_second_run_resumes(tmp_path, capsys, monkeypatch):
    path = tmp_path / "h2h.json"
    # Two rows of 64 on a tile of two rows: not the rule's launch on the GPU (one row) nor in the interpreter (32).
    args = ["--settings", "rule,S2x64/4f,W/4a", "--op", "forward+residual", "--dtypes", "fp32", "--widths", "64",
            "--tokens", "2,3", "--rounds", "2", "--json", str(path)]
    assert head_to_head.main(args) == 0
    rows = json.loads(path.read_text())
    assert [r["case"] for r in rows] == ["fp32 2x64 forward+residual", "fp32 3x64 forward+residual"]
    for r in rows:
        assert list(r["configs"]) == list(r["fraction"]) == list(r["raw"]) == ["rule", "S2x64/4f", "W/4a"]
        assert r["configs"]["W/4a"] == repr(ForwardConfig("rows", 1, 64, 1, 4, "after_sum"))
        assert all(len(op) == len(floor) == 2 for op, floor in r["raw"].values())
        assert all(f > 0 for f in r["fraction"].values())
    assert "| fp32 3x64 forward+residual | S2x64/4f | ForwardConfig(" in capsys.readouterr().out
    # Cut off and run again: the finished cases are kept, not measured again.
    monkeypatch.setattr(head_to_head, "measure", lambda *a: pytest.fail("a finished case was measured again"))
    assert head_to_head.main(args) == 0
    assert json.loads(path.read_text()) == rows


def test_a_setting_that_gives_anothers_launch_is_timed_once_and_a_wrong_one_is_left_out(monkeypatch, capsys):
    # One fp32 row of 2048 in the interpreter: the rule's launch is 8 warps, the weight first.
    check = head_to_head.Case.check

    def planted(case, cfg):
        if cfg.weight_load == "after_sum":
            raise ValueError("planted wrong result")
        check(case, cfg)

    monkeypatch.setattr(head_to_head.Case, "check", planted)
    row = head_to_head.measure(head_to_head.Case("inference", "fp32", 2048, 1), ["rule", "W/8f", "W/4a"], 1)
    assert list(row["configs"]) == ["rule"]
    assert "| fp32 1x2048 inference | W/4a | error: ValueError: planted wrong result |" in capsys.readouterr().out


def test_copies_are_timed_beside_the_launches_unchecked_and_named_as_copies(monkeypatch, capsys):
    check, checked = head_to_head.Case.check, []

    def spy(case, cfg):
        checked.append(cfg)
        check(case, cfg)

    monkeypatch.setattr(head_to_head.Case, "check", spy)
    case = head_to_head.Case("inference", "fp32", 64, 2)
    row = head_to_head.measure(case, ["rule", "copy:rule", "copy:W/4b", "copy:rule"], 2)
    rule = case.rule()
    assert checked == [rule]  # the copies are wrong by design: not checked
    assert row["configs"] == {"rule": repr(rule), "copy:rule": f"copy of {rule!r}",
                              "copy:W/4b": f"copy of {ForwardConfig('rows', 1, 64, 1, 4, 'before_sum')!r}"}
    assert list(row["fraction"]) == list(row["raw"]) == list(row["configs"])
    assert "| fp32 2x64 inference | copy:rule | copy of ForwardConfig(" in capsys.readouterr().out
    # Copies alone make no row: nothing of the op was measured.
    monkeypatch.setattr(head_to_head.Case, "check", lambda *a: pytest.fail("a copy was checked"))
    assert head_to_head.measure(case, ["copy:rule"], 1) is None


@pytest.mark.skipif(not head_to_head.INTERPRET, reason="the interpreter's launch at 1x16400 is the looped path "
                    "(splits need a GPU), which has no copy; the GPU's is a split, which has one")
def test_a_copy_that_fails_is_reported_and_the_run_goes_on(tmp_path, capsys):
    # A review's find: a copy's error (here a looped launch, rows past 64 KiB) escaped the setting's report
    # in the warm-up, ended the run and ended it again on resuming.
    path = tmp_path / "rows.json"
    args = ["--settings", "rule,copy:rule", "--dtypes", "fp32", "--widths", "64,16400,128", "--tokens", "1",
            "--rounds", "1", "--json", str(path)]
    assert head_to_head.main(args) == 1  # a setting failed: the run says so
    rows = json.loads(path.read_text())
    assert [r["case"] for r in rows] == [f"fp32 1x{n} inference" for n in (64, 16400, 128)]
    assert rows[1]["errors"]["copy:rule"].startswith("ValueError: cfg: a copy takes a rows or persistent")
    assert "errors" not in rows[0] and "errors" not in rows[2]
    out, err = capsys.readouterr()
    assert "| fp32 1x16400 inference | copy:rule | error: ValueError: cfg: a copy takes a rows or persistent" in out
    assert err.rstrip().endswith("allocated): fp32 1x16400 inference copy:rule"), err


def test_copies_of_the_weight_before_and_after_the_sums_are_one_copy():
    row = head_to_head.measure(head_to_head.Case("inference", "fp32", 64, 2), ["rule", "copy:W/4b", "copy:W/4a"], 1)
    assert list(row["configs"]) == ["rule", "copy:W/4b"]


def test_a_case_no_setting_passes_fails_the_run(monkeypatch, capsys):
    # Every setting "wrong" (bf16 in the interpreter, before its truncated sum was accepted): no row, exit 0.
    def wrong(case, cfg):
        raise ValueError("planted wrong result")

    monkeypatch.setattr(head_to_head.Case, "check", wrong)
    args = ["--settings", "rule,W/4f", "--dtypes", "fp32", "--widths", "64", "--tokens", "2", "--rounds", "1"]
    assert head_to_head.main(args) == 1
    assert "1 failed (the rows above: no candidate passed its check, a setting failed, or the case's tensors were not allocated): fp32 2x64 inference" in capsys.readouterr().err


def test_bf16_passes_its_check_in_the_interpreter():
    # The interpreter truncates bf16's sum: the residual check took every launch for wrong.
    row = head_to_head.measure(head_to_head.Case("inference", "bf16", 64, 2), ["rule"], 1)
    assert row is not None and list(row["configs"]) == ["rule"]


@pytest.mark.parametrize("label, n, want", [
    ("W/16b", 5000, ForwardConfig("rows", 1, 8192, 1, 16, "before_sum")),
    ("S2x2048/4a", 5000, ForwardConfig("rows", 2, 2048, 3, 4, "after_sum")),
    ("P16x2", 9000, ForwardConfig("persistent", 1, 16384, 1, 16, "first", 2)),
    ("P8x1", 1000, ForwardConfig("persistent", 2, 1024, 1, 8, "first", 1)),
])
def test_settings_name_their_launch(label, n, want):
    assert head_to_head.setting(label, n) == want


@pytest.mark.parametrize("args, message", [
    (["--settings", "rule,W/8x"], "'W/8x' is not rule, W/<warps><f|b|a>"),
    (["--settings", "W/3b"], "ForwardConfig.num_warps must be a power of two >= 1, got 3"),
    # A ZeroDivisionError traceback; a second W/8f; an Arabic-Indic 8 taken as 8.
    (["--settings", "S2x0/4f"], "'S2x0/4f' is not rule"), (["--settings", "W/08f"], "'W/08f' is not rule"),
    (["--settings", "W/\u0668f"], "is not rule"),
    (["--settings", "copy:W/8x"], "'W/8x' is not rule"),
    (["--settings", "copy:rule,copy:W/8f"], "a copy is timed beside a launch of the op"),
    (["--settings", "rule,rule"], "--settings: ['rule'] given more than once"),
    (["--settings", "rule", "--dtypes", "bf16,int8"], "--dtypes: ['int8'] not among"),
    (["--settings", "rule", "--tokens", "1,0"], "--tokens takes integers from 1 to 2147483647, got '1,0'"),
    # A count past 64 bits ended in torch's TypeError, after the checks.
    (["--settings", "rule", "--tokens", "99999999999999999999"], "--tokens takes integers from 1 to 2147483647"),
    (["--settings", "rule", "--widths", "4096,x"], "--widths takes positive integers, got '4096,x'"),
    (["--settings", "rule", "--widths", "4096,4096"], "--widths: ['4096'] given more than once"),
    (["--settings", "rule", "--rounds", "0"], "argument --rounds: an integer from 1 to 2147483647, got '0'"),
    (["--settings", "rule", "--rounds", "\u0663"], "argument --rounds: an integer from 1"),  # int() read it as 3
])
def test_bad_options_are_refused_before_measuring(args, message, capsys, monkeypatch):
    monkeypatch.setattr(head_to_head, "measure", lambda *a: pytest.fail("measured"))
    with pytest.raises(SystemExit) as e:
        head_to_head.main(args)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{not json", "{}", "[1, 2]"])
def test_a_json_file_of_something_else_is_not_overwritten(tmp_path, text, monkeypatch):
    path = tmp_path / "rows.json"
    path.write_text(text)
    monkeypatch.setattr(head_to_head, "measure", lambda *a: pytest.fail("measured"))
    with pytest.raises(SystemExit, match="holds no head-to-head rows"):
        head_to_head.main(["--settings", "rule", "--json", str(path)])
    assert path.read_text() == text


def test_ctrl_c_keeps_the_finished_cases(tmp_path, monkeypatch, capsys):
    path = tmp_path / "rows.json"

    def measure(case, chosen, rounds):
        if case.tokens == 3:
            raise KeyboardInterrupt
        return {"case": case.label, "configs": {}, "fraction": {}, "raw": {}}

    monkeypatch.setattr(head_to_head, "measure", measure)
    assert head_to_head.main(["--settings", "rule", "--dtypes", "fp32", "--widths", "64", "--tokens", "2,3",
                              "--json", str(path)]) == 130
    assert [r["case"] for r in json.loads(path.read_text())] == ["fp32 2x64 inference"]
    assert "interrupted: 1 finished cases kept" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on a GPU host the tool runs")
def test_without_a_gpu_or_the_interpreter_it_says_so():
    import os
    import subprocess

    script = pathlib.Path(head_to_head.__file__)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(script), "--settings", "rule,W/4f"], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 2 and "no GPU here: run it on one, or set TRITON_INTERPRET=1" in out.stderr, out.stderr


def test_a_case_too_large_for_the_gpu_is_reported_and_the_next_one_runs(tmp_path, monkeypatch, capsys):
    # It ended the run with a traceback: the cases after it were lost.
    from helpers import out_of_memory_at_width

    out_of_memory_at_width(monkeypatch, 128)
    path = tmp_path / "h2h.json"
    assert head_to_head.main(["--settings", "rule", "--dtypes", "fp32", "--widths", "128,64", "--tokens", "2",
                              "--rounds", "1", "--json", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "| fp32 2x128 inference | out of GPU memory: CUDA out of memory. Tried to allocate 20.00 GiB |" in out
    assert [r["case"] for r in json.loads(path.read_text())] == ["fp32 2x64 inference"]
    assert err.rstrip().endswith("were not allocated): fp32 2x128 inference"), err


def test_a_setting_that_fails_while_timed_fails_its_case_and_the_next_case_runs(tmp_path, monkeypatch, capsys):
    # The timing was outside the setting's report: a launch that failed there (CUDA-graph capture) ended the run.
    real = head_to_head.interleaved_rounds

    def rounds(ops, floor, timer, n):
        if any(op.args[0].num_warps == 8 for op in ops.values() if hasattr(op, "args")):
            raise RuntimeError("operation not permitted when stream is capturing")
        return real(ops, floor, timer, n)

    monkeypatch.setattr(head_to_head, "interleaved_rounds", rounds)
    path = tmp_path / "rows.json"
    args = ["--settings", "rule,W/8f", "--dtypes", "fp32", "--widths", "64", "--tokens", "1", "--rounds", "1",
            "--json", str(path)]
    assert head_to_head.main(args) == 1
    assert "| fp32 1x64 inference | (timing) | error: RuntimeError: operation not permitted" in capsys.readouterr().out
    assert not path.exists()  # nothing finished, nothing written; the next run measures it again
    assert head_to_head.main(["--settings", "rule,W/4f", *args[2:]]) == 0
    assert [r["case"] for r in json.loads(path.read_text())] == ["fp32 1x64 inference"]


def test_resuming_a_file_of_another_run_is_refused(tmp_path, monkeypatch):
    # Other settings, rounds or mode skipped every case already in the file without a word, exit status 0.
    path = tmp_path / "rows.json"
    args = ["--settings", "rule,W/4f", "--dtypes", "fp32", "--widths", "64", "--tokens", "2", "--rounds", "1",
            "--json", str(path)]
    assert head_to_head.main(args) == 0
    assert json.loads(path.read_text())[0]["run"] == {"settings": ["rule", "W/4f"], "rounds": 1,
                                                       "mode": "interpreter" if head_to_head.INTERPRET else "gpu"}
    monkeypatch.setattr(head_to_head, "measure", lambda *a: pytest.fail("measured"))
    for changed in (["--settings", "rule,W/8f"], ["--rounds", "2"]):
        with pytest.raises(SystemExit, match="holds fp32 2x64 inference measured by another run"):
            head_to_head.main([*args, *changed])
    # A case the file does not hold is this run's to add; the same run resumes.
    assert head_to_head.main(args) == 0


@pytest.mark.parametrize("rows", [
    # tune_forward.py's rows have a case each, and were taken as head-to-head cases already measured.
    [{"case": "fp32 2x64 inference", "config": "ForwardConfig(...)", "rule": True, "us": 1.0, "floor_us": 1.0,
      "fraction": 1.0}],
    [{"case": ["x"], "configs": {}, "fraction": {}, "raw": {}}]])  # was a TypeError
def test_a_file_of_another_tool_is_refused(rows, tmp_path, monkeypatch):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    monkeypatch.setattr(head_to_head, "measure", lambda *a: pytest.fail("measured"))
    with pytest.raises(SystemExit, match="holds no head-to-head rows"):
        head_to_head.main(["--settings", "rule", "--dtypes", "fp32", "--widths", "64", "--tokens", "2",
                           "--json", str(path)])
    assert json.loads(path.read_text()) == rows
