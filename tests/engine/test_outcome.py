"""A trial's outcome from what happened, by SPEC.md's rules (no Docker).

`outcome_of` is the one place the verdict is decided: a void trial is
infra_error, a stopped body is fail/timeout or fail/limit, the first failed or
errored validation fails the trial, and otherwise it passes.
"""

from __future__ import annotations

from engine.errors import Void
from engine.models import Failure, PhaseSpan, Validation
from engine.trial import outcome_of


def span(phase: str, status: str = "ok", index: int | None = None) -> PhaseSpan:
    return PhaseSpan(phase=phase, status=status, start_ms=0, end_ms=1, index=index)  # type: ignore[arg-type]


def check(name: str, status: str = "passed", **evidence) -> Validation:
    return Validation(kind="command", name=name, status=status, evidence=evidence)  # type: ignore[arg-type]


def outcome(void=None, aborted=False, limit=None, phases=(), validations=(), timeout_s=900.0):
    return outcome_of(void, aborted, limit, list(phases), list(validations), timeout_s)


def test_a_void_trial_is_infra_error_where_it_stopped():
    # Even with a failed check and an abort: the engine could not give a fair try.
    assert outcome(Void("setup step 2 `pip install` exited 1", "setup step 2"), aborted=True,
                   validations=[check("pytest", "failed", exit_code=1)]) == (
        "infra_error", Failure(kind="infra", reason="setup step 2 `pip install` exited 1", where="setup step 2"))
    assert outcome(Void("Docker failed: gone")) == ("infra_error", Failure(kind="infra", reason="Docker failed: gone"))


def test_a_body_past_its_timeout_fails_at_the_aborted_phase():
    phases = [span("turn", index=1), span("diff", index=1), span("turn", "aborted", index=2)]
    assert outcome(aborted=True, phases=phases, timeout_s=90) == (
        "fail", Failure(kind="timeout", where="turn 2", reason="the trial ran past its timeout of 1m30s"))
    # The timeout outranks a check that failed before it.
    result = outcome(aborted=True, phases=[span("turn", index=1)], timeout_s=2.5,
                     validations=[check("pytest", "failed", exit_code=1)])
    assert result == ("fail", Failure(kind="timeout", where=None, reason="the trial ran past its timeout of 2.5s"))


def test_a_limit_fails_the_trial_naming_the_last_phase_it_stopped():
    reason = "the sandbox ran out of memory (512 MB)"
    phases = [span("turn", index=1), span("check", "failed", index=1), span("turn", "aborted", index=2)]
    assert outcome(aborted=True, limit=reason, phases=phases) == (
        "fail", Failure(kind="limit", reason=reason, where="turn 2"))
    # A phase without an index is named alone.
    assert outcome(aborted=True, limit=reason, phases=[span("turn", index=1), span("teardown", "error")]) == (
        "fail", Failure(kind="limit", reason=reason, where="teardown"))
    assert outcome(aborted=True, limit=reason, phases=[span("turn", index=1)]) == (
        "fail", Failure(kind="limit", reason=reason, where=None))


def test_the_first_failed_check_fails_the_trial_counted_among_checks():
    validations = [check("ls", exit_code=0),
                   Validation(kind="judge", name="tidy", status="passed"),
                   check("pytest -q", "failed", exit_code=1, stderr="E   assert 1 == 2\n"),
                   check("ruff .", "failed", exit_code=1)]
    assert outcome(validations=validations) == (
        "fail", Failure(kind="assertion", where="check 2 of 3",
                        reason="`pytest -q` exited 1: E   assert 1 == 2"))


def test_a_check_that_timed_out_fails_with_its_error():
    validations = [check("sleep 99", "error", exit_code=None, error="timed out after 5s")]
    assert outcome(validations=validations) == (
        "fail", Failure(kind="assertion", where="check 1 of 1", reason="`sleep 99` timed out after 5s"))


def test_an_error_raised_in_the_body_fails_the_trial():
    raised = Validation(kind="check", name="eval_greet.py:14", status="failed",
                        evidence={"exception": "AssertionError", "message": "greet.py is missing"})
    assert outcome(validations=[check("ls", exit_code=0), raised]) == (
        "fail", Failure(kind="assertion", where="check 2 of 2",
                        reason="AssertionError at eval_greet.py:14: greet.py is missing"))


def test_a_judge_below_its_threshold_fails_the_trial():
    judged = Validation(kind="judge", name="is it tidy?", status="failed",
                        evidence={"threshold": 0.7, "judgment": {"score": 0.25, "reasoning": "no"}})
    assert outcome(validations=[judged]) == (
        "fail", Failure(kind="judge", where="judge 1", reason="judge scored 0.25, below 0.7 for 'is it tidy?'"))


def test_a_trial_with_every_check_passed_passes():
    validations = [check("ls", exit_code=0), Validation(kind="judge", name="ok", status="passed"),
                   Validation(kind="command", name="skipped", status="skipped")]
    assert outcome(phases=[span("turn", index=1)], validations=validations) == ("pass", None)
    assert outcome() == ("pass", None)
