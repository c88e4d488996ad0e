"""tools/table.py: markdown tables of the committed H200 results."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import report  # noqa: E402


def table(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "table.py"), *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_the_real_model_grid_run_gives_every_op_table():
    # 2573e966 measured forward, forward+residual and inference at the suite's current version;
    # f87a9192's results (version 5) are left out but for the host ratio.
    out = table("f87a9192", "2573e966")
    assert out.returncode == 0, out.stderr
    for op in ("forward", "forward+residual", "inference"):
        assert f"### {op}\n" in out.stdout
    # docs/performance.md: inference, bf16 8192x5120 (µs, GB/s, fraction of floor, x compiled, liger, quack, eager).
    row = next(line for line in out.stdout.split("### inference")[1].splitlines() if line.startswith("| bf16 8192x5120"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "bf16 8192x5120" and float(cells[1]) > 0 and 0 < float(cells[3]) < 1.1
    assert float(cells[5]) > 0 and cells[6] == "–"  # Liger measured; quack was not installed in that run


def test_performance_md_shows_the_latest_whole_suite_run_as_generated():
    # 94e2de6: the whole suite in one lease, quack installed.
    out = table("94e2de6")
    assert out.returncode == 0, out.stderr
    for op in ("forward", "forward+residual", "inference", "forward+backward"):
        assert f"### {op}\n" in out.stdout
    assert "### host time per synchronized decode call" in out.stdout
    assert out.stdout.strip() in (ROOT / "docs" / "performance.md").read_text()


def test_the_whole_suite_run_that_showed_the_fixes_fills_every_table():
    # 4bd8fc6a: the whole suite in one lease, quack installed; the values each fix was shown by.
    out = table("4bd8fc6a")
    assert out.returncode == 0, out.stderr
    rows = {op: {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
                 for line in out.stdout.split(f"### {op}\n")[1].split("\n### ")[0].splitlines()
                 if line.startswith("| ")} for op in ("forward", "inference", "forward+backward")}
    assert rows["inference"]["bf16 8192x5120"][6] != "–"  # quack measured in that run
    assert float(rows["forward"]["bf16 8192x7168"][3]) > 0.95  # 0.898 at 11b6138a
    # The persistent grid for 32 KiB rows at 2-8 rows per SM (be4bba2): 0.977 at 16cf6f91, 1.125 here.
    assert float(rows["inference"]["bf16 512x16384"][3]) > 1.0
    # Decode tiles past 4096 load the weight before the row sums (75e42ce5): x Liger was 0.974 at e38be475.
    assert float(rows["inference"]["fp16 1x5120"][5]) > 1.03
    # A lone 16384 row split into 8 pieces with the residual stored (0.390 at 2765c356), and fp32 sparse decode
    # writing y only at 8 warps (0.524 at 2765c356): docs/tuning.md#forward-sparse-decode-warps.
    assert float(rows["inference"]["bf16 1x16384"][3]) > 0.41
    assert float(rows["forward"]["fp32 1x5120"][3]) > 0.56
    # The backward's whole rows loading the next row block ahead: 0.868 at ee282836.
    assert float(rows["forward+backward"]["bf16 8192x8192"][3]) > 0.93
    # The split backward's exchange behind: 0.769 at d29088f9.
    assert float(rows["forward+backward"]["bf16 1024x65536"][3]) > 0.84
    # Rows held as two pieces (since bd7528db): 0.863 in one padded tile at 388828d5.
    assert float(rows["forward+backward"]["bf16 8192x5120"][3]) > 0.92
    # rstd loaded with each row block's tile and the dweight sum as a dependent launch: 0.899 at 10c8835f.
    assert float(rows["forward+backward"]["bf16 8192x2048"][3]) > 0.90


def test_the_wider_split_tile_run_gives_the_wide_row_its_forward_and_backward():
    # d0a0c1b2: forward+backward alone, 2-byte rows of 32769-65536 with 4096-column split tiles (0.844 at 16cf6f91).
    out = table("d0a0c1b2")
    assert out.returncode == 0, out.stderr
    assert "### forward\n" not in out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("| bf16 1024x65536"))
    assert float(row.strip("|").split("|")[3]) > 0.86


def test_results_of_an_older_suite_version_are_left_out():
    # 274b2b6 holds the previous suite (Throughput, *.time_device), not this suite's benchmarks.
    out = table("274b2b6")
    assert out.returncode == 0, out.stderr
    assert "no results of the suite's current version" in out.stdout


def test_bad_commits_are_refused():
    assert "neither a git revision" in table("xyz").stderr
    assert "no results for 0000000" in table("0000000").stderr


def test_a_later_run_replaces_values_one_by_one():
    from table import merged_rows

    class Fake:
        def __init__(self, rows):
            self._rows = rows

    rows_a = [report.Row("inference", "bf16 1x4096", 2.0, 10.0, 1.5, {"eager": 3.0})]
    rows_b = [report.Row("inference", "bf16 1x4096", None, None, 1.4, {"compiled": 1.1})]
    orig = report.rows
    report.rows = lambda res, current=None: res._rows
    try:
        (row,) = merged_rows([Fake(rows_a), Fake(rows_b)], None)
    finally:
        report.rows = orig
    assert (row.us, row.gbps, row.ratio, row.peers) == (2.0, 10.0, 1.4, {"eager": 3.0, "compiled": 1.1})


def test_an_unreadable_benchmarks_json_gives_the_table_with_a_warning(tmp_path):
    # It warned, then crashed on the host ratio's lookup (TypeError) instead of printing the table.
    import shutil

    results = tmp_path / "results"
    (results / "nvidia-h200").mkdir(parents=True)
    for path in (ROOT / "results" / "nvidia-h200").glob("d388f72e-*.json"):
        shutil.copy(path, results / "nvidia-h200")
    shutil.copy(ROOT / "results" / "nvidia-h200" / "machine.json", results / "nvidia-h200")
    # '{"add_rmsnorm.Forward.track_ratio": 5}': asv's get_result_keys crashed on the entry.
    for text in ("[]", (ROOT / "results" / "benchmarks.json").read_text()[:3000],
                 '{"add_rmsnorm.Forward.track_ratio": 5, "version": 2}'):
        (results / "benchmarks.json").write_text(text)
        out = table("d388f72", "--results", str(results))
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert "benchmarks.json is unreadable" in out.stderr
        assert "### inference\n" in out.stdout and "### host time per synchronized decode call" in out.stdout


def _results_with(tmp_path, edits: dict) -> pathlib.Path:
    """A results folder holding d388f72's results file once per ``edits`` entry: {file name: fn(data) -> data}."""
    import json
    import shutil

    results = tmp_path / "results"
    (results / "nvidia-h200").mkdir(parents=True)
    shutil.copy(ROOT / "results" / "benchmarks.json", results)
    shutil.copy(ROOT / "results" / "nvidia-h200" / "machine.json", results / "nvidia-h200")
    (source,) = (ROOT / "results" / "nvidia-h200").glob("d388f72e-*.json")
    for name, edit in edits.items():
        (results / "nvidia-h200" / name).write_text(json.dumps(edit(json.loads(source.read_text()))))
    return results


