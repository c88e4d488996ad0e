"""tools/revisions.py: the commits a run measures; NEW's start, its resume and what it skips."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import provenance  # noqa: E402
import revisions  # noqa: E402


def test_new_starts_after_the_newest_commit_with_results_of_the_mode(tmp_path):
    head, parent = revisions.commit_of("HEAD"), revisions.commit_of("HEAD~1")
    (tmp_path / "m").mkdir()
    every = {f"add_rmsnorm.{f}.track_ratio('fused', 'bf16 1x64')": None for f in revisions.FAMILIES}
    cols = ["result", "params"]
    (tmp_path / "m" / f"{parent[:8]}-env.json").write_text(json.dumps({"commit_hash": parent, "results": every,
                                                                       "result_columns": cols}))
    (tmp_path / "m" / "garbage-env.json").write_text("{")
    assert revisions.newest_with_results("m", tmp_path) == parent
    (tmp_path / "m" / "list-env.json").write_text("[]")  # JSON, but no asv result
    assert revisions.newest_with_results("m", tmp_path) == parent
    if not revisions.results_only(head):
        assert revisions.resolve(["NEW"], "m", tmp_path) == [head]
    # A run cut off after some families (it said "nothing new" and never measured the rest): NEW resumes it.
    del every["add_rmsnorm.Training.track_ratio('fused', 'bf16 1x64')"]
    (tmp_path / "m" / f"{parent[:8]}-env.json").write_text(json.dumps({"commit_hash": parent, "results": every,
                                                                       "result_columns": cols}))
    assert revisions.unfinished(tmp_path, "m", parent) and not revisions.unfinished(tmp_path, "m", head)
    assert revisions.resolve(["NEW"], "m", tmp_path)[0] == parent


@pytest.mark.parametrize("status, selection, resumed", [
    ("interrupted", [], True), ("failed cases", ["Inference"], True),  # cut off; a selection's run
    ("failed cases", [], False), ("complete", [], False),  # every family ran: a missing one failed there
    (None, None, True)])  # no record, or one from before records named their selection
def test_new_resumes_a_commit_only_where_its_newest_run_did_not_run_every_family(tmp_path, status, selection,
                                                                                  resumed):
    # A family that failed with nothing stored left the commit "unfinished": NEW measured it again at every run.
    parent = revisions.commit_of("HEAD~1")
    every = {f"add_rmsnorm.{f}.track_ratio": [[1.0], [["'fused'"]]] for f in revisions.FAMILIES[1:]}
    (tmp_path / "r" / "m").mkdir(parents=True)
    (tmp_path / "r" / "m" / f"{parent[:8]}-env.json").write_text(json.dumps(
        {"commit_hash": parent, "results": every, "result_columns": ["result", "params"]}))
    prov = tmp_path / "p" / "m"
    if status:
        provenance.record(prov, "m", parent, "gpu", {}, {}, "2026-12-01T00:00:00+00:00", status="interrupted",
                          extra={"selection": []})  # an older run, cut off
        provenance.record(prov, "m", parent, "gpu", {}, {}, "2026-12-02T00:00:00+00:00", status=status,
                          extra={"selection": selection})
    assert revisions.unfinished(tmp_path / "r", "m", parent, prov) is resumed


@pytest.mark.parametrize("text", ['{"commit_hash": "%s", "results": null, "result_columns": []}', "[]", "{"])
def test_new_moves_aside_a_results_file_of_another_shape_instead_of_crashing(tmp_path, text):
    # "results": null in the commit's file, or a corrupt one sorting first, crashed every `run NEW` (TypeError,
    # JSONDecodeError) before measure could move it aside.
    parent = revisions.commit_of("HEAD~1")
    (tmp_path / "m").mkdir()
    good = {"commit_hash": parent, "result_columns": ["result", "params"],
            "results": {"add_rmsnorm.Forward.track_ratio": [[1.0], [["'fused'"]]]}}
    (tmp_path / "m" / f"{parent[:8]}-env.json").write_text(json.dumps(good))
    bad = tmp_path / "m" / f"{parent[:8]}-aaa.json"  # sorts first
    bad.write_text(text % parent if "%s" in text else text)
    assert revisions.newest_with_results("m", tmp_path) == parent
    assert revisions.unfinished(tmp_path, "m", parent)  # Forward alone
    assert not bad.exists() and bad.with_name(bad.name + ".corrupt").exists()
    assert revisions.stored_names(tmp_path, "m", parent) == {"add_rmsnorm.Forward.track_ratio"}
    (tmp_path / "m" / f"{parent[:8]}-env.json").write_text('{"commit_hash": "%s", "results": null}' % parent)
    assert revisions.newest_with_results("m", tmp_path) is None and revisions.stored_names(tmp_path, "m", parent) == set()


def test_new_drops_only_commits_of_results_alone(monkeypatch, tmp_path):
    """D: NEW keeps an empty commit and a merge (git diff-tree prints nothing for both), drops commits that change
    only results/ and provenance/ (a merge: against its first parent)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}

    def g(*args):
        return subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args],
                              cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout.strip()

    def commit(path, message, *extra):
        if path:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(message)
            g("add", path)
        g("commit", "-q", *extra, "-m", message)
        return g("rev-parse", "HEAD")

    g("init", "-q", "-b", "main")
    base = commit("code.py", "base")
    results = commit("results/m/x.json", "results only")
    empty = commit(None, "empty", "--allow-empty")
    g("checkout", "-q", "-b", "side")
    commit("code2.py", "side: code")
    g("checkout", "-q", "main")
    g("merge", "-q", "--no-ff", "-m", "merge code", "side")
    merge = g("rev-parse", "HEAD")
    g("checkout", "-q", "-b", "side2", base)
    commit("provenance/m/y.json", "side2: provenance only")
    g("checkout", "-q", "main")
    g("merge", "-q", "--no-ff", "-m", "merge provenance", "side2")
    both = commit("provenance/m/z.json", "provenance only")
    monkeypatch.setattr(revisions, "ROOT", tmp_path)  # where git runs
    monkeypatch.setattr(revisions, "newest_with_results", lambda machine, results, prov=None: base)
    assert not revisions.results_only(empty) and not revisions.results_only(merge)
    assert revisions.results_only(results) and revisions.results_only(both)
    assert revisions.resolve(["NEW"], "m", tmp_path) == [empty, merge]
    assert not revisions.results_only(base)  # a root commit: every file is a change


