"""The recorded batch the studio tests share holds what they expect."""


def test_the_recorded_batch_has_every_kind_of_trial(records):
    assert records["writes_greet"].outcome == "pass"
    assert records["adds_numbers"].outcome == "fail"
    assert records["needs_a_lockfile"].outcome == "infra_error"
    assert records["sleeps"].failure.kind == "timeout"
    greet = records["writes_greet"]
    assert len(greet.turns) == 2 and "Binary files" in greet.turns[1].diff
    assert "[redacted]" in greet.trajectory[-1].text
    assert greet.validations[-1].kind == "judge" and greet.validations[-1].status == "passed"
