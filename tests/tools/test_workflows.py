"""Guards on .github/workflows: what keeps pull request code off the GPU runners.

Each rule is a function over one parsed workflow (a dict from yaml.safe_load)
that returns the problems it finds, as strings; the tests run every rule on
every real workflow (no problem allowed) and on small planted bad workflows
(each must be caught), so a rule that stops catching its case fails too.

Triggers. A workflow that a pull request can start *with its own definition*
(``pull_request``, ``pull_request_review``, ``pull_request_review_comment``:
GitHub takes the file from the pull request's merge ref; ``merge_group``: from
the merge queue's branch, which holds the pull request's changes) could
retarget ``runs-on`` or drop any guard. ``issue_comment``, ``issues``,
``discussion`` and ``discussion_comment`` run main's definition but anyone can
start them with input of their choosing (the "comment /benchmark" pattern).
No job of such a workflow may run on a self-hosted runner. A workflow with a
self-hosted job may be started only by pushes to main, ``workflow_dispatch``,
``schedule`` (both from main's definition; the jobs also check the ref),
``pull_request_target`` or ``workflow_run`` (main's definition, untrusted
code: an ``environment:`` with required reviewers must gate the job).

A runs-on counts as self-hosted when a label is ``self-hosted``, when it names
a runner ``group``, or when it is one expression that may evaluate to anything.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOW_FILES = sorted(WORKFLOW_DIR.glob("*.y*ml"))

# A pull request supplies the workflow definition itself.
PR_DEFINED_TRIGGERS = {"pull_request", "pull_request_review", "pull_request_review_comment", "merge_group"}
# Main's definition, but anyone can start it with input of their choosing.
ANYONE_TRIGGERS = {"issue_comment", "issues", "discussion", "discussion_comment"}
UNTRUSTED_TRIGGERS = PR_DEFINED_TRIGGERS | ANYONE_TRIGGERS
# Main's definition, started for untrusted code: a self-hosted job needs an environment.
PRIVILEGED_PR_TRIGGERS = {"pull_request_target", "workflow_run"}
# The only triggers allowed in a workflow with a self-hosted job (push: to main only).
SELF_HOSTED_TRIGGERS = {"push", "workflow_dispatch", "schedule"} | PRIVILEGED_PR_TRIGGERS
DEFAULT_BRANCH = "main"

# (workflow file, job, step index) of checkouts allowed to keep credentials:
# none, the one job that pushes passes its token in the push step itself.
PERSIST_CREDENTIALS_EXCEPTIONS: set[tuple[str, str, int]] = set()

# Write permissions allowed, by (workflow file, job); read everywhere else.
WRITE_PERMISSIONS = {
    ("benchmarks.yml", "record"): {"contents"},
    ("benchmarks.yml", "site"): {"pages", "id-token"},
    ("bench-gate.yml", "comment"): {"pull-requests"},
}

SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
DOCKER_DIGEST = re.compile(r"^docker://[^@\s]+@sha256:[0-9a-f]{64}$")
PIPEFAIL_SET = re.compile(r"^\s*set\s+[^\n#;]*-[a-zA-Z]*o\s+pipefail\b", re.M)


# --- reading a workflow ------------------------------------------------------

def load(text: str) -> dict:
    return yaml.safe_load(text)


def triggers(wf: dict) -> dict:
    """{event: its configuration or None}; YAML 1.1 reads the key ``on`` as True."""
    on = wf.get("on", wf.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return {event: None for event in on}
    return dict(on or {})


def jobs(wf: dict) -> dict:
    return wf.get("jobs") or {}


def steps(job: dict) -> list:
    return job.get("steps") or []


def labels(job: dict) -> list[str]:
    runs_on = job.get("runs-on", [])
    if isinstance(runs_on, dict):
        found = runs_on.get("labels", [])
        found = [found] if isinstance(found, str) else list(found)
        return found + (["self-hosted"] if "group" in runs_on else [])
    return [runs_on] if isinstance(runs_on, str) else list(runs_on)


def is_self_hosted(job: dict) -> bool:
    found = [str(label) for label in labels(job)]
    if any(label.strip().lower() == "self-hosted" for label in found):
        return True
    # One label that is all expression: it may evaluate to a self-hosted runner.
    return len(found) == 1 and found[0].strip().startswith("${{")


def environment_name(job: dict) -> str | None:
    env = job.get("environment")
    if isinstance(env, dict):
        env = env.get("name")
    return str(env).strip() if env else None


def effective_shell(wf: dict, job: dict, step: dict) -> str | None:
    for scope in (step, (job.get("defaults") or {}).get("run") or {}, (wf.get("defaults") or {}).get("run") or {}):
        if scope.get("shell"):
            return str(scope["shell"]).strip()
    return None


def is_checkout(step: dict) -> bool:
    return str(step.get("uses", "")).split("@")[0].lower() == "actions/checkout"


# --- shell scripts -----------------------------------------------------------

def strip_quotes_and_comments(script: str) -> str:
    """The script with quoted strings and comments blanked (lines kept)."""
    out, quote, i = [], None, 0
    while i < len(script):
        c = script[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < len(script):
                i += 2
                continue
            if c == quote:
                quote = None
            out.append("\n" if c == "\n" else " ")
        elif c == "\\" and i + 1 < len(script):
            out.append("  " if script[i + 1] != "\n" else " \n")
            i += 2
            continue
        elif c in "'\"":
            quote = c
            out.append(" ")
        elif c == "#" and (i == 0 or script[i - 1] in " \t\n;"):
            while i < len(script) and script[i] != "\n":
                out.append(" ")
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def first_pipe_line(script: str) -> int | None:
    """Line number of the first shell pipe (``|`` or ``|&``, not ``||``), or None."""
    for n, line in enumerate(strip_quotes_and_comments(script).splitlines()):
        if re.search(r"(?<!\|)\|(?!\|)", line):
            return n
    return None


def pipefail_line(script: str) -> int | None:
    m = PIPEFAIL_SET.search(strip_quotes_and_comments(script))
    if m is None:
        return None
    start = m.start() + len(m.group(0)) - len(m.group(0).lstrip())  # the word "set"
    return script[:start].count("\n")


# --- the rules ---------------------------------------------------------------

def check_untrusted_triggers(wf: dict) -> list[str]:
    """No self-hosted job in a workflow that a pull request or anyone can start."""
    bad = sorted(set(triggers(wf)) & UNTRUSTED_TRIGGERS)
    if not bad:
        return []
    return [f"job {name}: self-hosted runner in a workflow triggered by {', '.join(bad)}"
            for name, job in jobs(wf).items() if is_self_hosted(job)]


def check_self_hosted_triggers(wf: dict) -> list[str]:
    """A workflow with a self-hosted job starts only from main's definition."""
    if not any(is_self_hosted(job) for job in jobs(wf).values()):
        return []
    problems = [f"trigger {event} in a workflow with a self-hosted job"
                for event in triggers(wf) if event not in SELF_HOSTED_TRIGGERS]
    if "push" in triggers(wf):
        push = triggers(wf)["push"] or {}
        if push.get("branches") != [DEFAULT_BRANCH] or set(push) - {"branches", "paths", "paths-ignore"}:
            problems.append(f"push to other refs than {DEFAULT_BRANCH} in a workflow with a self-hosted job")
    return problems


