"""tools/kernel/registers.py: the split backward compiled for Hopper on the CPU (Triton's bundled ptxas)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "kernel" / "registers.py"


def registers(*args):
    # Run as the tests run (TRITON_INTERPRET=1 on the CPU): the tool compiles for sm_90 regardless.
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=ROOT)


def table(stdout: str) -> dict:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines()[2:]]
    return {r[0]: (int(r[2]), int(r[3]), tuple(int(v) for v in r[4].split(" / "))) for r in rows}


def table_forward(stdout: str) -> dict:
    # The forward's table: case | config | registers | stack bytes | programs per SM asked / fit.
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines()[2:]]
    return {r[0]: (int(r[2]), int(r[3]), r[4]) for r in rows}


def test_every_split_setting_of_the_rule_fits_what_it_asks_on_hopper():
    # The rule's settings were measured at these fits on the H200 (docs/tuning.md#backward-split-path):
    # 2 x 1024 / 4 warps 126 registers (4 per SM), 2 x 2048 / 4 behind 235-255 (2), 2 x 4096 / 8 behind (1),
    # fp32 2 x 2048 / 4 255 (2). A kernel change that costs an SM a program fails here before a GPU run.
    out = registers("--dtypes", "bf16,fp32", "--widths", "12800,16384,16392,65536,65544,270344")
    assert out.returncode == 0, out.stdout + out.stderr
    rows = table(out.stdout)
    assert len(rows) == 12
    assert rows["bf16 16384"][0] <= 128 and rows["bf16 16384"][2] == (4, 4)
    assert rows["bf16 16392"][2] == (2, 2) and rows["bf16 65536"][2] == (1, 1)
    assert rows["fp32 16384"][2] == (2, 2)


def test_candidates_show_what_fits_without_failing():
    # 2 x 1024 / 4 warps at 20 programs a row: 135 registers, 3 of 4 fit (docs/tuning.md's residency counts).
    out = registers("--dtypes", "bf16", "--widths", "20480", "--candidates")
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(row for row in out.stdout.splitlines()
                if "block_m=2, block_n=1024, num_warps=4, programs_per_sm=4" in row and "behind=False" in row)
    assert line.rstrip(" |").endswith("4 / 3")
    assert sum("(rule)" in row for row in out.stdout.splitlines()) == 1


def test_a_rule_setting_that_does_not_fit_is_named_and_fails():
    # With a residual gradient (return_residual=True in training) 2 x 1024 / 4 warps holds more registers
    # at 16384 than 4 programs per SM leave it: the launch caps the grid at 3 (docs/tuning.md#backward-split-path).
    out = registers("--dtypes", "bf16", "--widths", "16384", "--dres")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "bf16 16384: the rule asks 4 per SM, 3 fit" in out.stderr


def test_bad_options_are_refused():
    assert "--dtypes: ['fp8'] not among" in registers("--dtypes", "fp8").stderr
    assert "positive hidden sizes, got 0" in registers("--widths", "0").stderr
    assert "16384 given more than once" in registers("--widths", "16384,+16384").stderr
    assert "hidden sizes as integers, got '1e4'" in registers("--widths", "1e4").stderr


def test_the_forward_rules_launches_hold_the_programs_the_tuning_notes_name():
    # docs/tuning.md#forward-persistent-grid: the persistent kernel holds one program an SM at 16 warps (128
    # registers a thread) and at 32 (64); #forward-warps: the 8-warp band launch at 2880 holds 6 an SM (40
    # registers), so 792 rows fill one wave on 132 SMs.
    out = registers("--forward", "--dtypes", "bf16", "--widths", "8496,16384,2880", "--rows", "512")
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.stdout.splitlines()[2:]]
    got = {r[0]: ("num_warps=16" in r[1], "persistent" in r[1], int(r[2]), r[4]) for r in rows}
    assert got == {"bf16 512x8496": (True, True, 128, "1 / 1"), "bf16 512x16384": (False, True, 64, "1 / 1"),
                   "bf16 512x2880": (False, False, 40, "– / 6")}


def test_forward_options_are_checked():
    assert "--dres, --weight and --candidates are the backward's" in registers("--forward", "--dres").stderr
    assert "argument --rows: an integer from 1 to 2147483647, got '0'" in registers("--forward", "--rows", "0").stderr


def test_the_forward_launches_at_their_register_cap_do_not_spill_at_multiples_of_8():
    # docs/tuning.md#forward-sparse-decode-warps (limits): at multiples of 8 the persistent grid (16 warps at
    # 11264, 32 at 16384: 128 and 64 registers, the most a thread gets), 32 warps at 32768 and 4 warps at
    # 8 decode rows of 16384 (246) keep no stack frame; one element at a time (32767) the 32-warp tile does.
    stack = {}
    for rows, widths in (("512", "11264,16384"), ("8192", "32768,32767"), ("8", "16384")):
        out = registers("--forward", "--dtypes", "bf16", "--widths", widths, "--rows", rows)
        assert out.returncode == 0, out.stdout + out.stderr
        stack |= {case: (regs, spill) for case, (regs, spill, _) in table_forward(out.stdout).items()}
    assert stack == {"bf16 512x11264": (128, 0), "bf16 512x16384": (64, 0), "bf16 8192x32768": (64, 0),
                     "bf16 8x16384": (246, 0), "bf16 8192x32767": (64, 88)}
