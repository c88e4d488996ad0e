"""tools/spread.py: run-to-run spread of repeated asv runs of one commit."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOISE = ROOT / "docs" / "noise" / "nvidia-h200"


def spread(*runs):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "spread.py"), *map(str, runs)],
                          capture_output=True, text=True, cwd=ROOT)


def test_spread_of_the_committed_noise_study():
    out = spread(*sorted(NOISE.glob("b342bfa4-run*.json")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("5 runs")
    line = next(x for x in out.stdout.splitlines() if x.startswith("| ForwardResidual.time_device |"))
    assert "1.002 / 1.005 (21 cases)" in line  # docs/performance.md, section 3


def test_runs_of_different_commits_are_refused():
    # Mixed commits would report code changes as noise.
    out = spread(NOISE / "b342bfa4-run1.json", NOISE / "bb25e61b-run1.json")
    assert out.returncode != 0
    assert "2 commits (b342bfa4, bb25e61b)" in out.stderr