def check_environment(wf: dict) -> list[str]:
    """Self-hosted jobs started for untrusted code, or checking out another
    commit than the one the run is for, wait for an environment's approval."""
    privileged = set(triggers(wf)) & PRIVILEGED_PR_TRIGGERS
    problems = []
    for name, job in jobs(wf).items():
        if not is_self_hosted(job) or environment_name(job):
            continue
        if privileged:
            problems.append(f"job {name}: self-hosted, triggered by {', '.join(sorted(privileged))}, no environment")
        elif any(is_checkout(step) and (step.get("with") or {}).get("ref") for step in steps(job)):
            problems.append(f"job {name}: self-hosted, checks out another ref, no environment")
    return problems


MAIN_REF_GUARD = f"github.ref == 'refs/heads/{DEFAULT_BRANCH}'"


def check_main_ref_guard(wf: dict) -> list[str]:
    """In a workflow a maintainer can start on any branch (workflow_dispatch),
    a self-hosted job runs only for main: its ``if`` checks github.ref, or it
    needs a job that does (and does not override the skip with always() or
    !cancelled()). Defense in depth: the runner group's workflow list is the
    boundary (docs/runner.md)."""
    if "workflow_dispatch" not in triggers(wf):
        return []
    all_jobs = jobs(wf)

    def guarded(name: str, seen=()) -> bool:
        job = all_jobs.get(name) or {}
        cond = str(job.get("if", ""))
        if MAIN_REF_GUARD in cond:
            return True
        if "always()" in cond or "cancelled()" in cond or name in seen:
            return False
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        return any(guarded(n, seen + (name,)) for n in needs)

    return [f"job {name}: self-hosted, may run for a ref other than {DEFAULT_BRANCH}"
            for name, job in all_jobs.items() if is_self_hosted(job) and not guarded(name)]


