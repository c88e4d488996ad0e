"""Site test: the published site of the recorded detection history, in a browser.

``docs/detection/nvidia-h200/`` (``tools/detection_experiment.py analyze
--record``) holds a scratch history of real commits (8 unchanged, then a
10% slowdown that stays) and asv results made from processes measured on
the H200. The test rebuilds the history from its base (the hashes must
match), puts this checkout's tools, suite and config into it, adds the same
values under an interpreter machine (CPU runs) and one provenance record,
publishes, serves the site on localhost and opens it in headless Chromium
(Debian's, through Playwright). It checks:

- now.html shows the fused op for the GPU machine and links to the run's
  provenance, which shows that run;
- regressions.html flags the slow commit and no other, with its bisect
  command; published from the unchanged commits alone it says "No regressions";
- the GPU graph has one line, one point per commit: the interpreter's values
  are not drawn on it (they have a site of their own);
- the site asks for nothing outside localhost.

Screenshots of each page go to $FUSEDKERNEL_ARTIFACTS (default
``test-artifacts/``). Skipped when Chromium or Playwright is missing, unless
FUSEDKERNEL_REQUIRE_BROWSER=1 (CI), where that is a failure.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import detection_history  # noqa: E402
import provenance  # noqa: E402

CHROMIUM = os.environ.get("FUSEDKERNEL_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("FUSEDKERNEL_REQUIRE_BROWSER") == "1"
ARTIFACTS = pathlib.Path(os.environ.get("FUSEDKERNEL_ARTIFACTS") or ROOT / "test-artifacts")
RECORD = ROOT / "docs" / "detection" / "nvidia-h200"
# As root, in a closed network: no sandbox, no background connections (see .ci/run).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 60_000


def _browser_or_skip():
    why = None
    if not os.access(CHROMIUM, os.X_OK):
        why = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            why = "Playwright is not installed (pip install -r requirements-dev.txt)"
    if why:
        if REQUIRE_BROWSER:
            pytest.fail(f"FUSEDKERNEL_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    return sync_playwright


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(scratch repo with this checkout's tools, the record's summary) ; results not yet copied."""
    summary = json.loads((RECORD / "summary.json").read_text())
    raw = json.loads((RECORD / "raw.json").read_text())
    repo = tmp_path_factory.mktemp("site") / "repo"
    try:
        commits = detection_history.make_history(repo, summary["base"], summary["levels"], raw["delays"])
    except detection_history.BaseMissing as e:
        pytest.fail(f"cannot rebuild the recorded history: {e}")
    assert commits == summary["commits"], "the rebuilt history differs from summary.json: record it again"
    for path in ("tools", "benchmarks"):
        shutil.rmtree(repo / path)
        shutil.copytree(ROOT / path, repo / path, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "asv.conf.json", repo / "asv.conf.json")
    return repo, summary


def _publish(repo: pathlib.Path, commits: list[str], machine: str):
    """Copy the record's results of ``commits`` (GPU, and the same values as an interpreter machine); publish."""
    for folder in (repo / "results", repo / ".asv"):
        shutil.rmtree(folder, ignore_errors=True)
    src = RECORD / "results"
    (repo / "results" / machine).mkdir(parents=True)
    shutil.copy(src / "benchmarks.json", repo / "results" / "benchmarks.json")
    shutil.copy(src / machine / "machine.json", repo / "results" / machine / "machine.json")
    interp = repo / ".asv" / "interpreter" / "results"
    (interp / "cpu-triton-interpreter").mkdir(parents=True)
    shutil.copy(src / "benchmarks.json", interp / "benchmarks.json")
    mj = json.loads((src / machine / "machine.json").read_text())
    (interp / "cpu-triton-interpreter" / "machine.json").write_text(json.dumps({**mj, "machine": "cpu-triton-interpreter"}))
    for path in src.glob(f"{machine}/*-*.json"):
        data = json.loads(path.read_text())
        if data["commit_hash"] in commits:
            shutil.copy(path, repo / "results" / machine / path.name)
            data["params"]["machine"] = "cpu-triton-interpreter"
            (interp / "cpu-triton-interpreter" / path.name).write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "tools/bench.py", "publish"], cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, f"publish failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return repo / ".asv" / "html"


class _Site:
    """The published site served on localhost, opened in Chromium; requests outside localhost are refused."""

    def __init__(self, sync_playwright, html: pathlib.Path, profile: pathlib.Path):
        handler = functools.partial(_QuietHandler, directory=str(html))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.unserved, self.errors = [], []
        self.pw = sync_playwright().start()
        self.context = self.pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1366, "height": 800})
        self.context.route("**/*", self._route)

    def _route(self, route):
        if route.request.url.startswith(self.base + "/"):
            return route.continue_()
        self.unserved.append(route.request.url)
        return route.abort()

    def open(self, path: str, js: str, what: str, shot: str, full_page: bool = True):
        for old in self.context.pages:  # a page left loading in the background must not report into this one
            old.close()
        page = self.context.new_page()
        page.on("pageerror", lambda e: self.errors.append(f"{path}: {e}"))
        page.goto(f"{self.base}/{path}")
        try:
            value = page.wait_for_function(js, timeout=TIMEOUT_MS).json_value()
        except Exception as e:
            raise AssertionError(f"{what} did not render: {e}; page errors {self.errors}; "
                                 f"outside addresses {self.unserved}") from e
        page.wait_for_timeout(300)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        # A full-page screenshot resizes the viewport for the capture; asv's graph
        # page re-plots on resize and flot throws "Invalid dimensions for plot" on
        # the transient size (seen 1 run in 7), an error of the capture, not the site.
        page.screenshot(path=str(ARTIFACTS / shot), full_page=full_page)
        print(f"\nsite test screenshot: {ARTIFACTS / shot}", end="")
        return page, value

    def close(self):
        self.context.close()
        self.pw.stop()
        self.server.shutdown()
        self.server.server_close()


