"""The PR gate (tools/bench.py gate): what it asks asv to compare, without running asv."""

import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import bench  # noqa: E402


def test_gate_pins_both_commits_and_isolates_each_family(monkeypatch, tmp_path):
    calls = []
    real_run = subprocess.run

    def fake_run(cmd, **kwargs):
        if "continuous" not in cmd and cmd[0] != "git":
            return real_run(cmd, **kwargs)  # e.g. platform's uname, when asv is imported
        if cmd[:2] == ["git", "merge-base"]:
            return subprocess.CompletedProcess(cmd, 0, "b" * 40 + "\n", "")
        if cmd[:2] == ["git", "rev-parse"]:
            return subprocess.CompletedProcess(cmd, 0, "h" * 40 + "\n", "")
        config = pathlib.Path(cmd[cmd.index("--config") + 1])
        calls.append((cmd, config, config.read_text()))
        return subprocess.CompletedProcess(cmd, 1 if "Host" in cmd[cmd.index("-b") + 1] else 0,
                                           "| + | 1 | 2 | 2.0 | x |\n", "")

    monkeypatch.setattr(bench, "detect", lambda: ("gpu", "nvidia-h200"))
    monkeypatch.setattr(bench, "asv", lambda *a, **k: 0)
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    summary = tmp_path / "gate.md"
    rc = bench.gate("origin/main", "HEAD", None, str(summary))

    assert rc == 1  # the Host family failed
    assert [c[c.index("-b") + 1] for c, _, _ in calls] == list(bench.GATE_FACTORS)
    results_dirs = set()
    for cmd, config, text in calls:
        # Every family compares the same two pinned commits, not a moving HEAD...
        assert cmd[-2:] == ["b" * 40, "h" * 40]
        # ...with a config in the repo root (asv resolves its paths from there)
        # whose results folder is its own, deleted afterwards.
        assert config.parent == bench.ROOT and not config.exists()
        results_dirs.add(bench.json.loads(text)["results_dir"])
    assert len(results_dirs) == len(calls)
    assert not any(pathlib.Path(d).exists() for d in results_dirs)
    report = summary.read_text()
    assert "FAILED" in report and "head hhhhhhhh" in report and "Host.time_wall (fails above x2.0)" in report


def test_isolated_config_keeps_the_project_settings(tmp_path):
    from asv import util

    path = bench.isolated_config(str(tmp_path))
    try:
        conf = util.load_json(str(path), api_version=1)
        orig = util.load_json(str(bench.ROOT / "asv.conf.json"), api_version=1, js_comments=True)
    finally:
        path.unlink()
    assert conf.pop("results_dir") == str(tmp_path)
    orig.pop("results_dir")
    assert conf == orig