def check_run_expressions(wf: dict) -> list[str]:
    """No ``${{ }}`` inside run: (pass values through env: and use "$VAR")."""
    return [f"job {name} step {i}: ${{{{ }}}} in run:"
            for name, job in jobs(wf).items() for i, step in enumerate(steps(job))
            if "${{" in str(step.get("run", ""))]


def check_pipefail(wf: dict) -> list[str]:
    """A run: with a pipe has pipefail: an explicit ``shell: bash`` (GitHub runs
    it as ``bash --noprofile --norc -eo pipefail {0}``; the implicit default is
    ``bash -e {0}``, without pipefail, and ``sh`` in a container) or a custom
    shell naming pipefail, or ``set -o pipefail`` before the first pipe."""
    problems = []
    for name, job in jobs(wf).items():
        for i, step in enumerate(steps(job)):
            script = str(step.get("run", ""))
            pipe = first_pipe_line(script)
            if pipe is None:
                continue
            shell = effective_shell(wf, job, step)
            if shell == "bash" or (shell and "pipefail" in shell):
                continue
            set_at = pipefail_line(script)
            if set_at is None or set_at > pipe:
                problems.append(f"job {name} step {i}: a pipe without pipefail (shell {shell or 'default'})")
    return problems


def check_pinned(wf: dict) -> list[str]:
    """Every uses: is pinned to a full commit SHA (a local ./action, or a docker image by digest)."""
    problems = []
    for name, job in jobs(wf).items():
        refs = [("job", job["uses"])] if "uses" in job else []
        refs += [(f"step {i}", step["uses"]) for i, step in enumerate(steps(job)) if "uses" in step]
        for where, ref in refs:
            ref = str(ref).strip()
            if ref.startswith("./") or SHA_PIN.match(ref) or DOCKER_DIGEST.match(ref):
                continue
            problems.append(f"job {name} {where}: {ref} is not pinned to a commit SHA")
    return problems


def check_persist_credentials(wf: dict, file: str = "", exceptions=PERSIST_CREDENTIALS_EXCEPTIONS) -> list[str]:
    """Every actions/checkout sets persist-credentials: false."""
    problems = []
    for name, job in jobs(wf).items():
        for i, step in enumerate(steps(job)):
            if not is_checkout(step) or (file, name, i) in exceptions:
                continue
            value = (step.get("with") or {}).get("persist-credentials", True)
            if str(value).strip().lower() != "false":
                problems.append(f"job {name} step {i}: actions/checkout without persist-credentials: false")
    return problems


def check_permissions(wf: dict, file: str = "", allowed=WRITE_PERMISSIONS) -> list[str]:
    """Read-only token unless the job is listed in ``allowed``."""
    def writes(perms) -> set[str]:
        if isinstance(perms, str):
            return {"*"} if perms.strip() == "write-all" else set()
        return {k for k, v in (perms or {}).items() if str(v).strip() == "write"}

    problems = []
    if "permissions" not in wf:
        problems.append("no workflow-level permissions (the default token may be read-write)")
    elif writes(wf["permissions"]):
        problems.append(f"workflow-level write permissions: {sorted(writes(wf['permissions']))}")
    for name, job in jobs(wf).items():
        extra = writes(job.get("permissions")) - allowed.get((file, name), set())
        if extra:
            problems.append(f"job {name}: write permissions {sorted(extra)}")
    return problems


def check_pin_comments(text: str) -> list[str]:
    """Every SHA-pinned uses: line names its version in a trailing comment."""
    return [f"line {n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if re.search(r"\buses:\s*\S+@[0-9a-f]{40}\b", line)
            and not re.search(r"@[0-9a-f]{40}\s+#\s*v\d+(\.\d+)*\s*$", line)]


