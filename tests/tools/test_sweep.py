"""tools/kernel/_sweep.py: the tuners' shared check, timing and report."""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel"))
import _sweep  # noqa: E402
import pytest  # noqa: E402


def test_sweep_reports_each_candidate_refuses_wrong_ones_and_names_the_best(capsys, monkeypatch):
    times = {"rule": 2.0, "faster": 1.0, "wrong": 0.5}
    monkeypatch.setattr(_sweep, "warm_up", lambda fn, s: None)
    # interleaved_medians gets (op, floor): the op runs the candidate.
    monkeypatch.setattr(_sweep, "interleaved_medians", lambda op, floor, timer=None: (op(), 1.0))

    def check(cfg):
        if cfg == "wrong":
            raise ValueError("wrong result")

    rows = _sweep.sweep("bf16 4x64", ["rule", "faster", "wrong"], lambda cfg: times[cfg], check, lambda: None)
    assert [(r["config"], r["rule"], r["fraction"]) for r in rows] == [("'rule'", True, 0.5), ("'faster'", False, 1.0)]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| bf16 4x64 | rule (rule) | 2000000.0 |") and out[0].endswith("| 0.500 |")
    assert "| wrong | error: ValueError: wrong result |" in out[2]
    assert out[-1] == "BEST bf16 4x64: faster fraction 1.000 (1000000.0 µs)"


def test_a_case_no_candidate_passes_is_named_and_fails_the_run(capsys):
    # The tuners printed an error row per candidate, no BEST line, and exited 0.
    def check(cfg):
        raise ValueError("wrong result")

    assert _sweep.sweep("bf16 4x64", ["rule", "other"], lambda cfg: None, check, lambda: None) == []
    assert capsys.readouterr().out.splitlines()[-1] == "NONE bf16 4x64: every candidate failed its check"
    assert _sweep.exit_status([]) == 0 and _sweep.exit_status(["bf16 4x64", "fp32 2x64"]) == 1
    assert "2 failed (the rows above: no candidate passed its check, a setting failed, or the case's tensors were not allocated): bf16 4x64, fp32 2x64" in capsys.readouterr().err


def test_rows_hold_the_asked_size_and_at_least_128():
    assert _sweep.rows_for(4096, 128) == 16384 and _sweep.rows_for(1 << 20, 1) == 128


def test_json_rows_are_written_whole(tmp_path):
    path = tmp_path / "rows.json"
    _sweep.write_json(str(path), [{"case": "bf16 1x64", "fraction": 0.5}])
    _sweep.write_json(str(path), [{"case": "bf16 1x64", "fraction": 0.5}, {"case": "bf16 8x64", "fraction": 0.7}])
    assert [r["case"] for r in json.loads(path.read_text())] == ["bf16 1x64", "bf16 8x64"]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_json_files_are_written_through_links_and_leave_other_files_alone(tmp_path):
    # The temporary file was FILE.tmp: a user's file of that name was overwritten, then deleted.
    (tmp_path / "rows.json.tmp").write_text("precious")
    target = tmp_path / "target.json"
    target.write_text("[]")
    (tmp_path / "rows.json").symlink_to(target)
    _sweep.json_path(str(tmp_path / "rows.json"))
    _sweep.write_json(str(tmp_path / "rows.json"), [{"case": "bf16 1x64"}])
    assert (tmp_path / "rows.json").is_symlink() and json.loads(target.read_text()) == [{"case": "bf16 1x64"}]
    assert (tmp_path / "rows.json.tmp").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.json", "rows.json.tmp", "target.json"]
    assert target.stat().st_mode & 0o044  # readable by others as any file the user writes, not mkstemp's 0600


