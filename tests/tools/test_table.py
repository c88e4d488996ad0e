"""tools/table.py: markdown tables of one commit's committed asv results."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def table(commit):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "table.py"), commit],
                          capture_output=True, text=True, cwd=ROOT)


def test_a_whole_suite_run_gives_every_op_table():
    out = table("913953e")
    assert out.returncode == 0, out.stderr
    # README's performance table, forward bf16 16384x4096: µs (IQR), GB/s, floor fraction, x compiled, liger, eager.
    assert "| bf16 | 16384x4096 | 99.7 (99.4–100.0) | 4043 | 0.987 | 0.98 | 1.37 | 3.45 |" in out.stdout
    assert "no Forward.time_device" not in out.stdout


def test_a_host_only_run_says_which_tables_it_lacks():
    out = table("788a61da")
    assert out.returncode == 0, out.stderr
    for bench in ("Forward", "ForwardResidual", "Training"):
        assert f"(no {bench}.time_device or Throughput results in this run)" in out.stdout
    # docs/performance.md, section 2: side by side 2.02 (Python path), 1.14 (native lane).
    assert "| bf16 | 1x4096 | 42.3 | 14.4 | 2.94 | 2.02 | 1.14 | – | – |" in out.stdout


def test_an_unknown_commit_is_refused():
    out = table("0000000")
    assert out.returncode != 0 and "no results for 0000000" in out.stderr