RULES = [check_untrusted_triggers, check_self_hosted_triggers, check_environment, check_main_ref_guard,
         check_run_expressions,
         check_pipefail, check_pinned, check_persist_credentials, check_permissions]


# --- the real workflows ------------------------------------------------------

def test_workflows_exist():
    names = {p.name for p in WORKFLOW_FILES}
    assert {"benchmarks.yml", "bench-gate.yml", "bench-bisect.yml", "tests.yml"} <= names


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_real_workflows(path, rule):
    wf = load(path.read_text())
    args = (wf, path.name) if rule in (check_persist_credentials, check_permissions) else (wf,)
    assert rule(*args) == []


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_real_workflows_pin_comments(path):
    assert check_pin_comments(path.read_text()) == []


def test_gpu_jobs_exist_and_are_guarded():
    """The rules above would pass vacuously if no job were self-hosted."""
    gpu = {(p.name, name): job for p in WORKFLOW_FILES for name, job in jobs(load(p.read_text())).items()
           if is_self_hosted(job)}
    assert set(gpu) == {("benchmarks.yml", "bench"), ("bench-gate.yml", "gate"), ("bench-bisect.yml", "bisect")}
    assert environment_name(gpu["bench-gate.yml", "gate"]) == "gpu-benchmarks"


def test_benchmarks_never_drops_a_queued_run():
    """No concurrency group on the run or its bench/record jobs (a pending run in
    a group is cancelled when a newer one queues); record and site also run
    after a failed benchmark case, not after a cancelled or skipped bench job."""
    wf = load((WORKFLOW_DIR / "benchmarks.yml").read_text())
    assert "concurrency" not in wf
    assert "concurrency" not in jobs(wf)["bench"] and "concurrency" not in jobs(wf)["record"]
    record_if = jobs(wf)["record"]["if"]
    assert "!cancelled()" in record_if and "'failure'" in record_if and "'success'" in record_if
    assert "!cancelled()" in jobs(wf)["site"]["if"] and "needs.record.result == 'success'" in jobs(wf)["site"]["if"]
    bench = steps(jobs(wf)["bench"])
    assert any("bench.py run NEW" in str(s.get("run", "")) for s in bench)
    assert all(s.get("if") == "always()" for s in bench if "upload-artifact" in str(s.get("uses", "")))
    record = "\n".join(str(s.get("run", "")) for s in steps(jobs(wf)["record"]))
    assert "for attempt in 1 2 3 4 5" in record and "git push" in record


def test_gate_is_not_started_by_pull_requests():
    wf = load((WORKFLOW_DIR / "bench-gate.yml").read_text())
    assert set(triggers(wf)) == {"workflow_dispatch"}
    gate = "\n".join(str(s.get("run", "")) for s in steps(jobs(wf)["gate"]))
    assert 'python3 tools/bench.py gate origin/main "$HEAD_SHA" --summary' in gate


def test_tests_workflow_is_cpu_only():
    wf = load((WORKFLOW_DIR / "tests.yml").read_text())
    assert {"push", "pull_request"} <= set(triggers(wf))
    job = jobs(wf)["test"]
    assert job["runs-on"] == "ubuntu-latest" and job["container"] == "python:3.11-bookworm"
    assert any(s.get("run") == ".ci/run" for s in steps(job))


# --- planted bad workflows: every rule must catch its case ------------------

SHA = "3d3c42e5aac5ba805825da76410c181273ba90b1"
CHECKOUT = f"uses: actions/checkout@{SHA} # v7.0.1"

