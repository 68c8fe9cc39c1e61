"""The Evidence panel over real records: one card per validation, saying what ran and came back."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QTextDocumentFragment
from PySide6.QtWidgets import QLabel, QWidget

from engine.models import Validation
from studio.views.evidence import EvidenceView, Fold, ValidationCard
from studio.widgets import TextBlock


@pytest.fixture
def view(qtbot):
    w = EvidenceView()
    qtbot.addWidget(w)
    w.resize(1100, 700)
    w.show()
    return w


def seen(widget: QWidget) -> str:
    """The text a user reads in a widget: its labels (rich text as shown) and text blocks."""
    parts = []
    for label in widget.findChildren(QLabel):
        parts.append(QTextDocumentFragment.fromHtml(label.text()).toPlainText())
    parts += [block.toPlainText() for block in widget.findChildren(TextBlock)]
    return "\n".join(parts)


def test_writes_greet_has_two_command_cards_and_a_judge_card(view, records):
    view.show_record(records["writes_greet"])
    assert [c.validation.kind for c in view.cards] == ["command", "command", "judge"]
    summary = QTextDocumentFragment.fromHtml(view.summary.text()).toPlainText()
    assert summary == "3 validations · ✓ 3 passed · ✗ 0 failed"

    first = seen(view.cards[0])
    assert "✓" in first and "python3 -c 'from greet import greet" in first
    assert "to_succeed — exited 0" in first and "exit 0" in first
    assert "stdout empty · stderr empty" in first
    assert 'return f"Hello, {name}!"' in view.cards[1].blocks["stdout"].toPlainText()

    judge = view.cards[2]
    assert judge.score_bar.score == pytest.approx(0.9) and judge.score_bar.threshold == 0.5
    assert judge.score_label.text().endswith("0.90</b> vs threshold 0.50")
    text = seen(judge)
    assert "Criterion: greet.py is idiomatic and tested" in text
    assert "Reasoning: Clear and tested." in text
    assert "model judge-stand-in" in text
    # The prompt and the raw response are there, folded until asked for.
    folds = {f.button.text(): f for f in judge.findChildren(Fold)}
    assert set(folds) == {"Prompt (39 lines)", "Raw responses (1)"}
    assert all(not f.content.isVisible() for f in folds.values())
    folds["Raw responses (1)"].button.click()
    assert folds["Raw responses (1)"].content.isVisible()
    assert judge.blocks["raw responses"].toPlainText().startswith("#1 HTTP 200\n{")


def test_a_failed_assertion_and_a_redacted_token_are_seen(view, records):
    view.show_record(records["adds_numbers"])
    failed, passed = view.cards
    assert failed.validation.status == "failed" and passed.validation.status == "passed"
    text = seen(failed)
    assert "✗ to_succeed — exited 1" in text and "exit 1" in text
    assert "AssertionError: -1" in failed.blocks["stderr"].toPlainText()
    summary = QTextDocumentFragment.fromHtml(view.summary.text()).toPlainText()
    assert summary == "2 validations · ✓ 1 passed · ✗ 1 failed"

    stdout = passed.blocks["stdout"]
    assert stdout.toPlainText() == "token=[redacted]"
    assert stdout.badge_spans() == ["[redacted]"]  # drawn as a filled badge
    assert "ghp_" not in seen(view)


def test_a_void_trial_shows_why_and_its_setup_log(view, records):
    view.show_record(records["needs_a_lockfile"])
    assert view.cards == []
    assert "No validations ran; the trial was void: setup step 2" in view.note.text()
    assert view.setup_log is not None
    log = view.setup_log.toPlainText()
    assert log.startswith("$ echo preparing\npreparing\n[exit 0 in")
    assert "$ exit 3\n[exit 3 in" in log
    assert "setup.log" in seen(view.scroll.widget())


def test_check_errors_and_truncation_are_marked(view, records):
    record = records["writes_greet"].model_copy(deep=True)
    long_out = "\n".join(f"line {i}" for i in range(200)) + "\n… [truncated 90,000 chars]"
    traceback = "Traceback (most recent call last):\n  ...\nAssertionError"
    record.validations = [
        Validation(kind="check", name="suite.eval.py:12", status="failed",
                   evidence={"exception": "AssertionError", "message": "expected 5, got -1",
                             "traceback": traceback}),
        Validation(kind="command", name="pytest -q", status="error", truncated=True,
                   evidence={"command": "pytest -q", "stdout": long_out, "stderr": "",
                             "exit_code": None, "error": "timed out after 60s"}),
    ]
    view.show_record(record)
    check, command = view.cards
    assert "AssertionError: expected 5, got -1" in seen(check)
    assert "Traceback" in check.blocks["traceback"].toPlainText()
    text = seen(command)
    assert "truncated" in text and "! timed out after 60s" in text
    stdout = command.blocks["stdout"]
    assert stdout.badge_spans("#c9952b") == ["[truncated 90,000 chars]"]
    # Long output is cut to a few lines until "Show all" is pressed.
    collapsed = stdout.height()
    stdout.parent().toggle.click()
    assert stdout.height() > collapsed * 3
    summary = QTextDocumentFragment.fromHtml(view.summary.text()).toPlainText()
    assert summary == "2 validations · ✓ 0 passed · ✗ 1 failed · ! 1 error"


def test_no_record_is_an_empty_state(view):
    view.show_record(None)
    assert view.cards == [] and "Select a trial" in view.note.text()
    assert view.scroll.widget().findChildren(ValidationCard) == []


def test_agent_text_shows_controls_as_markers_and_drops_colour_codes(view, records):
    record = records["writes_greet"].model_copy(deep=True)
    record.validations = [Validation(
        kind="command", name="ls \u202eevil.txt", status="failed",
        evidence={"command": "ls \u202eevil.txt", "stdout": "\x1b[31mred\x1b[0m and \x1b[1;32mgreen\x1b[m",
                  "stderr": "bell\x07", "exit_code": 2})]
    view.show_record(record)
    [card] = view.cards
    text = seen(card)
    assert "ls ⟨U+202E⟩evil.txt" in text and "\u202e" not in text
    assert card.blocks["stdout"].toPlainText() == "red and green"
    assert card.blocks["stderr"].toPlainText() == "bell⟨U+0007⟩"
    assert card.title.toolTip() == "" and card.title.full_text() == "ls ⟨U+202E⟩evil.txt"
