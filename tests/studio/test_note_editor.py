"""The note editor (issue 17): a label and a short text on a trial or a failure group, saved as
they are edited, read back by a new editor and by the browser, refused visibly past their
bounds; shown on a trial's Overview. Over a copy of the recorded batch (real trials)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from PySide6.QtCore import Qt

from engine.models import NOTE_LABEL_MAX, NOTE_TEXT_MAX, Note
from engine.store import Store
from studio.views.note import NoteEditor
from tests.engine.test_bundle import ADDS, GREET, RECORDED

AT = "2026-12-01T06:00:00.000Z"


@pytest.fixture
def store(tmp_path):
    shutil.copy(RECORDED, tmp_path / "proctor.db")
    with Store(tmp_path / "proctor.db") as s:
        yield s


def editor(qtbot, store, target: str) -> NoteEditor:
    e = NoteEditor(store, target, debounce_ms=50)
    qtbot.addWidget(e)
    e.show()
    return e


def test_an_edit_is_saved_and_a_new_editor_reads_it_back(qtbot, store):
    store.set_note(Note(target=ADDS, label="env problem", updated_at=AT)).result()
    first = editor(qtbot, store, GREET)
    assert [first.label.itemText(i) for i in range(first.label.count())] == ["", "env problem"]
    first.label.setEditText("agent gave up")
    first.text.setPlainText("It stopped after the first failing test.")
    with qtbot.waitSignal(first.saved, timeout=5000):
        pass
    assert first.status.text().startswith("Saved")
    note = store.notes([GREET])[GREET]
    assert (note.label, note.text) == ("agent gave up", "It stopped after the first failing test.")
    again = editor(qtbot, store, GREET)
    assert again.label.currentText() == "agent gave up"
    assert again.text.toPlainText() == "It stopped after the first failing test."
    assert again.status.text().startswith("Saved")


def test_clearing_both_takes_the_note_away(qtbot, store):
    store.set_note(Note(target=GREET, label="flaky", text="again", updated_at=AT)).result()
    e = editor(qtbot, store, GREET)
    e.label.setEditText("")
    e.text.setPlainText("")
    with qtbot.waitSignal(e.saved, timeout=5000) as saved:
        pass
    assert saved.args == [None] and store.notes() == {}


def test_a_group_takes_a_note_too(qtbot, store):
    e = editor(qtbot, store, "group:abc123")
    e.label.setEditText("env problem")
    e.flush()  # leaving it before the pause still saves
    qtbot.waitUntil(lambda: "group:abc123" in store.notes(), timeout=5000)
    assert store.labels() == {"env problem": 1}


@pytest.mark.parametrize("field, size, words", [
    ("label", NOTE_LABEL_MAX + 7, "The label is 47 characters; at most 40 — shorten it to save."),
    ("text", NOTE_TEXT_MAX + 13,
     "The note is 2,013 characters; at most 2,000 — shorten it to save."),
])
def test_past_its_bounds_it_is_refused_visibly(qtbot, store, field, size, words):
    e = editor(qtbot, store, GREET)
    if field == "label":
        e.label.setEditText("l" * size)
    else:
        e.text.setPlainText("t" * size)
    e.flush()
    qtbot.wait(200)
    assert e.status.text() == words and e.refused
    assert store.notes() == {}, "nothing past the bounds is stored, not even cut"
    if field == "label":
        e.label.setEditText("short")
    else:
        e.text.setPlainText("short")
    with qtbot.waitSignal(e.saved, timeout=5000):
        pass
    assert not e.refused and GREET in store.notes()


def test_a_secret_typed_into_a_note_is_stored_redacted(qtbot, store):
    secret = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    e = editor(qtbot, store, GREET)
    e.text.setPlainText(f"the agent printed {secret}")
    with qtbot.waitSignal(e.saved, timeout=5000):
        pass
    assert secret not in store.notes()[GREET].text


def test_the_overview_of_a_trial_holds_its_note(qtbot, make_window, recorded, tmp_path):
    """In the real window: the trial's Overview shows the editor near its outcome, an edit is
    stored, and the browser's label filter then finds the trial and shows its label."""
    own = tmp_path / "own.db"  # the session's recorded store stays without notes
    with sqlite3.connect(recorded.store_path) as source, sqlite3.connect(own) as copy:
        source.backup(copy)
    window = make_window(own)
    window.resize(1400, 860)
    qtbot.waitExposed(window)
    trial_id = recorded.trials["adds_numbers"]
    window.open_trial(trial_id)
    window.show_view("overview")
    note = window.overview.note
    assert note is not None and note.target == trial_id and note.isVisible()
    note.label.setEditText("env problem")
    note.text.setPlainText("calc.py subtracts")
    with qtbot.waitSignal(note.saved, timeout=5000):
        pass
    browser = window.browser
    qtbot.waitUntil(lambda: browser.label.findData("env problem") > 0, timeout=3000)
    assert browser.select_id(trial_id)  # its row shows the label without a reload
    qtbot.waitUntil(lambda: browser.tree.currentIndex().siblingAtColumn(0).data()
                    == "#1 · env problem", timeout=3000)
    browser.label.setCurrentIndex(browser.label.findData("env problem"))
    qtbot.waitUntil(lambda: browser.model.filter.labels == frozenset({"env problem"}), timeout=3000)
    assert browser.model.batch_count == 1
    assert browser.select_id(trial_id)
    row = browser.tree.currentIndex().siblingAtColumn(0)
    assert row.data() == "#1 · env problem"
    assert "label: env problem" in row.data(Qt.ItemDataRole.ToolTipRole)
