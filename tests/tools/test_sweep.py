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
    assert "nothing measured in 2 cases (no candidate passed its check, or out of GPU memory: the rows above): bf16 4x64, fp32 2x64" in capsys.readouterr().err


def test_rows_hold_the_asked_size_and_at_least_128():
    assert _sweep.rows_for(4096, 128) == 16384 and _sweep.rows_for(1 << 20, 1) == 128


def test_json_rows_are_written_whole(tmp_path):
    path = tmp_path / "rows.json"
    _sweep.write_json(str(path), [{"case": "bf16 1x64", "fraction": 0.5}])
    _sweep.write_json(str(path), [{"case": "bf16 1x64", "fraction": 0.5}, {"case": "bf16 8x64", "fraction": 0.7}])
    assert [r["case"] for r in json.loads(path.read_text())] == ["bf16 1x64", "bf16 8x64"]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_a_json_path_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    import argparse

    import pytest

    assert _sweep.json_path(str(tmp_path / "rows.json")) == str(tmp_path / "rows.json")
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing
    for bad in ("/proc/rows.json", str(tmp_path / "missing" / "rows.json"), str(tmp_path), ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _sweep.json_path(bad)


def test_tune_backward_refuses_bad_options_before_measuring():
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kernel" / "tune_backward.py"
    for args, message in ((["--rows", "0"], "--rows: a positive count, got 0"),
                          (["--mib", "0"], "--mib: a positive count, got 0"),  # it was taken as 128 rows
                          (["--widths", "0"], "--widths takes positive integers"),  # ZeroDivisionError
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
    for args, message in ((["--widths", "0"], "--widths takes positive integers"),
                          (["--widths", "64,"], "--widths: an empty entry"),
                          (["--widths", ","], "--widths: an empty entry"),  # "[''] given more than once"
                          (["--widths", "abc"], "--widths takes positive integers"),
                          (["--widths", "64,064"], "--widths: [64] given more than once"),  # measured twice
                          (["--widths", "+64"], "--widths takes positive integers"),
                          (["--tokens", "0"], "--tokens takes positive integers"),
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
        assert out.returncode == 1 and "no GPU here" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("tool, args", [
    ("tune_forward.py", ["--op", "inference", "--tokens", "2"]),
    ("tune_backward.py", ["--rows", "2", "--paths", "rows"])])
def test_a_case_too_large_for_the_gpu_is_reported_and_the_next_one_runs(tool, args, monkeypatch, capsys):
    # A width too wide for the GPU ended the sweep with a traceback: every case after it was lost.
    import runpy

    import torch

    real = torch.randn

    def randn(*size, **kw):
        if size[-1] == 128:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore")
        return real(*size, **kw)

    monkeypatch.setattr(torch, "randn", randn)
    monkeypatch.setattr(sys, "argv", [tool, "--dtypes", "fp32", "--widths", "128,64", *args])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(pathlib.Path(_sweep.__file__).with_name(tool)), run_name="__main__")
    out, err = capsys.readouterr()
    label = "fp32 2x128 inference" if tool == "tune_forward.py" else "fp32 2x128"
    assert f"| {label} | out of GPU memory: CUDA out of memory. Tried to allocate 20.00 GiB | | |" in out, out
    assert "BEST fp32 2x64" in out and e.value.code == 1
    assert err.rstrip().endswith(f"the rows above): {label}"), err
