"""tools/publish.py: the site's own pages, built from results; publishing needs no torch."""

import json
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
    # asv's progress goes to its log: `make bench` ends with the run's summary and the site's lines.
    assert "asv publish (gpu): " in out.stdout and "%]" not in out.stdout, out.stdout
    assert out.stdout.rstrip().splitlines()[-2].startswith("site: ")
    now = (ROOT / ".asv" / "html" / "now.html").read_text()
    assert "nvidia-h200" in now and "bf16 8192x5120" in now  # the committed grid run
    # The count is of the current suite version's commits: results/ holds older versions' files too.
    assert "commits with results of the suite's current version" in now
    h200 = now.split('id="nvidia-h200"')[1].split("<h2")[0]
    tables = {t.split("</h3>")[0]: t for t in h200.split("<h3>")[1:]}
    assert set(tables) == {"forward", "forward+residual", "inference", "forward+backward"}
    # 94e2de6: the latest whole-suite run, every case.
    for op in ("inference", "forward", "forward+residual"):
        assert "<td>bf16 8192x5120</td><td>94e2de65c8</td>" in tables[op]
    assert "<td>bf16 1024x65536</td><td>94e2de65c8</td>" in tables["forward+backward"]
    # Prefill cases whose kernel did not change from 2573e966 to ee282836 drifted up to +2.07% over
    # four H200 leases; at 1.5% asv publish flagged all five (docs/performance.md, "Detection").
    flagged = publish.flags(ROOT / ".asv" / "html")
    for case in ("Inference.track_ratio('fused', 'bf16 8192x2048')",
                 "Inference.track_ratio('fused', 'bf16 8192x2880')",
                 "ForwardResidual.track_ratio('fused', 'bf16 8192x16384')",
                 "ForwardResidual.track_ratio('fused', 'bf16 1024x65536')",
                 "ForwardResidual.track_ratio('fused', 'fp32 8192x5120')",
                 # Unchanged kernels, +3.7% over five leases: the wide row flags at 5%.
                 "Training.track_ratio('fused', 'bf16 1024x65536')",
                 # A real slowdown at 388828d5 (0.950 -> 0.900), fixed by 2f4ef54: 0.965 at bd7528db.
                 "Training.track_ratio('fused', 'fp32 8192x4096')"):
        assert f"add_rmsnorm.{case}" not in flagged


def test_now_shows_each_cases_newest_result_when_a_run_measured_one_class(tmp_path):
    # bd7528db ran forward+backward alone, so the other ops' cases stay at 388828d5's whole-suite run
    # (the page used to show the latest commit's one table only).
    import shutil

    h200 = tmp_path / "nvidia-h200"
    h200.mkdir()
    shutil.copy(ROOT / "results" / "benchmarks.json", tmp_path)
    for name in ("machine.json", "388828d5-virtualenv-py3.12.json", "bd7528db-virtualenv-py3.12.json"):
        shutil.copy(ROOT / "results" / "nvidia-h200" / name, h200)
    section = publish.machine_section("nvidia-h200", tmp_path, ROOT / "provenance", "", {}, None)
    tables = {t.split("</h3>")[0]: t for t in section.split("<h3>")[1:]}
    assert set(tables) == {"forward", "forward+residual", "inference", "forward+backward"}
    assert "<td>bf16 8192x5120</td><td>388828d512</td>" in tables["inference"]
    assert "<td>bf16 8192x5120</td><td>bd7528db34</td>" in tables["forward+backward"]
    assert "latest benchmarked commit <code>bd7528db34</code>" in section


def test_regressions_page_says_so_when_there_are_none(tmp_path):
    page = publish.regressions_page({}, tmp_path)
    assert "No regressions" in page and "<nav>" in page


def test_regressions_page_gives_range_size_and_bisect_command(tmp_path):
    (tmp_path / "index.json").write_text('{"revision_to_hash": {"3": "' + "a" * 40 + '", "4": "' + "b" * 40 + '"}}')
    entry = "add_rmsnorm.Inference.track_ratio('fused', 'bf16 1x4096')"
    page = publish.regressions_page({entry: [({}, [[3, 4, 1.5, 1.65]])]}, tmp_path)
    assert "aaaaaaaaaa..bbbbbbbbbb" in page and "+10.0%" in page
    assert "python tools/bench.py bisect aaaaaaaaaa..bbbbbbbbbb" in page
    # The command, as the shell splits it, hands bisect a regex that matches the flagged entry.
    import html
    import re
    import shlex
    cmd = shlex.split(html.unescape(re.search(r"<code>(python tools/bench.py bisect [^<]*)</code>", page).group(1)))
    assert cmd[:4] == ["python", "tools/bench.py", "bisect", "aaaaaaaaaa..bbbbbbbbbb"] and re.match(cmd[4], entry)
    # One commit: asv leaves "before" out; the bisect starts at its parent.
    page = publish.regressions_page({entry: [({}, [[None, 4, 1.5, 1.65]])]}, tmp_path)
    assert "bisect bbbbbbbbbb^..bbbbbbbbbb" in page