BAD = {
    check_untrusted_triggers: [
        """
on: pull_request
permissions: {contents: read}
jobs:
  gpu: {runs-on: [self-hosted, gpu], steps: [{run: echo}]}
""",
        """
on: {pull_request_review: {}}
jobs:
  gpu: {runs-on: self-hosted, steps: [{run: echo}]}
""",
        """
on:
  issue_comment:
    types: [created]
jobs:
  gpu:
    runs-on: {group: gpu-runners}
    steps: [{run: echo}]
""",
        """
on: [push, pull_request_review_comment]
jobs:
  gpu: {runs-on: "${{ github.event.comment.body }}", steps: [{run: echo}]}
""",
    ],
    check_self_hosted_triggers: [
        """
on: {push: {branches: [main, dev]}}
jobs:
  gpu: {runs-on: [self-hosted], steps: [{run: echo}]}
""",
        """
on: push
jobs:
  gpu: {runs-on: [self-hosted], steps: [{run: echo}]}
""",
        """
on: {workflow_call: {}}
jobs:
  gpu: {runs-on: [self-hosted], steps: [{run: echo}]}
""",
    ],
    check_environment: [
        """
on: pull_request_target
jobs:
  gpu: {runs-on: [self-hosted, gpu], steps: [{run: echo}]}
""",
        """
on: {workflow_run: {workflows: [tests], types: [completed]}}
jobs:
  gpu: {runs-on: [self-hosted, gpu], environment: "", steps: [{run: echo}]}
""",
        f"""
on: workflow_dispatch
jobs:
  gpu:
    runs-on: [self-hosted, gpu]
    steps:
      - {CHECKOUT}
        with: {{ref: "${{{{ inputs.sha }}}}", persist-credentials: false}}
""",
    ],
    check_main_ref_guard: [
        """
on: workflow_dispatch
jobs:
  gpu: {runs-on: [self-hosted, gpu], steps: [{run: echo}]}
""",
        """
on: workflow_dispatch
jobs:
  check: {runs-on: ubuntu-latest, if: "github.ref == 'refs/heads/main'", steps: [{run: echo}]}
  gpu: {needs: check, if: always(), runs-on: [self-hosted, gpu], steps: [{run: echo}]}
""",
    ],
    check_run_expressions: [
        """
on: workflow_dispatch
jobs:
  a: {runs-on: ubuntu-latest, steps: [{run: 'echo "${{ inputs.name }}"'}]}
""",
        """
on: pull_request
jobs:
  a:
    runs-on: ubuntu-latest
    strategy: {matrix: {x: [1]}}
    steps:
      - run: |
          echo ok
          make ${{ matrix.x }}
""",
    ],
    check_pipefail: [
        """
on: push
jobs:
  a: {runs-on: ubuntu-latest, steps: [{run: make | tee log}]}
""",
        """
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    container: debian
    steps:
      - shell: sh
        run: |
          make 2>&1 |& tee log
""",
        """
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - shell: bash -e {0}
        run: |
          make | tee log
          set -o pipefail
""",
    ],
    check_pinned: [
        """
on: push
jobs:
  a: {runs-on: ubuntu-latest, steps: [{uses: actions/checkout@v4, with: {persist-credentials: false}}]}
""",
        f"""
on: push
jobs:
  a: {{runs-on: ubuntu-latest, steps: [{{uses: "actions/checkout@{SHA[:12]}"}}]}}
""",
        """
on: push
jobs:
  a: {uses: octo/reusable/.github/workflows/x.yml@main}
""",
        """
on: push
jobs:
  a: {runs-on: ubuntu-latest, steps: [{uses: "docker://alpine:3"}]}
""",
    ],
    check_persist_credentials: [
        f"""
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - {CHECKOUT}
""",
        f"""
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - {CHECKOUT}
        with: {{persist-credentials: true, fetch-depth: 0}}
""",
    ],
    check_permissions: [
        """
on: push
jobs:
  a: {runs-on: ubuntu-latest, steps: [{run: echo}]}
""",
        """
on: push
permissions: write-all
jobs:
  a: {runs-on: ubuntu-latest, steps: [{run: echo}]}
""",
        """
on: push
permissions: {contents: read}
jobs:
  a: {runs-on: ubuntu-latest, permissions: {contents: write}, steps: [{run: echo}]}
""",
    ],
}