# The navigation bar is on top where it is drawn (not under asv's own fixed navbar).
BAR_SEEN_JS = """() => { const b = document.getElementById('fk-bar'); const r = b.getBoundingClientRect();
    return b.contains(document.elementFromPoint(r.left + 5, r.top + r.height / 2)); }"""
# Its links are spaced (they ran together on asv's index, which has none of the site's own style).
BAR_SPACED_JS = """() => { const a = [...document.querySelectorAll('#fk-bar nav a')].map(e => e.getBoundingClientRect());
    return a.length > 1 && a.slice(1).every((r, i) => r.left - a[i].right >= 8 || r.top > a[i].top); }"""
TEXT_JS = "() => document.body && document.body.innerText.length > 50 ? document.body.innerText : null"
GRAPH_JS = """() => {
    const plot = window.jQuery && jQuery('#main-graph').data('plot');
    if (!plot) return null;
    const series = plot.getData().map(s => ({label: s.label,
        hashes: s.data.filter(p => p[1] !== null && !Number.isNaN(p[1]))
                      .map(p => $.asv.main_json.revision_to_hash[p[0]])}));
    return series.some(s => s.hashes.length) ? {series: series, machines: Object.keys($.asv.main_json.params.machine
        ? Object.fromEntries($.asv.main_json.params.machine.map(m => [m, 1])) : {})} : null;
}"""


def test_published_site(history, tmp_path):
    sync_playwright = _browser_or_skip()
    repo, summary = history
    machine, commits, slow = summary["machine"], summary["commits"], summary["slow_commit"]
    entry = summary["flagged_entries"][-1]  # Inference, prefill
    html = _publish(repo, commits, machine)
    provenance.record(repo / "provenance" / machine, machine, commits[-1], "gpu", {"gpu": "NVIDIA H200"}, {},
                      "2026-12-01T12:00:00+00:00")
    assert subprocess.run([sys.executable, "tools/bench.py", "publish"], cwd=repo, capture_output=True).returncode == 0
    anchor = provenance.anchor(next((repo / "provenance" / machine).glob("*.json")))
    site = _Site(sync_playwright, html, tmp_path / "profile")
    try:
        # now.html: the fused op for the GPU machine, linked to its graph and to the run's provenance.
        page, text = site.open("now.html", TEXT_JS, "now.html", "site-now.png")
        assert machine in text and "inference" in text and "bf16 8192x8192" in text and "REGRESSED" in text
        assert "Not performance history" in text  # the interpreter's section says what it is
        links = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
        assert f"provenance.html#{anchor}" in links
        assert any(h.startswith("index.html#add_rmsnorm.Inference.track_ratio?machine=nvidia-h200") for h in links)
        page, text = site.open(f"provenance.html#{anchor}", TEXT_JS, "provenance.html", "site-provenance.png")
        assert commits[-1][:10] in text and page.locator(f"[id='{anchor}']").count() == 1

        # regressions.html: the slow commit, and no other experiment commit, with the bisect command.
        page, text = site.open("regressions.html", TEXT_JS, "regressions.html", "site-regressions.png")
        listed = [c[:10] for c in commits if c[:10] in text]
        assert listed == [slow[:10]], f"regressions.html lists {listed}, expected only {slow[:10]}"
        assert "python tools/bench.py bisect" in text and entry.split("(")[0] in text

        # The GPU graph: one line (this machine only), one point per commit.
        case = entry.split("'")[3]
        fragment = ("#" + entry.split("(")[0] + "?machine=" + machine + "&p-impl=" + urllib.parse.quote("'fused'")
                    + "&p-case=" + urllib.parse.quote(f"'{case}'"))
        page, graph = site.open("index.html" + fragment, GRAPH_JS, "the GPU graph", "site-graph.png", full_page=False)
        plotted = [s for s in graph["series"] if s["hashes"]]
        assert len(plotted) == 1 and plotted[0]["hashes"] == commits
        assert list(graph["machines"]) == [machine], "the interpreter's machine is on the GPU site"
        page, text = site.open("index.html", TEXT_JS, "the index", "site-index.png")
        assert "not the latest run" in text and page.evaluate(BAR_SEEN_JS), "the bar to now.html is hidden"
        assert page.evaluate(BAR_SPACED_JS), "the bar's links run together"
        page, text = site.open("interpreter/index.html", TEXT_JS, "the interpreter site", "site-interpreter.png")
        assert not site.errors, f"JavaScript errors: {site.errors}"
        assert not site.unserved, f"the site asked for files outside localhost: {site.unserved}"
    finally:
        site.close()

    # Published from the unchanged commits alone: no regressions, said so.
    html = _publish(repo, commits[:summary["levels"].index(0.1)], machine)
    site = _Site(sync_playwright, html, tmp_path / "profile2")
    try:
        _, text = site.open("regressions.html", TEXT_JS, "regressions.html", "site-no-regressions.png")
        assert "No regressions" in text
    finally:
        site.close()
