"""`--retry-void N` (issue 15, SPEC.md `attempt`): a void trial runs again as a new record of
the same trial number, up to N times; a scored trial never runs again; the exit status goes by
each trial's last attempt.

The void is real: a secret the host has not set voids the trial. The test's sink sets it when
the first attempt's void arrives, so the retry (a new Trial, reading the host's environment
again) passes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.batch import BatchPlan, Engine
from engine.cli import _exit_code
from engine.config import find_config, load_config
from engine.events import TrialFinished, TrialStarted
from engine.spec import load_cases

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SUITE = """
from engine import evaluation, Secret

@evaluation(secrets={"RETRY_TOKEN": Secret(hosts=["api.example.test"])}, trials=2)
def needs_a_token(c):
    c.send("x")
    c.exec("true").to_succeed()

@evaluation(trials=1)
def always_fails(c):
    c.send("x")
    c.exec("false").to_succeed()
"""
AGENT = 'echo \'{"type": "finished", "reason": "done"}\'\n'


def run(store, docker_client, path: Path, retry_void: int, sink) -> object:
    config = load_config(find_config(path))
    plan = BatchPlan(cases=load_cases([path]), variants=config.select_variants(None), config=config,
                     trigger="api", retry_void=retry_void)
    return Engine(store, docker_client).run(plan, sink)


def test_a_void_trial_runs_again_and_a_scored_one_never(suite, store, docker_client, monkeypatch):
    monkeypatch.delenv("RETRY_TOKEN", raising=False)
    path = suite(SUITE, files={".agent/run.sh": AGENT})
    events: list = []

    def sink(event) -> None:
        events.append(event)
        if isinstance(event, TrialFinished) and event.outcome == "infra_error":
            monkeypatch.setenv("RETRY_TOKEN", "s3cr3t-token-value")  # the user fixed the host

    summary = run(store, docker_client, path, retry_void=2, sink=sink)
    token, fails = sorted(summary.runs, key=lambda r: r.case_id != "needs_a_token")
    # Each trial number: its void first attempt, then its second, which passed; no third.
    assert [(t.trial, t.attempt, t.outcome) for t in token.trials] == [
        (1, 1, "infra_error"), (1, 2, "pass"), (2, 1, "infra_error"), (2, 2, "pass")]
    assert "RETRY_TOKEN is not set" in token.trials[0].failure.reason
    assert token.distribution.passed == 2 and token.distribution.scored == 2
    # The failing case was scored: never run again.
    assert [(t.trial, t.attempt, t.outcome) for t in fails.trials] == [(1, 1, "fail")]
    records = {t.id: store.get_trial(t.id) for t in token.trials}
    assert [records[t.id].attempt for t in token.trials] == [1, 2, 1, 2]
    assert len({t.id for t in token.trials}) == 4  # the void records are kept, never overwritten
    restarted = [e for e in events if isinstance(e, TrialStarted) and e.attempt == 2]
    assert sorted(e.trial for e in restarted) == [1, 2]
    # The exit status goes by the last attempts: the fail, not the voids before the passes.
    assert _exit_code(summary) == 1


def test_without_retry_a_void_stays_void(suite, store, docker_client, monkeypatch):
    monkeypatch.delenv("RETRY_TOKEN", raising=False)
    path = suite(SUITE.replace("trials=2", "trials=1"), files={".agent/run.sh": AGENT})
    summary = run(store, docker_client, path, retry_void=0, sink=lambda e: None)
    token = next(r for r in summary.runs if r.case_id == "needs_a_token")
    assert [(t.attempt, t.outcome) for t in token.trials] == [(1, "infra_error")]


def test_retry_void_on_the_command_line(tmp_path):
    proctor = [sys.executable, "-m", "engine.cli", "run", str(tmp_path), "--retry-void"]
    for bad, said in (("-1", "is not a whole number"), ("11", "must be at most 10"), ("x", "not a whole")):
        done = subprocess.run([*proctor, bad], capture_output=True, text=True)
        assert done.returncode == 2 and said in done.stderr, done.stderr