def test_a_json_path_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    import argparse

    import pytest

    assert _sweep.json_path(str(tmp_path / "rows.json")) == str(tmp_path / "rows.json")
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing
    import os

    os.mkfifo(tmp_path / "fifo")
    for bad, message in (("/proc/rows.json", "is not writable"),
                         (str(tmp_path / "missing" / "rows.json"), "is not an existing directory"),
                         (str(tmp_path), "is a directory"), ("", "an empty path"),
                         # It passed, and the first write failed after a case was measured: rows.json/.tmp.
                         (str(tmp_path / "rows.json") + "/", "is a directory"),
                         # os.replace turned a FIFO or a device node into a regular file.
                         (str(tmp_path / "fifo"), "is not a regular file")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            _sweep.json_path(bad)
    (tmp_path / "old.json").write_text("[]")
    _sweep.json_path(str(tmp_path / "old.json"))  # head_to_head resumes it
    with pytest.raises(argparse.ArgumentTypeError, match="exists: this tool does not resume a file"):
        _sweep.new_json_path(str(tmp_path / "old.json"))  # the tuners replaced what it held


def test_tune_backward_refuses_bad_options_before_measuring():
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel" / "tune_backward.py"
    for args, message in ((["--rows", "0"], "argument --rows: an integer from 1 to 2147483647, got '0'"),
                          (["--mib", "0"], "argument --mib: an integer from 1 to 2147483647, got '0'"),  # it was taken as 128 rows
                          (["--widths", "0"], "--widths takes integers from 1 to 2147483647"),  # ZeroDivisionError
                          (["--rows", "99999999999999999999"], "argument --rows: an integer from 1 to"),
                          (["--dtypes", "fp64"], "--dtypes: ['fp64'] not among bf16, fp16, fp32"),
                          (["--around-rule", "--paths", "rows"], "--around-rule sweeps the rule's own path"),
                          (["--mib", "64", "--rows", "8192"], "give --mib or --rows, not both"),
                          (["--paths", "rows,bogus"], "--paths: ['bogus'] not among"),
                          (["--paths", ""], "--paths: an empty entry")):  # it swept every path
        out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr[-500:])


def test_tune_forward_refuses_bad_options_before_measuring():
    # Each gave a traceback (int(), KeyError), or a run of "error" rows that exited 0 (--tokens 0).
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel" / "tune_forward.py"
    for args, message in ((["--widths", "0"], "--widths takes integers from 1 to 2147483647"),
                          (["--widths", "64,"], "--widths: an empty entry"),
                          (["--widths", ","], "--widths: an empty entry"),  # "[''] given more than once"
                          (["--widths", "abc"], "--widths takes positive integers"),
                          (["--widths", "64,064"], "--widths: [64] given more than once"),  # measured twice
                          (["--widths", "+64"], "--widths takes positive integers"),
                          (["--tokens", "0"], "--tokens takes integers from 1 to 2147483647"),
                          (["--dtypes", "fp64"], "--dtypes: ['fp64'] not among bf16, fp16, fp32")):
        out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


def test_tune_backward_checks_its_candidates_in_the_interpreter():
    # It allocated on "cuda" whatever the mode: the command could not be checked without a GPU.
    import os
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel" / "tune_backward.py"
    run = subprocess.run([sys.executable, str(script), "--dtypes", "fp32", "--widths", "64", "--rows", "2",
                          "--paths", "rows"], capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0 and "| error: " not in run.stdout and "BEST fp32" in run.stdout, run.stderr[-800:]


def test_tune_forward_checks_every_candidate_of_each_op(tmp_path):
    # In the interpreter: every candidate of each op passes its check (y, and
    # x + residual bit for bit where it is stored) and lands in --json, the rule first;
    # bf16 too, whose sum the interpreter truncates (every candidate was "wrong" there).
    import os
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel" / "tune_forward.py"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    for op in ("forward", "inference", "forward+residual"):
        out = tmp_path / f"{op.replace('+', '-')}.json"
        run = subprocess.run([sys.executable, str(script), "--op", op, "--dtypes", "fp32,bf16", "--widths", "64",
                              "--tokens", "2", "--json", str(out)], capture_output=True, text=True, env=env)
        assert run.returncode == 0 and "| error: " not in run.stdout, (op, run.stdout[-500:], run.stderr[-500:])
        rows = json.loads(out.read_text())
        assert rows[0]["rule"] and {r["case"] for r in rows} == {f"{d} 2x64 {op}" for d in ("fp32", "bf16")}, rows


def test_a_wrong_candidate_leaves_the_next_ones_their_residual(monkeypatch, capsys):
    # The inference call updates the residual in place: a candidate that writes
    # a NaN there is reported, and the residual is restored before the next runs.
    import runpy

    from fusedkernel.kernels import launch

    real, seen = launch.forward_rows, []

    def first_one_wrong(x, r, w, eps, y, res=None, rstd=None, cfg=None):
        real(x, r, w, eps, y, res, rstd, cfg)
        seen.append(cfg)
        if cfg == seen[0] and res is not None:
            res.view(-1)[0] = float("nan")

    monkeypatch.setattr(launch, "forward_rows", first_one_wrong)
    monkeypatch.setattr(sys, "argv", ["tune_forward.py", "--op", "inference", "--dtypes", "fp32", "--widths", "64",
                                      "--tokens", "2"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(pathlib.Path(_sweep.__file__).with_name("tune_forward.py")), run_name="__main__")
    out = capsys.readouterr().out
    assert out.count("error: ValueError: wrong x + residual") == 1 and out.count("| error: ") == 1, out
    assert e.value.code == 0


def test_host_overhead_shows_its_help_and_needs_a_gpu():
    # --help ran the benchmark and died on CUDA's AssertionError.
    import os
    import subprocess

    import torch

    script = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel" / "host_overhead.py"
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "Host time per call at decode shapes" in out.stdout, out.stderr[-500:]
    if not torch.cuda.is_available():
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env={**os.environ, "TRITON_INTERPRET": "1"})
        # Exit 2, the usage error of the other kernel tools without a GPU (it was 1: a review's find).
        assert out.returncode == 2 and "no GPU here" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("tool, args", [
    ("tune_forward.py", ["--op", "inference", "--tokens", "2"]),
    ("tune_backward.py", ["--rows", "2", "--paths", "rows"])])
def test_a_case_too_large_for_the_gpu_is_reported_and_the_next_one_runs(tool, args, monkeypatch, capsys):
    # A width too wide for the GPU ended the sweep with a traceback: every case after it was lost.
    import runpy

    from helpers import out_of_memory_at_width

    out_of_memory_at_width(monkeypatch, 128)
    monkeypatch.setattr(sys, "argv", [tool, "--dtypes", "fp32", "--widths", "128,64", *args])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(pathlib.Path(_sweep.__file__).with_name(tool)), run_name="__main__")
    out, err = capsys.readouterr()
    label = "fp32 2x128 inference" if tool == "tune_forward.py" else "fp32 2x128"
    assert f"| {label} | out of GPU memory: CUDA out of memory. Tried to allocate 20.00 GiB | | |" in out, out
    assert "BEST fp32 2x64" in out and e.value.code == 1
    assert err.rstrip().endswith(f"were not allocated): {label}"), err


