"""Publish the site: asv's history, now.html, regressions.html and provenance.html, offline.

* ``.asv/html/`` -- asv's site of the GPU history (``results/``), with a bar
  on every page linking the pages below;
* ``.asv/html/interpreter/`` -- asv's site of this machine's interpreter runs
  (``.asv/interpreter/results``), if any: never drawn beside GPU history;
* ``now.html`` -- where the op stands, per machine, at its latest benchmarked
  commit (:func:`now_page`);
* ``regressions.html`` -- asv's flags with their commit range, size and the
  bisect command to run, or "no regressions";
* ``provenance.html`` -- every run's machine, clocks and conditions.
"""

from __future__ import annotations

import html
import json
import pathlib
import re
import shlex
import shutil
import sys
import urllib.parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import asvrun  # noqa: E402
import provenance  # noqa: E402
import report  # noqa: E402
import site_offline  # noqa: E402
import verdict  # noqa: E402

ROOT = asvrun.ROOT
STYLE = ("<style>body{font-family:sans-serif;max-width:1300px;margin:1em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:2px 6px;"
         "text-align:right}td:first-child,th:first-child{text-align:left}.bad{color:#b00;font-weight:bold}"
         "nav a{margin-right:1em}.note{color:#555}</style>")


def nav(prefix: str = "", site: pathlib.Path = asvrun.SITE) -> str:
    """Links to the pages that exist in ``site`` (``prefix``: the way up from a page in a subfolder)."""
    links = [("now.html", "Now"), ("index.html", "Benchmarks (history)"), ("regressions.html", "Regressions"),
             ("provenance.html", "Provenance"), ("interpreter/index.html", "Interpreter runs (not performance history)")]
    return "<nav>" + "".join(f'<a href="{prefix}{h}">{t}</a>' for h, t in links
                             if h in ("now.html", "regressions.html", "provenance.html") or (site / h).exists()) + "</nav>"


def page(title: str, body: str, site: pathlib.Path = asvrun.SITE) -> str:
    return (f'<!doctype html><meta charset="utf-8"><title>{html.escape(title)}</title>{STYLE}\n{nav("", site)}\n'
            f"<h1>{html.escape(title)}</h1>\n{body}\n")


def graph_link(cls: str, method: str, params: dict, machine: str, prefix: str = "") -> str:
    query = "&".join([f"machine={urllib.parse.quote(machine)}"]
                     + [f"p-{k}={urllib.parse.quote(repr(v))}" for k, v in params.items()])
    return f"{prefix}index.html#add_rmsnorm.{cls}.{method}?{query}"


def latest_record(prov_dir: pathlib.Path, machine: str, commit: str) -> str | None:
    recs = sorted((prov_dir / machine).glob(f"{commit[:12]}-*.json"))
    return provenance.anchor(recs[-1]) if recs else None


def flags(html_dir: pathlib.Path) -> dict[str, list[tuple[dict, list]]]:
    """{entry: [(where, jumps)]} of asv's regressions.json in ``html_dir`` ({} when it has none).

    asv flags each graph: an entry on one machine and environment. ``where`` holds the graph's parameters that
    tell it from the others (``machine`` where there are several machines; {} where there is one graph)."""
    path = html_dir / "regressions.json"
    if not path.exists():
        return {}
    out: dict[str, list[tuple[dict, list]]] = {}
    for row in json.loads(path.read_text()).get("regressions", []):
        out.setdefault(row[0], []).append((row[2], row[-1]))
    return out


def flagged_on(regressed: dict, entry: str, machine: str) -> bool:
    """Is ``entry`` flagged on ``machine`` (a flag that names no machine: the only one)?"""
    return any(where.get("machine", machine) == machine for where, _ in regressed.get(entry, ()))


