"""Notes and labels on trials and failure groups (issue 17): stored, replaced, taken away,
bounded, and added to a store written before they existed."""

from __future__ import annotations

import sqlite3

import pytest
from pydantic import ValidationError

from engine.models import NOTE_TEXT_MAX, Note
from engine.store import SCHEMA_VERSION, Store

AT = "2026-12-01T06:00:00.000Z"


def test_a_note_is_stored_replaced_and_taken_away(tmp_path):
    store = Store(tmp_path / "proctor.db")
    try:
        store.set_note(Note(target="t_1", label="env problem", text="pip had no network", updated_at=AT)).result()
        store.set_note(Note(target="group:abc", label="agent gave up", updated_at=AT)).result()
        store.set_note(Note(target="t_2", label="env problem", updated_at=AT)).result()
        assert store.notes(["t_1"])["t_1"].text == "pip had no network"
        assert store.labels() == {"env problem": 2, "agent gave up": 1}
        store.set_note(Note(target="t_1", label="flaky", text="again", updated_at=AT)).result()
        assert store.notes()["t_1"].label == "flaky" and store.notes()["t_1"].text == "again"
        store.set_note(Note(target="t_1", label=" ", text="  ", updated_at=AT)).result()
        assert "t_1" not in store.notes()
    finally:
        store.close()


@pytest.mark.parametrize("fields", [
    {"target": ""}, {"target": "t" * 201}, {"text": "x" * (NOTE_TEXT_MAX + 1)}, {"label": "l" * 41},
    {"label": 7}, {"extra": "no"},
])
def test_a_note_out_of_bounds_is_refused(fields):
    with pytest.raises(ValidationError):
        Note(**{"target": "t_1", "updated_at": AT, **fields})


def test_a_label_is_one_line():
    assert Note(target="t", label="  env\n  problem ", updated_at=AT).label == "env problem"


def test_a_store_from_before_notes_gets_them(tmp_path):
    path = tmp_path / "proctor.db"
    Store(path).close()
    with sqlite3.connect(path) as db:  # as schema 2 left it
        db.execute("DROP TABLE note")
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    store = Store(path)
    try:
        store.set_note(Note(target="t_1", label="env problem", updated_at=AT)).result()
        assert store.labels() == {"env problem": 1}
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)


@pytest.mark.parametrize("how", ["trials", "batches"])
def test_a_deleted_trial_takes_its_note_with_it(tmp_path, how):
    """A note is keyed by its target, not by a trial column: deletes name it themselves."""
    from engine.models import TrialRecord

    store = Store(tmp_path / "proctor.db")
    try:
        store.create_batch("b_1", "cli", "me", AT)
        store.create_run("r_1", "b_1", "c", "v", 0)
        for trial_id in ("t_gone", "t_kept"):
            store.save_trial(TrialRecord(id=trial_id, batch_id="b_1", run_id="r_1", case_id="c", variant="v",
                                         trial=1, trigger="cli", outcome="fail")).result()
            store.set_note(Note(target=trial_id, label="env problem", updated_at=AT)).result()
        store.set_note(Note(target="group:abc", label="flaky", updated_at=AT)).result()
        store.finish_batch("b_1", "finished", AT)
        if how == "trials":
            assert store.delete_trials(["t_gone"]) == 1
            assert set(store.notes()) == {"t_kept", "group:abc"}
        else:
            assert store.delete_batches(["b_1"]) == 1
            assert set(store.notes()) == {"group:abc"}  # a group's note is its own
    finally:
        store.close()
