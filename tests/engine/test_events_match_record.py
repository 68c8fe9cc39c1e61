"""A trial's stored events tell the record's story: every phase's end event carries the
status and detail its span has in the record, so a replay never shows a failing check as ok
or a record phase other than the record says. Checks end once their matchers have run."""

from __future__ import annotations

import pytest

from engine.events import PhaseEnded

HEADER = "import time\nfrom pathlib import Path\nfrom engine import evaluation, git\n"
AGENT = """
echo '{"type":"message","role":"assistant","text":"done"}'
echo '{"type":"finished","reason":"done"}'
"""
EVAL = HEADER + """
@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh")})
def checks_of_every_kind(c):
    c.send("one")
    c.exec("true").to_succeed()
    c.exec("false").to_succeed()                 # failed by its matcher
    c.read_file(".agent/run.sh")                 # not a phase: the check above is still open
    slow = c.exec("sleep 5", timeout=1)          # error: timed out
    c.send("two")
    late = c.exec("echo hi")
    late.stdout.to_contain("bye")                # failed, its phase still open at the body's end


@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh")}, timeout="3s")
def stuck_after_a_failing_check(c):
    c.exec("false").to_succeed()
    time.sleep(60)                               # the timeout ends the body here
"""


def ends(events) -> list[tuple]:
    return [(e.phase, e.index, e.status, e.detail) for e in events if isinstance(e, PhaseEnded)]


def spans(record) -> list[tuple]:
    return [(s.phase, s.index, s.status, s.detail) for s in record.phases]


@pytest.mark.slow
def test_every_phase_end_event_says_what_the_record_says(suite, run_eval, store):
    summary, _, records = run_eval(suite(EVAL, files={"agent.sh": AGENT}))
    store.flush()
    by_case = {r.case_id: r for r in records.values()}

    checks = by_case["checks_of_every_kind"]
    stored = list(store.trial_events(checks.id))
    assert ends(stored) == spans(checks)
    assert [(s.status, s.detail) for s in checks.phases if s.phase == "check"] == [
        ("ok", "true"), ("failed", "false"), ("error", "sleep 5"), ("failed", "echo hi")]
    assert checks.phases[-1].detail == "saved" and checks.phases[-1].status == "ok"
    # The outcome rules are untouched: the first failed validation decides.
    assert checks.outcome == "fail" and checks.failure.kind == "assertion"
    assert checks.failure.where == "check 2 of 4"
    # The phases stay in order: a check ends before the next phase starts.
    starts = [e for e in stored if e.type in ("phase_started", "phase_ended")]
    open_at_once = 0
    for e in starts:
        open_at_once += 1 if e.type == "phase_started" else -1
        assert open_at_once in (0, 1)

    stuck = by_case["stuck_after_a_failing_check"]
    stored = list(store.trial_events(stuck.id))
    assert ends(stored) == spans(stuck)
    assert ("check", 1, "failed", "false") in spans(stuck)
    assert stuck.outcome == "fail" and stuck.failure.kind == "timeout"


def test_a_failed_check_is_a_verdict_not_where_a_limit_stopped_the_trial():
    from engine.models import PhaseSpan
    from engine.trial import outcome_of

    phases = [PhaseSpan(phase="turn", index=1, status="ok", start_ms=0, end_ms=1),
              PhaseSpan(phase="check", index=1, status="failed", start_ms=1, end_ms=2),
              PhaseSpan(phase="check", index=2, status="error", start_ms=2, end_ms=3)]
    outcome, failure = outcome_of(None, True, "the sandbox ran out of memory", phases, [], 60)
    assert (outcome, failure.kind, failure.where) == ("fail", "limit", None)
    stopped = [*phases, PhaseSpan(phase="check", index=3, status="aborted", start_ms=3, end_ms=4)]
    assert outcome_of(None, True, "out of memory", stopped, [], 60)[1].where == "check 3"