def test_a_range_from_a_side_branch_commit_is_refused(tmp_path, monkeypatch):
    # S1 on a side branch, SLOW on main, the merge, M3: S1..M3 listed the merge first, and the bisect measured it
    # against S1 (its second parent) and blamed it for SLOW, which it never measured.
    def g(*args):
        return subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True, env={**os.environ, "GIT_AUTHOR_NAME": "t",
                                                                    "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                                                    "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()

    g("init", "-q", "-b", "main")
    for name in ("A", "S1", "SLOW", "M3"):
        if name == "S1":
            g("checkout", "-q", "-b", "side")
        if name == "SLOW":
            g("checkout", "-q", "main")
        g("commit", "-q", "--allow-empty", "-m", name)
        if name == "SLOW":
            g("merge", "-q", "--no-ff", "-m", "merge side", "side")
    monkeypatch.setattr(revisions, "ROOT", tmp_path)
    with pytest.raises(revisions.UsageError, match="is not on .*'s first-parent line .* the merge's first parent"):
        revisions.range_commits("side..main")
    good, commits = revisions.range_commits("main~3..main")  # A..M3 on the main line
    assert [g("log", "-1", "--format=%s", c) for c in commits] == ["SLOW", "merge side", "M3"]


@pytest.mark.parametrize("spec", ["HEAD~1..", "..HEAD", ".."])
def test_a_range_missing_an_end_says_so(spec):
    # "HEAD~1.." read "git rev-parse --verify --end-of-options ^{commit}: fatal: Needed a single revision".
    with pytest.raises(revisions.UsageError, match="is not a range: give GOOD..BAD, both named"):
        revisions.range_commits(spec)


def test_an_asv_conf_that_is_no_json_is_named(tmp_path, monkeypatch):
    # "<string>:2 Unexpected end of input at column 1": which file?
    import asvrun

    (tmp_path / "asv.conf.json").write_text("{\n")
    monkeypatch.setattr(asvrun, "ROOT", tmp_path)
    with pytest.raises(ValueError, match=f"{tmp_path / 'asv.conf.json'}: not valid JSON"):
        asvrun.load_conf()
