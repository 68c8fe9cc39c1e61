"""A run's distribution by SPEC.md's rules."""

import pytest

from engine.models import Failure, TrialSummary, distribution


def trials(*spec):
    return [TrialSummary(id=f"t{i}", trial=i, outcome=o, command_count=c,
                         failure=Failure(kind="infra", reason="x") if o == "infra_error" else None)
            for i, (o, c) in enumerate(spec, 1)]


@pytest.mark.parametrize(("runs", "deterministic"), [
    (trials(("pass", 3), ("pass", 7)), True),            # agree, within four commands
    (trials(("fail", 3), ("fail", 5), ("fail", 4)), True),  # agreeing on fail counts too
    (trials(("pass", 3), ("pass", 8)), False),           # five apart
    (trials(("pass", 3), ("fail", 3)), False),           # disagree
    (trials(("pass", 3)), False),                        # one scored trial is not enough
    (trials(("pass", 3), ("infra_error", 0), ("skipped", 0)), False),  # void and skipped never count
])
def test_deterministic(runs, deterministic):
    assert distribution(runs).deterministic is deterministic


def test_pass_rate_is_no_result_without_a_scored_trial():
    d = distribution(trials(("infra_error", 0), ("skipped", 0)))
    assert d.pass_rate is None and d.scored == 0 and d.voided == 1 and d.trials == 2
    assert d.command_min is None and d.command_median is None


def test_counts_and_spread():
    d = distribution(trials(("pass", 2), ("fail", 9), ("pass", 4), ("infra_error", 0)))
    assert (d.trials, d.scored, d.passed, d.failed, d.voided) == (4, 3, 2, 1, 1)
    assert d.pass_rate == 0.667
    assert (d.command_min, d.command_median, d.command_max) == (2, 4, 9)
