"""engine/text.py: durations and counts as people read them."""

from __future__ import annotations

import pytest

from engine.text import fmt_ms, plural


@pytest.mark.parametrize("ms, shown", [
    (None, "—"), (0, "0ms"), (33, "33ms"), (4_100, "4.1s"), (41_000, "41s"), (125_000, "2m05s"),
    (3_720_000, "1h02m"),
    # The wait for a slot lies before the trial's start (issue 11): it read "-5360ms".
    (-5_360, "−5.4s"), (-40, "−40ms"),
])
def test_fmt_ms(ms, shown):
    assert fmt_ms(ms) == shown


def test_plural():
    assert (plural(1, "sandbox"), plural(2, "trial")) == ("1 sandbox", "2 trials")