def machine_section(machine: str, results_dir: pathlib.Path, prov_dir: pathlib.Path, site_prefix: str,
                    regressed: dict, conf: dict | None, note: str = "") -> str:
    """One machine's tables; ``conf`` None: nothing is flagged there (the interpreter)."""
    stored = report.machine_results(results_dir, machine)
    current = report.current_benchmarks(results_dir)
    if current is None:
        return (f'<h2 id="{html.escape(machine)}">{html.escape(machine)}</h2><p>{note}No readable benchmarks.json in '
                f"{html.escape(str(results_dir))}: a run of the suite writes it again.</p>")
    runs = [(c, report.rows(stored[c], current))
            for c in report.commit_order(set(stored), {c: r.date for c, r in stored.items()})]
    runs = [(c, rows) for c, rows in runs if rows]
    if not runs:
        return (f'<h2 id="{html.escape(machine)}">{html.escape(machine)}</h2><p>{note}No results of the suite\'s '
                "current version yet.</p>")
    # Where the op stands: each case's newest measurement, whichever commit's run measured it last
    # (a run of one class leaves the other classes' cases at their earlier commits).
    newest, history = {}, {}  # (op, case) -> (commit, row); -> fused ratios, oldest first
    for c, rs in runs:
        for r in rs:
            if r.ratio:
                history.setdefault((r.op, r.case), []).append(r.ratio)
            if r.ratio or (r.op, r.case) not in newest:
                newest[r.op, r.case] = (c, r)
    commit = runs[-1][0]
    run_order = {c: i for i, (c, _) in enumerate(runs)}
    from_commits = sorted({c for c, _ in newest.values()}, key=run_order.__getitem__)
    links = {}  # commit -> its newest run's provenance link, or None
    for c in from_commits:
        anchor = latest_record(prov_dir, machine, c)
        links[c] = html.escape(f"{site_prefix}provenance.html#{urllib.parse.quote(anchor)}") if anchor else None
    sources = ", ".join(f'<code>{html.escape(c[:10])}</code> (' + (f'<a href="{links[c]}">provenance</a>'
                                                                   if links[c] else "provenance not recorded")
                        + ")" for c in from_commits)
    out = [f'<h2 id="{html.escape(machine)}">{html.escape(machine)}</h2>',
           f"<p>{note}Each case's newest result, from {sources}; latest benchmarked commit "
           f"<code>{html.escape(commit[:10])}</code>, {len(runs)} commits with results of the suite's current "
           "version (older versions' results stay in the history's files, not on this page). Fraction of floor = "
           "floor time / op time, measured interleaved in one process; × peer = "
           "peer time / fused time (&gt; 1: fused is faster); changes are of op time / floor time "
           "(+ is slower).</p>"]
    rows = sorted(newest.values(), key=lambda cr: report.row_order(cr[1]))  # (commit, row)
    cls_of = {op: cls for cls, op in report.CLASSES.items()}
    for op in report.CLASSES.values():
        mine = [(c, r) for c, r in rows if r.op == op]
        if not mine:
            continue
        out.append(f"<h3>{html.escape(op)}</h3><table><tr><th>case</th><th>commit</th><th>fused µs</th><th>GB/s</th>"
                   "<th>fraction of floor</th>" + "".join(f"<th>× {p}</th>" for p in report.PEERS)
                   + "<th>vs previous</th><th>vs best</th><th>flag</th><th>links</th></tr>")
        for source, r in mine:
            h = history.get((op, r.case), [])
            prev = f"{(h[-1] / h[-2] - 1) * 100:+.1f}%" if len(h) > 1 else "–"
            best = f"{(h[-1] / min(h) - 1) * 100:+.1f}%" if h else "–"
            entry = f"add_rmsnorm.{cls_of[op]}.track_ratio('fused', '{r.case}')"
            if flagged_on(regressed, entry, machine):
                flag = '<span class="bad">REGRESSED</span>'
            elif conf is None:
                flag = "not flagged (interpreter)"
            elif verdict.flagged(conf, entry):
                flag = f"ok (flags a level +{verdict.threshold(conf, entry) * 100:.3g}% over the best)"
            else:
                flag = "not flagged"
            link = graph_link(cls_of[op], "track_ratio", {"impl": "fused", "case": r.case}, machine, site_prefix)
            cells = [r.case, source[:10], report.fmt(r.us, 2), report.fmt(r.gbps, 0), report.fmt(r.fraction)]
            cells += [report.fmt(r.peers.get(p), 2) for p in report.PEERS] + [prev, best]
            out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + f"<td>{flag}</td>"
                       f'<td><a href="{html.escape(link)}">graph</a>'
                       + (f' <a href="{links[source]}">run</a>' if links[source] else "")
                       + "</td></tr>")
        out.append("</table>")
    return "\n".join(out)


