"""tools/kernel/rule_score.py: today's launch rules scored against the committed sweeps, without a GPU.

Each test runs in a fresh interpreter: the tool compiles kernels for sm_90, so it unsets TRITON_INTERPRET
before fusedkernel's kernels are made (registers.py does), which here would turn the interpreter off for
every later test.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "kernel" / "rule_score.py"
PRELUDE = f"""
import json, pathlib, sys
sys.path.insert(0, {str(ROOT / "tools" / "kernel")!r})
import pytest
import rule_score
from fusedkernel.kernels.backward_rule import backward_config
from fusedkernel.kernels.config import HOPPER
from fusedkernel.kernels.forward_rule import band_wave_config, forward_config
"""


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=ROOT)


def check(code: str, *args) -> None:
    """``code``'s assertions, with the tool imported, in a fresh interpreter (``args``: its sys.argv[1:])."""
    out = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *map(str, args)],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def test_both_sweep_formats_are_read_and_kernel_variants_and_copies_left_out():
    check('''
    rows = [{"case": "bf16 1x4096 inference", "config": "A", "fraction": 0.8, "rule": True},
            {"case": "bf16 1x4096 inference", "config": "A", "fraction": 0.9, "rule": True},  # a repeat
            {"case": "bf16 1x4096 inference", "config": "B", "fraction": 0.7, "variant": "prefetch"},
            {"case": "bf16 8x4096 forward", "configs": {"rule": "A", "W/8f": "C"},
             "fraction": {"rule": 0.5, "W/8f": 0.6}},
            {"case": "bf16 8x4096 forward", "configs": {"x": "D"}, "fraction": {"x": float("nan")}},
            # A copy bounds a launch and is faster than any: it must not be the best launch measured.
            {"case": "bf16 8x4096 forward", "configs": {"copy:rule": "copy of A"}, "fraction": {"copy:rule": 0.9}},
            "not a row", {"case": 5, "config": "A", "fraction": 1.0}]
    assert rule_score.measured(rows) == {"bf16 1x4096 inference": {"A": [0.8, 0.9]},
                                         "bf16 8x4096 forward": {"A": [0.5], "C": [0.6]}}
    assert rule_score.measured({"rows": []}) == {}
    ''')


def test_the_rule_is_the_h200_launch_of_the_case():
    check('''
    rule = rule_score.Rule()
    assert rule("bf16 1x4096 inference", "ForwardConfig") == repr(forward_config(4096, 2, 132, HOPPER, 1, True, False))
    assert rule("fp16 64x5120 forward", "ForwardConfig") == repr(forward_config(5120, 2, 132, HOPPER, 64, False, True))
    assert rule("fp32 8192x4096", "BackwardConfig") == repr(backward_config(4096, 4, 132, HOPPER))
    # Past the SMs the band's warps follow the registers of the kernel compiled for sm_90.
    band = forward_config(2880, 2, 132, HOPPER, 700, True, False)
    want = band_wave_config(band, 700, 132, HOPPER, lambda c: rule.resident(c, "bf16", 2880, True))
    assert rule("bf16 700x2880 inference", "ForwardConfig") == repr(want)
    # 6 programs of 8 warps an SM (40 registers) hold 792 rows: past them, half the warps, weight before the sums.
    assert "num_warps=8, weight_load='first'" in repr(want)
    assert "num_warps=4, weight_load='before_sum'" in rule("bf16 860x2880 inference", "ForwardConfig")
    for case, kind in (("bf16 1x4096", "ForwardConfig"), ("bf16 1x4096 inference", "BackwardConfig"),
                       ("int8 1x4096 forward", "ForwardConfig"), ("bf16 0x4096 forward", "ForwardConfig")):
        assert rule(case, kind) is None
    ''')


