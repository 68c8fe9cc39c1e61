"""`proctor run --min-pass-rate R`: every branch of the rule (engine.reports.gate) on made-up
batches, its mistakes refused in one line, and one real run whose failure the rate forgives."""

from __future__ import annotations

from fractions import Fraction

import pytest

from engine.models import BatchSummary, Failure, RunSummary, TrialSummary, distribution
from engine.reports.gate import parse_rate, pass_rate_status
from tests.engine.test_cli import cli_env, proctor, write_suite


def batch(*runs: list[str | tuple[str, int]]) -> BatchSummary:
    """Runs of trials by outcome; ("infra_error", 1) then ("pass", 1) are attempts 1 and 2 of trial 1."""
    summaries = []
    for r, outcomes in enumerate(runs):
        trials, attempts = [], {}
        for n, outcome in enumerate(outcomes, 1):
            if isinstance(outcome, tuple):
                outcome, n = outcome
            attempts[n] = attempts.get(n, 0) + 1
            failure = Failure(kind="infra" if outcome == "infra_error" else "assertion",
                              reason="x") if outcome in ("fail", "infra_error") else None
            trials.append(TrialSummary(id=f"t_{r}_{n}_{attempts[n]}", trial=n, attempt=attempts[n],
                                       outcome=outcome, failure=failure))
        summaries.append(RunSummary(run_id=f"r_{r}", case_id=f"c{r}", variant="v",
                                    distribution=distribution(trials), trials=trials))
    return BatchSummary(batch_id="b_1", trigger="cli", status="finished", runs=summaries)


@pytest.mark.parametrize("runs, least, status", [
    ([["pass", "pass"]], "1", 0),  # all passed
    ([["pass", "fail"]], "0.5", 0),  # exactly at R
    ([["pass", "fail"]], "0.51", 1),  # just under R
    ([["pass"] * 4 + ["fail"]], "0.8", 0),  # 4 of 5 is 0.8, exactly
    ([["pass", "pass"], ["fail", "pass", "fail"]], "0.6", 0),  # pooled over runs: 3 of 5
    ([["pass", "pass"], ["fail", "pass", "fail"]], "0.61", 1),
    ([["fail"]], "0", 0),  # R = 0 forgives everything scored
    ([["pass", "infra_error", "infra_error"]], "1", 0),  # void trials never count
    ([["pass", "skipped", "skipped"]], "1", 0),  # nor skipped ones
    ([["fail", "infra_error"]], "0.5", 1),  # a void one never lifts the rate
    ([["infra_error", "skipped"]], "0.8", 3),  # nothing scored, a void trial: no fair try
    ([["skipped", "skipped"]], "0.8", 0),  # nothing scored, nothing void
    ([[]], "0.8", 0),  # no trial at all
    ([[("infra_error", 1), ("pass", 1)]], "1", 0),  # a retried void trial counts by its last attempt
    ([[("fail", 1), ("infra_error", 2), ("infra_error", 2)]], "0", 0),
], ids=["all-pass", "at-rate", "under-rate", "four-of-five", "pooled", "pooled-under", "zero",
        "void-ignored", "skipped-ignored", "void-never-lifts", "only-void", "only-skipped", "empty",
        "retried", "retried-void-zero"])
def test_the_exit_status_by_pass_rate(runs, least, status):
    assert pass_rate_status(batch(*runs), parse_rate(least)) == status


def test_a_batch_the_engine_could_not_finish_is_infra_whatever_its_rate():
    """One pass, then the store failed and the rest were skipped: not a 100 % pass rate."""
    failed = batch(["pass", "skipped", "skipped"]).model_copy(update={"status": "failed"})
    assert pass_rate_status(failed, Fraction(1)) == 3
    assert pass_rate_status(failed.model_copy(update={"status": "finished"}), Fraction(1)) == 0


def test_a_float_rate_is_taken_as_written():
    assert pass_rate_status(batch(["pass"] * 4 + ["fail"]), 0.8) == 0  # Fraction(0.8) > 4/5
    assert pass_rate_status(batch(["pass"] * 4 + ["fail"]), 0.81) == 1


@pytest.mark.parametrize("text, value", [("0.8", Fraction(4, 5)), (" 1 ", Fraction(1)), ("0", Fraction(0)),
                                         (".75", Fraction(3, 4)), ("1/3", Fraction(1, 3)),
                                         ("8e-1", Fraction(4, 5))])
def test_rates_read_exactly(text, value):
    assert parse_rate(text) == value


@pytest.mark.parametrize("value, words", [
    ("1.5", "from 0 to 1"), ("-0.1", "from 0 to 1"), ("80%", "a number from 0 to 1"),
    ("nan", "a number"), ("inf", "a number"), ("1/0", "a number"), ("", "a number"),
    ("9" * 5000, "from 0 to 1"),
])
def test_a_rate_out_of_bounds_exits_2_with_one_line(tmp_path, capsys, value, words):
    from engine.cli import main

    store = tmp_path / "proctor.db"
    with pytest.raises(SystemExit) as exited:
        main(["run", str(tmp_path / "nowhere.eval.py"), "--min-pass-rate", value, "--store", str(store)])
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "" and "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and len(errors[0]) < 200, err
    assert "--min-pass-rate" in errors[0] and words in errors[0], errors[0]
    assert not store.exists()


HALF = """
    from engine import evaluation


    @evaluation()
    def passes(c):
        c.send("hi")
        c.exec("true").to_succeed()


    @evaluation()
    def fails(c):
        c.send("hi")
        c.exec("false").to_succeed()
"""


def test_a_real_run_half_passed_meets_half_and_misses_more(docker_client, tmp_path):
    path = write_suite(tmp_path / "suite", HALF)
    store = tmp_path / "proctor.db"
    plain = proctor("run", path, store=store, env=cli_env())
    assert plain.returncode == 1, plain.stderr  # without the option: any failure
    met = proctor("run", path, "--min-pass-rate", "0.5", store=store)
    assert met.returncode == 0, met.stderr
    missed = proctor("run", path, "--min-pass-rate", "0.51", store=store)
    assert missed.returncode == 1, missed.stderr
