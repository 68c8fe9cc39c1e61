"""The Run dialog over real eval files: what it says matches the file it read, the cases and
variants to run are chosen in it, trials and concurrency start from the file's own settings,
and Browse can pick a folder (an eval folder is a valid PATH for `proctor run`)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from engine.batch import MAX_RETRY_VOID
from engine.spec import MAX_TRIALS
from studio.views.run import RunDialog
from tests.conftest import DEFAULT_TOML

EVAL = """
from engine import evaluation

@evaluation(trials=3)
def first(c):
    c.send("one")

@evaluation(trials=3)
def second(c):
    c.send("two")

@evaluation(trials=3)
def third(c):
    c.send("three")
"""

TWO_VARIANTS = DEFAULT_TOML + """
[[variants]]
name = "other"
harness = "command"
command = "true"
"""


@pytest.fixture
def dialog(qtbot):
    def make(path) -> RunDialog:
        d = RunDialog(None, str(path))
        qtbot.addWidget(d)
        return d
    return make


def checked(listing) -> list[str]:
    items = (listing.item(i) for i in range(listing.count()))
    return [i.data(Qt.ItemDataRole.UserRole) for i in items if i.checkState() == Qt.CheckState.Checked]


def uncheck(listing, name: str) -> None:
    for i in range(listing.count()):
        if listing.item(i).data(Qt.ItemDataRole.UserRole) == name:
            listing.item(i).setCheckState(Qt.CheckState.Unchecked)


def test_an_error_replaces_the_line_of_the_file_before(suite, dialog, tmp_path):
    d = dialog(suite(EVAL))
    assert d.summary.text().startswith("3 cases") and d.error.text() == ""
    broken = tmp_path / "broken.eval.py"
    broken.write_text("from engine import evaluation\n\n@evaluation(trials=0)\ndef bad(c):\n    pass\n")
    d.path.setText(str(broken))
    d.path.editingFinished.emit()
    assert "broken.eval.py:3" in d.error.text()
    assert d.summary.text() == "" and d.cases.count() == 0 and d.variants.count() == 0
    assert not d.run_button.isEnabled()


def test_the_cases_and_variants_to_run_are_chosen_in_the_dialog(suite, dialog):
    d = dialog(suite(EVAL, TWO_VARIANTS))
    assert checked(d.cases) == ["first", "second", "third"]
    assert checked(d.variants) == ["scripted", "other"]
    uncheck(d.cases, "second")
    uncheck(d.variants, "other")
    assert d.summary.text() == "2 of 3 cases · 1 of 2 variants · 2 runs · 6 trials"
    d.run_button.click()
    assert d.result() == RunDialog.DialogCode.Accepted
    assert [c.id for c in d.plan.cases] == ["first", "third"]
    assert [v.name for v in d.plan.variants] == ["scripted"]


def test_nothing_chosen_is_one_sentence_not_a_batch(suite, dialog):
    d = dialog(suite(EVAL))
    for case in ("first", "second", "third"):
        uncheck(d.cases, case)
    assert not d.run_button.isEnabled()
    d._accept()
    assert d.plan is None and d.error.text() == "Choose at least one case."


def test_trials_and_concurrency_start_from_the_files_settings(suite, dialog):
    d = dialog(suite(EVAL, DEFAULT_TOML.replace("concurrency = 2", "concurrency = 3")))
    assert d.trials.value() == 3 and d.concurrency.value() == 3
    assert "eval file" in d.trials_note.text() and "proctor.toml" in d.concurrency_note.text()
    d.run_button.click()
    # As the files say: the plan overrides nothing.
    assert d.plan.trials is None and d.plan.concurrency is None


def test_trials_go_up_to_the_engines_cap_and_say_why(suite, dialog):
    d = dialog(suite(EVAL))
    assert d.trials.maximum() == MAX_TRIALS == 10_000
    assert "store" in d.trials.toolTip()
    d.trials.setValue(250)
    d.concurrency.setValue(8)
    d.run_button.click()
    assert d.plan.trials == 250 and d.plan.concurrency == 8


def test_cases_with_their_own_trials_keep_them_unless_one_number_is_set(suite, dialog):
    d = dialog(suite(EVAL.replace("@evaluation(trials=3)\ndef third", "@evaluation()\ndef third")))
    assert d.trials.value() == d.trials.minimum() and d.trials.text() == "each case's own (1–3)"
    assert d.summary.text() == "3 cases · 1 variant · 3 runs · 7 trials"
    d.run_button.click()
    assert d.plan.trials is None


def test_browse_can_pick_a_folder(suite, dialog, monkeypatch):
    folder = suite(EVAL).parent
    d = dialog("")
    assert d.cases.count() == 0
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    d.browse_folder.click()
    assert d.path.text() == str(folder)
    assert checked(d.cases) == ["first", "second", "third"] and d.error.text() == ""
    d.run_button.click()
    assert len(d.plan.cases) == 3


def test_a_file_that_does_not_load_keeps_its_error_when_run_is_pressed(dialog, tmp_path):
    d = dialog(tmp_path / "missing.eval.py")
    assert "no such file or folder" in d.error.text()
    d._accept()
    assert d.plan is None and "no such file or folder" in d.error.text()


def test_void_trials_are_retried_only_when_asked(suite, dialog):
    d = dialog(suite(EVAL))
    assert d.retry_void.value() == 0
    d.run_button.click()
    assert d.plan.retry_void == 0  # as `proctor run` without --retry-void
    d = dialog(suite(EVAL))
    d.retry_void.setValue(2)
    d.run_button.click()
    assert d.plan.retry_void == 2
    assert d.retry_void.maximum() == MAX_RETRY_VOID