def now_page(regressed: dict, conf: dict, site: pathlib.Path = asvrun.SITE) -> str:
    """now.html: per machine, the latest benchmarked commit's table, generated from the results."""
    gpu = ROOT / "results"
    machines = [p.name for p in (sorted(gpu.iterdir()) if gpu.is_dir() else []) if p.is_dir()]
    sections = [machine_section(m, gpu, ROOT / "provenance", "", regressed, conf) for m in machines]
    interp = asvrun.results_dir("interpreter")
    for p in sorted(interp.iterdir()) if interp.is_dir() else []:
        if p.is_dir():
            machines.append(p.name)
            sections.append(machine_section(p.name, interp, asvrun.provenance_dir("interpreter"), "interpreter/", {},
                                            None, "<b>Not performance history:</b> the kernels ran in Triton's "
                                                  "interpreter on this machine's CPU. "))
    jump = ("<p>Machines: " + " · ".join(f'<a href="#{html.escape(m)}">{html.escape(m)}</a>' for m in machines)
            + "</p>" if machines
            else "<p>No results yet: <code>python tools/bench.py run</code> measures this commit.</p>")
    host = ("<p class=note>Host time per synchronized decode call (<code>HostRatio</code>) is tracked, not "
            "flagged: no detection curve has been measured for it, and it moved 1.5–2.4× between runs of the "
            "same host path. GB/s and device time are shown, not flagged: they move with the runner; the flagged "
            "metric is the fused op's time over its floor's, measured in the same rounds.</p>")
    return page("fusedkernel: where the op stands now", jump + "\n".join(sections) + host, site)


def regressions_page(regressed: dict, html_dir: pathlib.Path) -> str:
    """regressions.html: each flag with its commit range, its size and the bisect command."""
    if not regressed:
        return page("Regressions", "<p><b>No regressions</b>: every flagged benchmark's latest value is within its "
                                   "threshold of its best (asv.conf.json, regressions_thresholds).</p>", html_dir)
    try:
        to_hash = json.loads((html_dir / "index.json").read_text())["revision_to_hash"]
    except (OSError, ValueError, KeyError):  # asv publish failed: name the revisions by number
        to_hash = {}
    rows = []
    for entry, graphs in sorted(regressed.items()):
        for where, jumps in graphs:
            rows += _flag_rows(entry, where, jumps, to_hash)
    return page("Regressions", "<p>Each flag: the range where the step happened (asv's step detection), where (the "
                               "machine and environment, where there are several), its size, and the command that "
                               "names the commit (run on that machine).</p><table><tr><th>benchmark</th><th>where"
                               "</th><th>commits</th><th>size</th><th>bisect</th></tr>" + "".join(rows) + "</table>",
                html_dir)


def _flag_rows(entry: str, where: dict, jumps: list, to_hash: dict) -> list[str]:
    # One row per jump of one graph's flag.
    place = html.escape(", ".join(f"{k}={v}" for k, v in sorted(where.items())) or "–")
    rows = []
    for before, after, v_before, v_after in jumps:
        b = to_hash.get(str(before), f"r{before}") if before is not None else None
        a = to_hash.get(str(after), f"r{after}")
        good = b[:10] if b else a[:10] + "^"  # one commit: asv names no "before"
        regex = "^" + entry.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
        # Double quotes read better around the regex's own single quotes, where the shell allows them.
        quoted = f'"{regex}"' if not set(regex) & set('"$`!') else shlex.quote(regex)
        cmd = f"python tools/bench.py bisect {good}..{a[:10]} {quoted}"
        rows.append(f"<tr><td>{html.escape(entry)}</td><td>{place}</td><td><code>{(b or '')[:10]}..{a[:10]}</code>"
                    f"</td><td>{v_before:.4g} → {v_after:.4g} ({(v_after / v_before - 1) * 100:+.1f}%)</td>"
                    f"<td><code>{html.escape(cmd)}</code></td></tr>")
    return rows


BAR = ('<div style="position:fixed;bottom:0;left:0;right:0;z-index:10000;background:#f5f5f5;'
       'border-top:1px solid #ccc;padding:4px 1em;font-family:sans-serif;font-size:13px">'
       '<style>#fk-bar nav a{{margin-right:1em}}</style>'
       '{nav} <span style="color:#555">{note}The benchmark list shows each graph\'s latest level (asv\'s step fit), '
       'not the latest run: now.html has the latest run\'s values.</span></div>')
