"""Site test: the published site of each recorded detection experiment, in a browser.

For every record under ``docs/detection/<machine>/`` (written by
``tools/detection_experiment.py --record``): rebuild the experiment's scratch
history from the recorded base (the hashes must match the record), copy the
recorded asv results in, ``tools/bench.py publish``, serve the site on
localhost and open it in headless Chromium (Debian's, through Playwright):

- the graph of the benchmark the experiment ran, at its parameter combination,
  has exactly one plotted point per experiment commit (read from the flot plot
  in the page);
- the Regressions view lists the slow commit and no other experiment commit.

Screenshots of both pages go to $FUSEDKERNEL_ARTIFACTS (default
``test-artifacts/``). Skipped when Chromium or Playwright is missing, unless
FUSEDKERNEL_REQUIRE_BROWSER=1 (CI), where that is a failure.

The site must render offline: every request outside localhost is refused and
listed. ``tools/bench.py publish`` makes the site self-contained
(``tools/site_offline.py``); records made before it existed are published
by their own commit's bench.py, so the test applies the current
``make_offline`` to every site it opens.
"""

from __future__ import annotations

import functools
import http.server
import itertools
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import detection_experiment as experiment  # noqa: E402
import site_offline  # noqa: E402

CHROMIUM = os.environ.get("FUSEDKERNEL_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("FUSEDKERNEL_REQUIRE_BROWSER") == "1"
ARTIFACTS = pathlib.Path(os.environ.get("FUSEDKERNEL_ARTIFACTS") or ROOT / "test-artifacts")
RECORDS = sorted(p.parent for p in (ROOT / "docs" / "detection").glob("*/summary.json"))
# As root, in a closed network: no sandbox, no background connections (see .ci/run).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 60_000

def _browser_or_skip():
    """sync_playwright, or skip (fail under FUSEDKERNEL_REQUIRE_BROWSER=1) with the reason."""
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


def _serve(directory: pathlib.Path):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def _measured_combinations(results_dir: pathlib.Path, bench: str) -> tuple[str, set[tuple[str, ...]]]:
    """(asv benchmark name, parameter combinations with a value in any result file)."""
    names, combos = set(), set()
    for path in results_dir.glob("*.json"):
        data = json.loads(path.read_text())
        if "results" not in data:
            continue  # machine.json
        cols = data["result_columns"]
        for name, row in data["results"].items():
            if not re.search(bench, name):
                continue
            names.add(name)
            row = dict(zip(cols, row))
            for combo, value in zip(itertools.product(*row["params"]), row["result"] or []):
                if value is not None and math.isfinite(value):  # asv writes NaN for "not run here"
                    combos.add(combo)
    assert len(names) == 1, f"expected one benchmark named like {bench!r} in {results_dir}, got {names}"
    return names.pop(), combos


def _graph_hash(name: str, param_names: list[str], combo: tuple[str, ...]) -> str:
    params = "&".join(f"p-{urllib.parse.quote(k)}={urllib.parse.quote(v)}" for k, v in zip(param_names, combo))
    return f"#{name}?{params}"


GRAPH_SERIES_JS = """() => {
    const plot = window.jQuery && jQuery('#main-graph').data('plot');
    if (!plot) return null;
    const series = plot.getData().map(s => ({
        label: s.label,
        hashes: s.data.filter(p => p[1] !== null && p[1] !== undefined && !Number.isNaN(p[1]))
                      .map(p => $.asv.main_json.revision_to_hash[p[0]] || ('revision ' + p[0])),
    }));
    return series.some(s => s.hashes.length) ? series : null;
}"""

REGRESSIONS_JS = """() => {
    const body = document.querySelector('#regressions-body');
    if (!body || !body.querySelector('.regression-div')) return null;
    const rows = Array.from(body.querySelectorAll('.regression-div table:not(.ignored) > tbody > tr'))
        .map(tr => Array.from(tr.children).map(td => td.innerText.trim()));
    return {rows: rows, text: body.innerText, hash_length: $.asv.main_json.hash_length};
}"""


@pytest.mark.parametrize("record", RECORDS or [None], ids=[r.name for r in RECORDS] or ["none"])
def test_published_site(record, tmp_path, capsys):
    assert record is not None, "no detection experiment record under docs/detection/*/summary.json"
    sync_playwright = _browser_or_skip()
    summary = json.loads((record / "summary.json").read_text())
    args, machine = summary["args"], summary["machine"]

    # The experiment's history, rebuilt from its base: the same commits as recorded.
    repo = tmp_path / "repo"
    try:
        commits = experiment.make_history(repo, args["commits"], args["slow"], args["elems"], summary["base"])
    except experiment.BaseMissing as e:
        pytest.fail(f"cannot rebuild the history of {record.name}: {e}")
    assert commits == summary["commits"], (
        f"the history rebuilt from base {summary['base'][:12]} differs from {record}/summary.json "
        "(did make_history change since the record? then record the experiment again)")
    slow = summary["slow_commit"]
    assert slow == commits[args["slow"] - 1]

    # Publish the recorded results in it.
    shutil.copytree(record / "results", repo / "results", dirs_exist_ok=True)
    out = subprocess.run([sys.executable, "tools/bench.py", "publish"], cwd=repo, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, f"publish failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    html = repo / ".asv" / "html"
    assert site_offline.make_offline(html) == [], "the published site still loads files from outside"
    bench_name, combos = _measured_combinations(repo / "results" / machine, args["bench"].split("[(]")[0])
    assert combos, f"no values for {bench_name} in {record}/results/{machine}"
    param_names = json.loads((html / "index.json").read_text())["benchmarks"][bench_name]["param_names"]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = []
    server, thread = _serve(html)
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    unserved = []

    def route(route):
        url = route.request.url
        if url.startswith(base_url + "/"):
            return route.continue_()
        unserved.append(url)
        return route.abort()

    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
                args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 900})
            try:
                context.route("**/*", route)
                errors = []

                def open_page(fragment, js, what):
                    """A new page at index.html + fragment; the value of js once it is truthy."""
                    page = context.new_page()
                    page.on("pageerror", lambda e: errors.append(str(e)))
                    page.goto(f"{base_url}/index.html{fragment}")
                    try:
                        value = page.wait_for_function(js, timeout=TIMEOUT_MS).json_value()
                    except Exception as e:
                        raise AssertionError(f"{what} did not render: {e}\npage errors: {errors}\n"
                                             f"outside addresses not served: {unserved}") from e
                    page.wait_for_timeout(300)  # let the last paint land before the screenshot
                    return page, value

                # (a) One point per experiment commit in the graph of each measured combination.
                for combo in sorted(combos):
                    page, series = open_page(_graph_hash(bench_name, param_names, combo), GRAPH_SERIES_JS,
                                             f"the graph of {bench_name}{combo}")
                    shot = ARTIFACTS / f"site-{record.name}-graph-{'-'.join(c.strip(chr(39)) for c in combo)}.png"
                    page.screenshot(path=str(shot))
                    shots.append(shot)
                    plotted = [s for s in series if s["hashes"]]
                    assert len(plotted) == 1, f"expected one plotted line for {combo}, got {plotted}"
                    points = plotted[0]["hashes"]
                    missing = [c[:8] for c in commits if c not in points]
                    extra = [h[:8] if len(h) == 40 else h for h in points if h not in commits]
                    assert points == commits, (
                        f"graph of {bench_name}{combo} shows {len(points)} points, expected one for each of "
                        f"the {len(commits)} experiment commits; missing {missing}, not in the experiment "
                        f"{extra} (screenshot {shot})")

                # (b) The Regressions view lists the slow commit and no other experiment commit.
                page, regressions = open_page("#regressions", REGRESSIONS_JS, "the Regressions view")
                shot = ARTIFACTS / f"site-{record.name}-regressions.png"
                page.screenshot(path=str(shot), full_page=True)
                shots.append(shot)
                n = regressions["hash_length"]
                listed = [c[:n] for c in commits if c[:n] in regressions["text"]]
                assert listed == [slow[:n]], (
                    f"Regressions view lists experiment commits {listed}, expected only the slow "
                    f"{slow[:n]}; rows: {regressions['rows']} (screenshot {shot})")
                rows = [r for r in regressions["rows"] if r and r[0].startswith(bench_name) and slow[:n] in r]
                assert rows, f"no row of {bench_name} at {slow[:n]} in {regressions['rows']}"
                assert not errors, f"JavaScript errors in the site's pages: {errors}"
                assert not unserved, f"the site asked for files outside localhost: {unserved}"
            finally:
                context.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        with capsys.disabled():
            for shot in shots:
                print(f"\nsite test screenshot: {shot}", end="")
