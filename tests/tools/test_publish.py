"""tools/publish.py: the site's own pages, built from results; publishing needs no torch."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import publish  # noqa: E402

NO_TORCH = """
import builtins, runpy, sys
real = builtins.__import__
def guarded(name, *args, **kwargs):
    if name.split('.')[0] in ('torch', 'triton'):
        raise ImportError('publish must not need ' + name)
    return real(name, *args, **kwargs)
builtins.__import__ = guarded
sys.argv = ['tools/bench.py', 'publish']
runpy.run_path('tools/bench.py', run_name='__main__')
"""


def test_publish_runs_where_only_asv_is_installed():
    # The workflow's site job installs asv alone (a GitHub-hosted runner, no torch).
    out = subprocess.run([sys.executable, "-c", NO_TORCH], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    now = (ROOT / ".asv" / "html" / "now.html").read_text()
    assert "nvidia-h200" in now and "bf16 8192x5120" in now  # the committed grid run


def test_regressions_page_says_so_when_there_are_none(tmp_path):
    page = publish.regressions_page({}, tmp_path)
    assert "No regressions" in page and "<nav>" in page


def test_regressions_page_gives_range_size_and_bisect_command(tmp_path):
    (tmp_path / "index.json").write_text('{"revision_to_hash": {"3": "' + "a" * 40 + '", "4": "' + "b" * 40 + '"}}')
    entry = "add_rmsnorm.Inference.track_ratio('fused', 'bf16 1x4096')"
    page = publish.regressions_page({entry: [[3, 4, 1.5, 1.65]]}, tmp_path)
    assert "aaaaaaaaaa..bbbbbbbbbb" in page and "+10.0%" in page
    assert "python tools/bench.py bisect aaaaaaaaaa..bbbbbbbbbb" in page
    # One commit: asv leaves "before" out; the bisect starts at its parent.
    page = publish.regressions_page({entry: [[None, 4, 1.5, 1.65]]}, tmp_path)
    assert "bisect bbbbbbbbbb^..bbbbbbbbbb" in page
