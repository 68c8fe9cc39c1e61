"""engine/portable.py and Store.import_portable: what travels between stores is checked on
the way in, and added all or nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.events import PhaseEnded, PhaseStarted
from engine.models import PhaseSpan, TrialRecord
from engine.portable import Portable, PortableBatch, PortableRun
from engine.store import Store, StoreError


def trial(n: int, outcome: str = "pass", batch: str = "b_far", run: str = "r_far", **kw) -> TrialRecord:
    return TrialRecord(id=f"t_far{n}", batch_id=batch, run_id=run, case_id="greets", variant="v1",
                       trial=n, trigger="cli", outcome=outcome, started_at="2026-11-29T17:00:00.000Z",
                       finished_at="2026-11-29T17:00:03.000Z",
                       phases=[PhaseSpan(phase="image", status="ok", start_ms=0, end_ms=5)], **kw)


def events(n: int, batch: str = "b_far") -> list:
    who = dict(batch_id=batch, trial_id=f"t_far{n}", case_id="greets", variant="v1", trial=n)
    return [PhaseStarted(**who, at=1_000, phase="image", n=1),
            PhaseEnded(**who, at=1_005, phase="image", status="ok", duration_ms=5, n=2)]


def batch(trials: list[TrialRecord], **kw) -> PortableBatch:
    return PortableBatch(id="b_far", trigger="cli", status="finished",
                         started_at="2026-11-29T17:00:00.000Z", finished_at="2026-11-29T17:01:00.000Z",
                         config={"origin": "a test"}, runs=[PortableRun(id="r_far", case_id="greets", variant="v1")],
                         trials=trials, **kw)


def test_an_import_adds_everything_once_and_then_nothing(tmp_path):
    portable = Portable(batches=[batch([trial(1), trial(2, "fail")], events={"t_far1": events(1)})])
    with Store(tmp_path / "s.db") as store:
        first = store.import_portable(portable)
        assert (first.batches_added, first.trials_added, first.trials_same) == (1, 2, 0)
        assert store.get_trial("t_far1") == portable.batches[0].trials[0]
        assert [e.model_dump() for e in store.trial_events("t_far1")] == [e.model_dump() for e in events(1)]
        summary = store.batch_summary("b_far")
        assert summary.status == "finished" and [t.outcome for t in summary.runs[0].trials] == ["pass", "fail"]
        again = store.import_portable(portable)
        assert again.nothing_added and again.trials_same == 2
        assert len(list(store.trial_events("t_far1"))) == 2, "no event twice"


def test_an_id_with_other_content_is_refused_and_nothing_is_added(tmp_path):
    with Store(tmp_path / "s.db") as store:
        store.import_portable(Portable(batches=[batch([trial(1)])]))
        changed = Portable(batches=[batch([trial(1, "fail"), trial(2)])])
        with pytest.raises(StoreError, match="trial t_far1 is already in the store"):
            store.import_portable(changed)
        assert store.get_trial("t_far2") is None, "all or nothing"


@pytest.mark.parametrize("make, words", [
    (lambda: batch([trial(1, batch="b_other")]), "not one of batch b_far"),
    (lambda: batch([trial(1, run="r_other")]), "not one of batch b_far"),
    (lambda: batch([trial(1), trial(1)]), "lists a trial twice"),
    (lambda: batch([trial(1, outcome=None)]), "has not finished"),
    (lambda: batch([trial(1)], events={"t_far9": []}), "does not hold"),
    (lambda: batch([trial(1)], events={"t_far1": events(1, batch="b_victim")}), "another trial or batch"),
])
def test_a_batch_that_does_not_hold_together_is_refused(make, words):
    with pytest.raises(ValidationError, match=words):
        make()


def test_the_same_batch_from_another_file_is_the_same_batch(tmp_path):
    """Its origin names the file it came from; renaming the file changes nothing else."""
    with Store(tmp_path / "s.db") as store:
        store.import_portable(Portable(batches=[batch([trial(1)])]))
        renamed = batch([trial(1)])
        renamed.config["origin"] = "another file"
        assert store.import_portable(Portable(batches=[renamed])).nothing_added
        other = batch([trial(1)])
        other.config["threshold"] = 0.5
        with pytest.raises(StoreError, match="batch b_far is already in the store"):
            store.import_portable(Portable(batches=[other]))