INTERPRETER_NOTE = ("<b>Interpreter runs on a CPU: not performance history.</b> ")


def add_bar(index_html: pathlib.Path, prefix: str, note: str = "", site: pathlib.Path = asvrun.SITE) -> None:
    """Put the navigation bar on asv's own index.html (once), fixed at the bottom, above asv's own."""
    text = index_html.read_text()
    if "fk-bar" in text:
        return
    bar = BAR.format(nav=nav(prefix, site), note=note).replace("<div ", '<div id="fk-bar" ', 1)
    index_html.write_text(text.replace("<body>", "<body>" + bar, 1))


def publish() -> int:
    """asv publish of each mode's results, then this module's pages: 0 done, 3 when asv publish failed (no
    page is written then).

    The site is built beside the published one and takes its place when whole: asv publish empties its folder
    first, and an interrupt or a failed asv publish must not leave half a site, or none, where the last one was.
    """
    conf = asvrun.load_conf()
    final = asvrun.SITE.resolve()  # a link to the site: the folder it names is replaced, the link kept
    new, old = final.with_name(final.name + ".new"), final.with_name(final.name + ".old")
    if old.is_dir() and not final.exists():  # a publish stopped between its two renames
        old.rename(final)
    for stale in (new, old):
        shutil.rmtree(stale, ignore_errors=True)
    for mode in ("gpu", "interpreter"):
        results = asvrun.results_dir(mode)
        if not (results / "benchmarks.json").exists():
            continue
        missing = []  # asv leaves results of commits off its branches out of the graphs and the flags
        with asvrun.config(mode, site=new) as path:
            # Its progress to the log only: `make bench` ends with the run's summary and the lines below.
            code = asvrun.asv(["publish", "--config", str(path)], asvrun.asv_env(mode, None),
                              asvrun.LOGS / "publish.log",
                              echo=lambda line: missing.extend(re.findall(r"Couldn't find (\w+) in branches", line)))
        missing = list(dict.fromkeys(missing))  # asv warns once per results file: a commit's environments
        if missing:
            print(f"warning: asv publish ({mode}) left {len(missing)} commits with results out of the graphs and the "
                  f"flags, not on the branches it graphs (a shallow clone? results of another branch?), e.g. "
                  f"{missing[0][:10]}; see {asvrun.LOGS / 'publish.log'}")
        if code:
            shutil.rmtree(new, ignore_errors=True)
            print(f"asv publish ({mode}) failed: see {asvrun.LOGS / 'publish.log'}; the last site ({final}) is left "
                  "as it was")
            return 3
        print(f"asv publish ({mode}): {asvrun.html_dir(mode, final)} (log: {asvrun.LOGS / 'publish.log'})")
        external = site_offline.make_offline(asvrun.html_dir(mode, new))
        if external:
            print(f"warning: the site still loads {', '.join(external)} from outside (a new asv version?): "
                  "add local copies to tools/site_vendor/ and tools/site_offline.py")
    site, interp = new, asvrun.html_dir("interpreter", new)
    site.mkdir(parents=True, exist_ok=True)
    regressed = flags(site)
    (site / "now.html").write_text(now_page(regressed, conf, site))
    (site / "regressions.html").write_text(regressions_page(regressed, site))
    n = provenance.render(ROOT / "provenance", site / "provenance.html", nav("", site))
    if interp.is_dir():
        provenance.render(asvrun.provenance_dir("interpreter"), interp / "provenance.html", nav("../", site))
    if (site / "index.html").exists():
        add_bar(site / "index.html", "", site=site)
    if (interp / "index.html").exists():
        add_bar(interp / "index.html", "../", INTERPRETER_NOTE, site)
    if final.exists():
        final.rename(old)
    new.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    print(f"site: {final}/now.html (where the op stands), index.html (history), regressions.html "
          f"({sum(map(len, regressed.values()))} flagged), provenance.html ({n} runs)")
    print(f"browse it with: {sys.executable} -m http.server -d {final} 8080  (then open http://localhost:8080/now.html)")
    return 0


if __name__ == "__main__":
    raise SystemExit("tools/publish.py is a module of the tracker's command line: python tools/bench.py --help")
