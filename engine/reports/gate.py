"""`--min-pass-rate R`: the exit status by the batch's pass rate instead of "any failure".

The rate is passes / (passes + fails) over every run's trials, each by its last attempt;
void (infra_error) and skipped trials never count. At R or above: 0, below: 1. With no
scored trial there is no rate to hold against R: 3 when a trial was void (the engine could
not give the agent a fair try), else 0. A batch the engine could not finish (status
`failed`: the store or a Docker host went away) is 3 whatever its rate: the trials it never
ran would otherwise count as if they were not asked for. The rate and R are compared exactly (R is read as
a decimal fraction), so 4 passes of 5 meet 0.8.
"""

from __future__ import annotations

from fractions import Fraction

from ..models import BatchSummary
from . import last_attempts

EXIT_OK, EXIT_FAIL, EXIT_INFRA = 0, 1, 3


def parse_rate(text: str) -> Fraction:
    """`--min-pass-rate`'s value, a number from 0 to 1 ('0.8', '1', '.75'), read exactly;
    otherwise ValueError saying what it must be."""
    try:
        rate = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"must be a number from 0 to 1 such as 0.8, not {text[:40]!r}") from None
    if not 0 <= rate <= 1:
        raise ValueError(f"must be from 0 to 1 (a fraction of the scored trials), "
                         f"not {text[:40]!r}")
    return rate


def pass_rate_status(summary: BatchSummary, least: Fraction | float) -> int:
    """The exit status of a batch under `--min-pass-rate least` (see the module's rule)."""
    if summary.status == "failed":
        return EXIT_INFRA
    outcomes = [t.outcome for run in summary.runs for t in last_attempts(run)]
    passed, failed = outcomes.count("pass"), outcomes.count("fail")
    if passed + failed == 0:
        return EXIT_INFRA if "infra_error" in outcomes else EXIT_OK
    if isinstance(least, float):  # as written: Fraction(0.8) is a hair above 4/5
        least = Fraction(repr(least))
    return EXIT_OK if Fraction(passed, passed + failed) >= least else EXIT_FAIL
