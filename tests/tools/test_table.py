"""tools/table.py: markdown tables of one commit's committed asv results."""

import json
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def table(commit, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "table.py"), commit, *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_a_whole_suite_run_and_a_later_throughput_run_give_every_op_table():
    out = table("78866b1", "274b2b6")
    assert out.returncode == 0, out.stderr
    # README's performance table, forward bf16 16384x4096: µs (IQR) from 78866b1,
    # GB/s, floor fraction, x compiled, liger, eager from 274b2b6's Throughput.
    assert "| bf16 | 16384x4096 | 98.1 (97.9–98.3) | 4081 | 0.992 | 0.98 | 1.37 | 3.49 |" in out.stdout
    assert "no Forward.time_device" not in out.stdout


def test_results_of_an_older_method_are_left_out():
    # 913953e's Throughput is version 2 (implementations measured one after another).
    out = table("913953e")
    assert out.returncode == 0, out.stderr
    assert "| bf16 | 16384x4096 | 99.7 (99.4–100.0) | – | – | – | – | – |" in out.stdout


def test_a_host_only_run_says_which_tables_it_lacks():
    out = table("788a61da")
    assert out.returncode == 0, out.stderr
    for bench in ("Forward", "ForwardResidual", "Training"):
        assert f"(no {bench}.time_device or Throughput results of the suite's current version in these runs)" in out.stdout
    # docs/performance.md, section 2: side by side 2.02.
    assert "| bf16 | 1x4096 | 42.3 | 14.4 | 2.94 | 2.02 | – |" in out.stdout


def test_an_unknown_commit_is_refused():
    out = table("0000000")
    assert out.returncode != 0 and "no results for 0000000" in out.stderr


def test_a_git_revision_names_its_commit(tmp_path):
    # `make bench` benchmarks HEAD: `table.py HEAD` must find HEAD's results.
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    (tmp_path / "nvidia-h200").mkdir()
    shutil.copy(ROOT / "results" / "benchmarks.json", tmp_path / "benchmarks.json")
    run = json.loads((ROOT / "results" / "nvidia-h200" / "788a61da-virtualenv-py3.12.json").read_text())
    run["commit_hash"] = head
    (tmp_path / "nvidia-h200" / f"{head[:8]}-virtualenv-py3.12.json").write_text(json.dumps(run))
    out = table("HEAD", "--results", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "| bf16 | 1x4096 | 42.3 | 14.4 | 2.94 | 2.02 | – |" in out.stdout


def test_the_last_commit_given_wins_value_by_value(tmp_path):
    # Forward.time_device, bf16 16384x4096: 99.7 µs at 913953e, 98.1 at 78866b1.
    assert "| bf16 | 16384x4096 | 98.1 (97.9–98.3) |" in table("913953e", "78866b1").stdout
    assert "| bf16 | 16384x4096 | 99.7 (99.4–100.0) |" in table("78866b1", "913953e").stdout
    # A later run that did not get a value (failed case) keeps the earlier one.
    folder = tmp_path / "nvidia-h200"
    folder.mkdir()
    shutil.copy(ROOT / "results" / "benchmarks.json", tmp_path / "benchmarks.json")
    shutil.copy(ROOT / "results" / "nvidia-h200" / "78866b12-virtualenv-py3.12.json", folder)
    failed = json.loads((ROOT / "results" / "nvidia-h200" / "913953e9-virtualenv-py3.12.json").read_text())
    fwd = failed["results"]["add_rmsnorm.Forward.time_device"]
    fwd[0] = [None] * len(fwd[0])
    (folder / "913953e9-virtualenv-py3.12.json").write_text(json.dumps(failed))
    assert "| bf16 | 16384x4096 | 98.1 (97.9–98.3) |" in table("78866b1", "913953e", "--results", str(tmp_path)).stdout


def test_a_hash_must_name_one_commit():
    out = table("8")  # 836e8846, 87bf1a6c and 8b159a0f start with it
    assert out.returncode != 0 and "7 or more hex digits" in out.stderr
    out = table("78866b1299")  # the files' first 8 digits match, the rest does not
    assert out.returncode != 0 and "no results for 78866b1299" in out.stderr
    out = table("*")
    assert out.returncode != 0 and "7 or more hex digits" in out.stderr


def test_a_results_folder_without_benchmarks_json_is_refused(tmp_path):
    out = table("78866b1", "--results", str(tmp_path))
    assert out.returncode != 0 and "benchmarks.json" in out.stderr