def test_a_flag_on_one_machine_is_that_machines_and_each_is_listed(tmp_path):
    # regressions.json has a row per graph (machine, environment); keyed by the benchmark alone, h100's flag
    # replaced h200's on regressions.html, named no machine, and marked the case REGRESSED on every machine.
    entry = "add_rmsnorm.Inference.track_ratio('fused', 'bf16 1x4096')"
    rows = [[entry, "graphs/x.json", {"machine": "h200"}, 0, 1.2, 1.0, [[3, 4, 1.0, 1.2]]],
            [entry, "graphs/y.json", {"machine": "h100"}, 0, 1.1, 1.0, [[7, 8, 1.0, 1.1]]]]
    (tmp_path / "regressions.json").write_text(json.dumps({"regressions": rows}))
    flagged = publish.flags(tmp_path)
    assert flagged == {entry: [({"machine": "h200"}, [[3, 4, 1.0, 1.2]]), ({"machine": "h100"}, [[7, 8, 1.0, 1.1]])]}
    assert publish.flagged_on(flagged, entry, "h200") and not publish.flagged_on(flagged, entry, "a100")
    assert publish.flagged_on({entry: [({}, [[3, 4, 1.0, 1.2]])]}, entry, "any")  # one graph: the only machine
    page = publish.regressions_page(flagged, tmp_path)
    assert "<td>machine=h200</td><td><code>r3..r4</code>" in page and "<td>machine=h100</td><td><code>r7..r8</code>" in page


def test_now_page_escapes_what_results_and_records_carry(monkeypatch, tmp_path):
    import report

    nasty = "abc<script>x</script>"
    (tmp_path / "results" / "m").mkdir(parents=True)
    (tmp_path / "results" / "benchmarks.json").write_text("{}")
    monkeypatch.setattr(publish, "ROOT", tmp_path)
    monkeypatch.setattr(publish.asvrun, "results_dir", lambda mode: tmp_path / "none")
    monkeypatch.setattr(report, "machine_results", lambda d, m: {nasty: __import__("types").SimpleNamespace(date=0)})
    monkeypatch.setattr(report, "rows", lambda res, current=None: [report.Row("inference", "bf16 1x<b>", 2.0, 1.0, 1.5)])
    monkeypatch.setattr(publish, "latest_record", lambda *a: 'x"><img src=y onerror=alert(1)>')
    page = publish.now_page({}, {})
    assert "<script>" not in page and "<b>" not in page and "<img" not in page
    assert "abc&lt;script" in page and "%22%3E%3Cimg" in page  # the anchor is quoted inside its href


def test_now_page_without_results_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(publish, "ROOT", tmp_path)  # no results/ folder at all
    monkeypatch.setattr(publish.asvrun, "results_dir", lambda mode: tmp_path / "none")
    assert "No results yet" in publish.now_page({}, {})


def test_an_unreadable_benchmarks_json_is_named_not_a_traceback(tmp_path, capsys):
    import report

    (tmp_path / "benchmarks.json").write_text('{"add_rmsnorm')
    assert report.current_benchmarks(tmp_path) is None
    assert "benchmarks.json is unreadable" in capsys.readouterr().err


def test_case_names_of_another_shape_sort_last():
    import report

    cases = ["weird", "fp32 1x64", "bf16 8192x4096", "bf16 1x4096"]
    assert sorted(cases, key=report._order) == ["bf16 1x4096", "bf16 8192x4096", "fp32 1x64", "weird"]