def test_a_candidate_that_fails_while_timed_is_reported_and_the_next_one_runs(capsys, monkeypatch):
    # The timing was outside the candidate's report: a launch that failed there ended the sweep.
    monkeypatch.setattr(_sweep, "warm_up", lambda fn, s: None)

    def medians(op, floor, timer=None):
        if op() == "fails":
            raise RuntimeError("operation not permitted when stream is capturing")
        return 2.0, 1.0

    monkeypatch.setattr(_sweep, "interleaved_medians", medians)
    rows = _sweep.sweep("bf16 4x64", ["fails", "next"], lambda cfg: cfg, lambda cfg: None, lambda: None)
    assert [r["config"] for r in rows] == ["'next'"]
    out = capsys.readouterr().out
    assert "| bf16 4x64 | fails | error: RuntimeError: operation not permitted" in out
    assert out.splitlines()[-1].startswith("BEST bf16 4x64: next")


@pytest.mark.parametrize("tool, args", [
    ("tune_forward.py", ["--op", "inference", "--tokens", "2"]),
    ("tune_backward.py", ["--rows", "2", "--paths", "rows"])])
def test_ctrl_c_in_a_tuner_keeps_the_finished_cases(tool, args, tmp_path, monkeypatch, capsys):
    # A traceback, and no word of what was kept.
    import runpy

    real = _sweep.sweep

    def sweep(label, *a, **kw):
        if "128" in label:
            raise KeyboardInterrupt
        return real(label, *a, **kw)

    monkeypatch.setattr(_sweep, "sweep", sweep)
    path = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", [tool, "--dtypes", "fp32", "--widths", "64,128", "--json", str(path), *args])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(pathlib.Path(_sweep.__file__).with_name(tool)), run_name="__main__")
    assert e.value.code == 130
    assert {r["case"].split()[1] for r in json.loads(path.read_text())} == {"2x64"}
    assert f"interrupted: 1 finished cases kept in {path}" in capsys.readouterr().err


def test_the_tuners_without_a_gpu_or_the_interpreter_say_so():
    # tune_forward ended in "Cannot get CUDA generator", tune_backward in torch's AssertionError.
    import os
    import subprocess

    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU host the tools run")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    for tool, args in (("tune_forward.py", []), ("tune_backward.py", []), ("measure_cases.py", ["--cases", "bf16 1x64"])):
        script = pathlib.Path(_sweep.__file__).with_name(tool)
        out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env)
        assert out.returncode == 2 and "no GPU here: run it on one, or set TRITON_INTERPRET=1" in out.stderr, (
            tool, out.stderr[-800:])


def test_tune_backward_checks_a_one_column_row_against_its_terms():
    # Every candidate failed at one column: dx there is near zero, and its rounding was divided by it.
    import os
    import subprocess

    script = pathlib.Path(_sweep.__file__).with_name("tune_backward.py")
    run = subprocess.run([sys.executable, str(script), "--dtypes", "fp32,bf16", "--widths", "1", "--rows", "2",
                          "--paths", "rows"], capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0 and "| error: " not in run.stdout, run.stdout[-800:] + run.stderr[-800:]