def _inference_row(stdout: str, case: str) -> list[str]:
    line = next(line for line in stdout.split("### inference")[1].splitlines() if line.startswith(f"| {case} "))
    return [c.strip() for c in line.strip("|").split("|")]


def _scaled(data: dict, commit: str, factor: float) -> dict:
    """``data`` of another commit, the fused op's inference ratios times ``factor``."""
    data["commit_hash"] = commit
    ratio = data["results"]["add_rmsnorm.Inference.track_ratio"]
    impls, cases = ratio[1]  # values: impls x cases, flattened
    fused = impls.index("'fused'")
    ratio[0] = [v * factor if k // len(cases) == fused and v is not None else v for k, v in enumerate(ratio[0])]
    return data


def test_an_ambiguous_commit_prefix_is_refused(tmp_path):
    # A review's find: two commits with results under one prefix, the first found was shown without a word.
    results = _results_with(tmp_path, {"aaaaaaa1-env.json": lambda d: _scaled(d, "aaaaaaa1" + "0" * 32, 1.0),
                                       "aaaaaaa2-env.json": lambda d: _scaled(d, "aaaaaaa2" + "0" * 32, 2.0)})
    out = table("aaaaaaa", "--results", str(results))
    assert out.returncode != 0 and "aaaaaaa names 2 commits with results (aaaaaaa10000, aaaaaaa20000)" in out.stderr
    out = table("aaaaaaa2", "--results", str(results))
    assert out.returncode == 0, out.stderr


def test_two_files_of_one_commit_show_the_one_run_last_with_a_warning(tmp_path):
    # A review's find: the file whose name sorted last won, silently (another Python's environment, say).
    def later(data, shift):
        data["env_name"] = f"virtualenv-py3.1{shift}"
        data["results"] = {k: v[:3] + [v[3] + shift * 1000] + v[4:] if isinstance(v, list) and len(v) > 3 else v
                           for k, v in data["results"].items()}
        return data

    first = table("d388f72")
    results = _results_with(tmp_path, {"d388f72e-b.json": lambda d: later(d, 2),
                                       "d388f72e-a.json": lambda d: later(_scaled(d, d["commit_hash"], 2.0), 3)})
    out = table("d388f72", "--results", str(results))
    assert out.returncode == 0 and "two results files for d388f72e" in out.stderr, out.stderr
    assert "the one asv started last is shown, virtualenv-py3.13" in out.stderr
    before, after = _inference_row(first.stdout, "bf16 8192x5120"), _inference_row(out.stdout, "bf16 8192x5120")
    assert float(after[3]) == pytest.approx(float(before[3]) / 2, abs=2e-3)


def test_values_that_do_not_match_their_parameters_are_skipped_with_a_warning(tmp_path):
    # A review's find: an extra case in the parameters paired every value with the wrong case, silently.
    def extra_case(data):
        data["results"]["add_rmsnorm.Inference.track_ratio"][1][1].append("'bf16 9x9'")
        return data

    results = _results_with(tmp_path, {"d388f72e-x.json": extra_case})
    out = table("d388f72", "--results", str(results))
    assert out.returncode == 0 and "skipping add_rmsnorm.Inference.track_ratio of d388f72e" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("value", [float("inf"), True, "1.2"])
def test_a_value_that_is_no_finite_number_is_dropped(value):
    assert report._num(value) is None and report._num(1.5) == 1.5 and report._num(2) == 2


def test_a_null_commit_date_orders_without_a_crash():
    # A review's find: date null in a results file of a commit git does not know raised a TypeError.
    assert report.commit_order({"f" * 40, "e" * 40}, {"f" * 40: None, "e" * 40: 5}) == ["f" * 40, "e" * 40]


def test_the_run_summary_notes_the_interpreter_by_its_mode_not_its_path(tmp_path):
    # A review's find: a GPU results folder whose path held "interpreter" got the interpreter's note.
    results = _results_with(tmp_path / "interpreter-review", {"d388f72e-x.json": lambda d: d})
    commit = next(iter(report.machine_results(results, "nvidia-h200")))
    note = "Triton's interpreter on the CPU"
    assert note not in report.run_summary(results, "nvidia-h200", commit)
    assert note in report.run_summary(results, "nvidia-h200", commit, interpreter=True)
    assert "| inference | 48 |" in report.run_summary(results, "nvidia-h200", commit)