def test_an_interrupted_publish_leaves_the_last_site_whole(monkeypatch, tmp_path):
    # A review's find: asv publish empties the site's folder first, and Ctrl-C a second into `bench.py publish`
    # left index.html alone, without now.html, regressions.html or provenance.html.
    import pytest

    pages = last_site(tmp_path, monkeypatch)

    def stopped(args, env, log, echo=print):
        fake_asv(0)(args, env, log)
        raise KeyboardInterrupt

    monkeypatch.setattr(publish.asvrun, "asv", stopped)
    with pytest.raises(KeyboardInterrupt):
        publish.publish()
    assert {p.name: p.read_text() for p in (tmp_path / "html").iterdir()} == pages
    monkeypatch.setattr(publish.asvrun, "asv", fake_asv(0))
    assert publish.publish() == 0  # the next one replaces it whole, and leaves nothing beside it
    index = (tmp_path / "html" / "index.html").read_text()
    assert "asv's new index" in index and 'id="fk-bar"' in index
    assert "where the op stands now" in (tmp_path / "html" / "now.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["html"]


def last_site(tmp_path, monkeypatch, name="html"):
    """A published site in ``tmp_path / name`` that publish replaces; {page: text}."""
    site = tmp_path / name
    site.mkdir()
    pages = {n: f"the last site's {n}" for n in ("index.html", "now.html", "regressions.html", "provenance.html")}
    for n, text in pages.items():
        (site / n).write_text(text)
    monkeypatch.setattr(publish.asvrun, "SITE", site)
    return pages


def fake_asv(code: int):
    """asv publish writing its index.html into the config's html_dir, then exiting with ``code``."""
    import json

    def asv(args, env, log, echo=print):
        out = pathlib.Path(json.loads(pathlib.Path(args[args.index("--config") + 1]).read_text())["html_dir"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "index.html").write_text("<html><body>asv's new index</body></html>")
        return code
    return asv


def test_a_failed_asv_publish_leaves_the_last_site_as_it_was(monkeypatch, tmp_path, capsys):
    # A review's find: the swap went ahead, and the site lost its history and read "No regressions".
    pages = last_site(tmp_path, monkeypatch)
    monkeypatch.setattr(publish.asvrun, "asv", fake_asv(1))
    assert publish.publish() == 3
    assert {p.name: p.read_text() for p in (tmp_path / "html").iterdir()} == pages
    assert sorted(p.name for p in tmp_path.iterdir()) == ["html"]
    assert "the last site (" in capsys.readouterr().out


def test_publish_replaces_the_folder_a_linked_site_names(monkeypatch, tmp_path):
    last_site(tmp_path, monkeypatch, "served")
    (tmp_path / "html").symlink_to(tmp_path / "served")
    monkeypatch.setattr(publish.asvrun, "SITE", tmp_path / "html")
    monkeypatch.setattr(publish.asvrun, "asv", fake_asv(0))
    for _ in range(2):  # the second found the link moved aside and crashed on it
        assert publish.publish() == 0
        assert (tmp_path / "html").is_symlink() and "asv's new index" in (tmp_path / "html" / "index.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["html", "served"]


def test_a_link_to_a_site_not_yet_there_gets_the_site(monkeypatch, tmp_path):
    (tmp_path / "html").symlink_to(tmp_path / "served" / "site")  # dangling: nothing there yet
    monkeypatch.setattr(publish.asvrun, "SITE", tmp_path / "html")
    monkeypatch.setattr(publish.asvrun, "asv", fake_asv(0))
    assert publish.publish() == 0
    assert (tmp_path / "html").is_symlink() and "asv's new index" in (tmp_path / "html" / "index.html").read_text()


def test_a_publish_stopped_between_its_renames_gets_the_last_site_back(monkeypatch, tmp_path):
    pages = last_site(tmp_path, monkeypatch, "html.old")
    monkeypatch.setattr(publish.asvrun, "SITE", tmp_path / "html")
    monkeypatch.setattr(publish.asvrun, "asv", fake_asv(1))  # fails: the site put back is the one left
    assert publish.publish() == 3
    assert {p.name: p.read_text() for p in (tmp_path / "html").iterdir()} == pages


def test_results_of_commits_off_the_graphed_branches_are_named_not_hidden(monkeypatch, tmp_path, capsys):
    # asv publish said "Couldn't find ... in branches" into its log alone; the graphs and flags lacked them silently.
    last_site(tmp_path, monkeypatch)

    def asv(args, env, log, echo=print):
        echo("· Couldn't find 0123456789abcdef0123456789abcdef01234567 in branches (main)")
        return fake_asv(0)(args, env, log)

    monkeypatch.setattr(publish.asvrun, "asv", asv)
    assert publish.publish() == 0
    out = capsys.readouterr().out
    assert "warning: asv publish (gpu) left 1 commits with results out of the graphs and the flags" in out
    assert "e.g. 0123456789" in out


def test_commits_outside_heads_history_are_ordered_by_date_and_named(capsys):
    # Hashes not in HEAD's history (a shallow clone) went last in a set's order: "latest" changed between runs.
    import report

    head = report.subprocess.run(["git", "rev-parse", "HEAD"], cwd=report.ROOT, capture_output=True,
                                 text=True).stdout.strip()
    older, newer = "a" * 40, "b" * 40
    dates = {older: 1, newer: 3, head: 2}
    assert report.commit_order({newer, head, older}, dates) == [older, head, newer]
    assert "2 of 3 commits with results are not in HEAD's history" in capsys.readouterr().err
    assert report.commit_order({newer, head, older}) == [older, newer, head]  # no dates: never the latest
    assert report.commit_order({head}) == [head] and capsys.readouterr().err.count("warning") == 1