def test_each_case_scores_the_rule_against_the_best_of_its_own_file(tmp_path):
    check('''
    ours = repr(forward_config(4096, 2, 132, HOPPER, 1, True, False))
    (pathlib.Path(sys.argv[1]) / "a.json").write_text(json.dumps([
        {"case": "bf16 1x4096 inference", "config": ours, "fraction": 0.72},
        {"case": "bf16 1x4096 inference", "config": ours, "fraction": 0.80},
        {"case": "bf16 1x4096 inference", "config": "other", "fraction": 0.80},
        {"case": "bf16 8x4096 inference", "config": "ForwardConfig(other)", "fraction": 0.80},
        {"case": "bf16 1x4096", "config": "ForwardConfig(other)", "fraction": 0.80}]))
    b = [{"case": "bf16 1x4096 inference", "config": ours, "fraction": 0.5}]
    (pathlib.Path(sys.argv[1]) / "b.json").write_text(json.dumps(b))
    scored, left = rule_score.score(pathlib.Path(sys.argv[1]))
    assert [(r["file"], r["case"], r["score"]) for r in scored] == [
        ("a.json", "bf16 1x4096 inference", pytest.approx(0.76 / 0.80)), ("b.json", "bf16 1x4096 inference", 1.0)]
    assert left == {"the rule's launch not measured": 1, "another form of case": 1}
    text = rule_score.report(scored, left, 5)
    assert text.startswith("2 cases scored: the rule within 3% of the best in 1 (50.0%)")
    assert "The 1 lowest of 1 below 0.97:" in text and "| 0.950 | bf16 1x4096 inference | a.json |" in text
    ''', tmp_path)


def test_changes_name_the_cases_whose_rule_launch_moved():
    check('''
    now = [{"file": "a.json", "case": "c1", "rule": "new", "score": 1.0, "fractions": {"new": 0.8, "old": 0.76}},
           {"file": "a.json", "case": "c2", "rule": "same", "score": 1.0, "fractions": {"same": 0.8}},
           {"file": "a.json", "case": "c3", "rule": "new", "score": 0.9, "fractions": {"new": 0.72, "x": 0.8}}]
    earlier = [{"file": "a.json", "case": "c1", "rule": "old"}, {"file": "a.json", "case": "c2", "rule": "same"},
               {"file": "a.json", "case": "c3", "rule": "gone"}, {"file": "b.json", "case": "c1", "rule": "old"}]
    text = rule_score.changes(now, earlier)
    assert text.splitlines()[0] == "2 scored cases' rule launch changed:"
    assert "| c1 | a.json | 0.950 | 1.000 |" in text and "| c3 | a.json | not measured | 0.900 |" in text
    assert rule_score.changes(now, earlier[1:2]) == "no scored case's rule launch changed"
    ''')


def test_the_committed_sweeps_are_scored_and_a_run_compares_with_an_earlier_one(tmp_path):
    out = run("--json", str(tmp_path / "now.json"), "--misses", "3")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert " cases scored: the rule within 3% of the best in " in first and "geometric mean 0.9" in first, first
    scored = json.loads((tmp_path / "now.json").read_text())
    assert len(scored) > 1000 and all(0 < r["score"] <= 1 for r in scored)
    # A rule edit, played by an earlier run whose launches differed at two cases.
    earlier = [dict(r) for r in scored]
    earlier[0]["rule"], earlier[1]["rule"] = "ForwardConfig(then)", "ForwardConfig(then)"
    (tmp_path / "then.json").write_text(json.dumps(earlier))
    out = run("--against", str(tmp_path / "then.json"), "--misses", "0")
    assert out.returncode == 0 and "2 scored cases' rule launch changed:" in out.stdout, out.stdout[-2000:]


@pytest.mark.parametrize("args, message", [(["--sweeps", "/nonexistent"], "not a folder"),
                                           # It scored nothing and printed a geometric mean of nan.
                                           (["--sweeps", str(pathlib.Path(__file__).parent)], "no sweep files"),
                                           (["--misses", "-1"], "an integer from 0 to 2147483647, got '-1'"),
                                           (["--misses", "\u0663"], "an integer from 0 to"),  # Arabic-Indic 3
                                           (["--against", "/nonexistent.json"], "not readable JSON"),
                                           (["--json", "/nonexistent/x.json"], "is not an existing directory")])
def test_bad_arguments_are_one_line(args, message):
    out = run(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("rows", [[{"case": "bf16 2x64 inference", "config": "ForwardConfig(...)", "rule": True,
                                    "us": 1.0, "floor_us": 1.0, "fraction": 1.0}],  # a tune_forward.py --json
                                   [{"file": [], "case": "x", "rule": "r", "score": 1.0}]])  # was a TypeError
def test_against_a_file_of_another_tool_is_refused(rows, tmp_path):
    # It printed "no scored case's rule launch changed": silently wrong.
    path = tmp_path / "other.json"
    path.write_text(json.dumps(rows))
    out = run("--against", str(path), "--misses", "0")
    assert out.returncode == 2 and "not a --json of this tool" in out.stderr and "Traceback" not in out.stderr