GOOD = {
    check_untrusted_triggers: """
on: [pull_request, push]
jobs:
  cpu: {runs-on: ubuntu-latest, steps: [{run: echo}]}
""",
    check_self_hosted_triggers: """
on:
  push: {branches: [main]}
  workflow_dispatch:
jobs:
  gpu: {runs-on: [self-hosted, gpu], steps: [{run: echo}]}
""",
    check_environment: """
on: pull_request_target
jobs:
  gpu: {runs-on: [self-hosted, gpu], environment: {name: gpu-benchmarks}, steps: [{run: echo}]}
""",
    check_main_ref_guard: """
on: [workflow_dispatch, push]
jobs:
  check: {runs-on: ubuntu-latest, if: "github.ref == 'refs/heads/main'", steps: [{run: echo}]}
  gpu: {needs: [check], runs-on: [self-hosted, gpu], steps: [{run: echo}]}
  gpu2: {if: "github.repository_owner == 'x' && github.ref == 'refs/heads/main'", runs-on: [self-hosted], steps: [{run: echo}]}
""",
    check_run_expressions: """
on: workflow_dispatch
jobs:
  a: {runs-on: ubuntu-latest, steps: [{run: 'echo "$NAME"', env: {NAME: "${{ inputs.name }}"}}]}
""",
    check_pipefail: """
on: push
defaults: {run: {shell: bash}}
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - run: make | tee log
      - shell: sh
        run: |
          set -euo pipefail
          make | tee log
      - shell: sh
        run: |
          grep -E 'a|b' log || true
          echo "x|y"  # no | here
""",
    check_pinned: f"""
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - {CHECKOUT}
      - uses: ./local-action
      - uses: "docker://alpine@sha256:{'0' * 64}"
""",
    check_persist_credentials: f"""
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - {CHECKOUT}
        with: {{persist-credentials: false}}
      - uses: actions/setup-python@{SHA} # v7
""",
    check_permissions: """
on: push
permissions: {contents: read}
jobs:
  a: {runs-on: ubuntu-latest, permissions: {pull-requests: read}, steps: [{run: echo}]}
""",
}

BAD_CASES = [(rule, i, text) for rule, texts in BAD.items() for i, text in enumerate(texts)]


@pytest.mark.parametrize("rule,i,text", BAD_CASES, ids=[f"{r.__name__}-{i}" for r, i, _ in BAD_CASES])
def test_rule_catches_planted_bad_workflow(rule, i, text):
    assert rule(load(text)), f"{rule.__name__} missed:\n{text}"


@pytest.mark.parametrize("rule", list(GOOD), ids=lambda r: r.__name__)
def test_rule_passes_good_workflow(rule):
    assert rule(load(GOOD[rule])) == []


def test_every_rule_has_planted_cases():
    assert set(BAD) == set(GOOD) == set(RULES)


def test_persist_credentials_exception_list():
    text = f"""
on: push
jobs:
  push:
    runs-on: ubuntu-latest
    steps:
      - {CHECKOUT}
"""
    assert check_persist_credentials(load(text), "x.yml")
    assert check_persist_credentials(load(text), "x.yml", exceptions={("x.yml", "push", 0)}) == []


def test_pin_comments():
    assert check_pin_comments(f"      - uses: actions/checkout@{SHA} # v7.0.1\n") == []
    assert check_pin_comments(f"      - uses: actions/checkout@{SHA}\n")
    assert check_pin_comments(f"      - uses: actions/checkout@{SHA} # latest\n")


def test_real_workflow_planted_regressions():
    """Each real workflow, broken in the way its guard prevents, is caught."""
    gate = load((WORKFLOW_DIR / "bench-gate.yml").read_text())
    gate[True] = {"pull_request": {"types": ["labeled"]}}
    assert check_untrusted_triggers(gate) and check_self_hosted_triggers(gate)

    gate = load((WORKFLOW_DIR / "bench-gate.yml").read_text())
    del jobs(gate)["gate"]["environment"]
    assert check_environment(gate)
    gate[True] = {"pull_request_target": None}
    assert any("pull_request_target" in p for p in check_environment(gate))

    bench = load((WORKFLOW_DIR / "benchmarks.yml").read_text())
    del bench["defaults"]
    step = next(s for s in steps(jobs(bench)["bench"]) if "bench.py run" in str(s.get("run", "")))
    step["run"] = 'python3 tools/bench.py run "${{ github.sha }}" | tee bench.log\n'
    assert check_run_expressions(bench) and check_pipefail(bench)

    tests = load((WORKFLOW_DIR / "tests.yml").read_text())
    steps(jobs(tests)["test"])[0]["uses"] = "actions/checkout@v4"
    del steps(jobs(tests)["test"])[0]["with"]["persist-credentials"]
    assert check_pinned(tests) and check_persist_credentials(tests, "tests.yml")
