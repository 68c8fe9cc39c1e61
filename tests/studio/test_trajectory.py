"""The trajectory over real recorded trials: turn headers and items, kind filter,
search, copy, redaction badges, and 10,000 items without a stall."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from engine.models import PhaseSpan, TrajectoryItem, TurnRecord, Validation
from studio.models.trajectory import HEADER, VALIDATION, KindRole, TextRole
from studio.views.trajectory import TrajectoryView, split_redacted


@pytest.fixture
def view(qtbot):
    v = TrajectoryView()
    qtbot.addWidget(v)
    v.resize(1000, 400)
    v.show()
    qtbot.waitExposed(v)
    return v


def shown_kinds(v: TrajectoryView) -> list[str]:
    return [v.proxy.index(r, 0).data(KindRole) for r in range(v.proxy.rowCount())]


def test_rows_are_turn_headers_then_their_items(view, records, qtbot):
    record = records["writes_greet"]
    view.show_record(record)
    expected = []
    for turn in record.turns:
        expected.append(HEADER)
        expected += [i.kind for i in record.trajectory if i.turn == turn.index]
    expected += [VALIDATION] * len(record.validations)  # its checks and judge ran after turn 2
    assert shown_kinds(view) == expected
    first = view.proxy.index(0, 0).data()
    assert first.startswith("Turn 1 · Create greet.py") and "completed" in first
    command = shown_kinds(view).index("command")
    assert view.proxy.index(command, 0).data() == '$ python3 -c "import greet"  → exit 0'
    # a timeline click on turn 2 selects its header and its items
    rows = view.model.rows_for_phase("turn", 2)
    assert [view.model.rows[r].kind for r in rows] == [HEADER, "fileChange", "toolCall", "command", "message"]
    view.select_phase("turn", 2)
    assert sorted(i.row() for i in view.list.selectionModel().selectedIndexes()) == rows
    qtbot.wait(20)
    view.list.clearSelection()
    view.list.setCurrentIndex(view.proxy.index(-1, 0))
    view.grab().save("/tmp/trajectory.png")


def test_kind_filter_hides_commands(view, records):
    view.show_record(records["writes_greet"])
    assert "command" in shown_kinds(view)
    view.chips["command"].click()
    kinds = shown_kinds(view)
    assert "command" not in kinds and kinds.count(HEADER) == 2 and "message" in kinds
    view.chips["command"].click()
    assert "command" in shown_kinds(view)


def test_search_finds_the_redacted_message(view, records, qtbot):
    view.show_record(records["writes_greet"])
    view.search.setFocus()
    qtbot.keyClicks(view.search, "redacted")
    first = view.list.currentIndex()
    assert first.data(KindRole) == "message" and "[redacted]" in first.data(TextRole)
    assert view.match_label.text() == "1/2"
    qtbot.keyClick(view.search, Qt.Key.Key_F3)
    second = view.list.currentIndex()
    assert second.row() > first.row() and second.data(KindRole) == "message"
    assert view.match_label.text() == "2/2"
    qtbot.keyClick(view.search, Qt.Key.Key_F3, Qt.KeyboardModifier.ShiftModifier)
    assert view.list.currentIndex().row() == first.row()
    view.list.setFocus()
    view.focus_search()  # the window's Ctrl+F calls this on the current tab (tests/studio/test_app.py)
    assert view.search.hasFocus()


def test_copy_puts_the_selected_items_text_on_the_clipboard(view, records, qtbot):
    record = records["writes_greet"]
    view.show_record(record)
    view.select_phase("turn", 1)
    view.list.setFocus()
    qtbot.keyClick(view.list, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    text = QGuiApplication.clipboard().text()
    assert text.startswith("Turn 1 · Create greet.py")
    assert 'python3 -c "import greet"\nok' in text
    assert "Turn done. My key is [redacted]." in text and "sk-proj" not in text
    assert "Turn 2" not in text


def test_redacted_marks_are_split_out_for_badges(view, records):
    assert split_redacted("key [redacted] and [redacted]") == [
        ("key ", False), ("[redacted]", True), (" and ", False), ("[redacted]", True)]
    assert split_redacted("no secret here") == [("no secret here", False)]
    message = next(i for i in records["writes_greet"].trajectory if i.kind == "message")
    assert ("[redacted]", True) in split_redacted(message.text)


def test_clicking_a_long_output_unfolds_it(view, records, qtbot):
    record = records["writes_greet"].model_copy(deep=True)
    record.trajectory.append(TrajectoryItem(kind="command", turn=2, command="seq 20", exit_code=3,
                                            output="\n".join(map(str, range(1, 21))), truncated=True))
    view.show_record(record)
    [index] = [view.proxy.index(r, 0) for r in range(view.proxy.rowCount())
               if view.proxy.index(r, 0).data(TextRole).startswith("seq 20")]
    folded = view.list.visualRect(index).height()
    qtbot.mouseClick(view.list.viewport(), Qt.MouseButton.LeftButton, pos=view.list.visualRect(index).center())
    qtbot.waitUntil(lambda: view.list.visualRect(index).height() > folded * 3)
    view.grab().save("/tmp/trajectory-expanded.png")
    qtbot.wait(QApplication.doubleClickInterval() + 50)  # a second click, not a double click
    view.list.scrollTo(index)
    qtbot.mouseClick(view.list.viewport(), Qt.MouseButton.LeftButton,
                     pos=view.list.visualRect(index).topLeft() + QPoint(40, 8))
    qtbot.waitUntil(lambda: view.list.visualRect(index).height() == folded)


def test_live_items_arrive_under_new_turn_headers(view):
    view.model.append_items([TrajectoryItem(kind="message", turn=1, text="hello", role="assistant")])
    view.model.append_items([TrajectoryItem(kind="command", turn=2, command="ls", exit_code=0, output="a")])
    assert shown_kinds(view) == [HEADER, "message", HEADER, "command"]
    view.update_turn(TurnRecord(index=2, prompt="list files", status="completed", ms=900))
    assert view.proxy.index(2, 0).data() == "Turn 2 · list files (completed, 900ms)"


def test_ten_thousand_items_load_and_scroll_to_the_end(view, records, qtbot):
    base = records["writes_greet"]
    items = []
    for n in range(10_000):
        turn = n // 100 + 1
        if n % 3 == 0:
            items.append(TrajectoryItem(kind="command", turn=turn, command=f"pytest -q tests/test_{n}.py",
                                        exit_code=n % 2, output="\n".join(f"line {k}" for k in range(n % 7))))
        elif n % 3 == 1:
            items.append(TrajectoryItem(kind="message", turn=turn, role="assistant",
                                        text=f"Step {n}: token [redacted] rotated."))
        else:
            items.append(TrajectoryItem(kind="fileChange", turn=turn, path=f"src/m{n}.py", change="modify"))
    turns = [TurnRecord(index=t, prompt=f"prompt {t}", status="completed", ms=1000) for t in range(1, 101)]
    record = base.model_copy(update={"trajectory": items, "turns": turns, "validations": []})

    view.show_record(record)
    last = view.proxy.index(view.proxy.rowCount() - 1, 0)

    def at_the_end() -> bool:  # rows are laid out in batches from the event loop
        view.list.scrollToBottom()
        return view.list.viewport().rect().intersects(view.list.visualRect(last))

    # A bound on a hang, not a speed claim: bench/studio.py times the first paint of 10,000 items.
    qtbot.waitUntil(at_the_end, timeout=60_000)
    assert view.proxy.rowCount() == 10_100

    view.search.setText("test_9999.py")
    assert view.list.currentIndex().data(TextRole).startswith("pytest -q tests/test_9999.py")
    view.search.clear()
    view.chips["message"].click()  # hides the 3,333 messages
    assert view.proxy.rowCount() == 10_100 - 3_333


RLO, RED = "\u202e", "\x1b[31m"


def test_agent_text_is_shown_exactly_never_obeyed(view, records):
    """A bidirectional override showed `evil.txt` as `txt.live`; a colour code showed as boxes."""
    record = records["writes_greet"].model_copy(deep=True)
    record.trajectory = [
        TrajectoryItem(kind="message", turn=1, role="assistant", text=f"I saved {RLO}evil.txt for you"),
        TrajectoryItem(kind="command", turn=1, command=f"cat {RLO}evil.txt", exit_code=1,
                       output=f"{RED}error{chr(27)}[0m: no such file\u200b"),
    ]
    view.show_record(record)
    message, command = (view.model.rows[r] for r in range(1, 3))
    assert message.summary == "I saved ⟨U+202E⟩evil.txt for you"
    assert command.title == "cat ⟨U+202E⟩evil.txt"
    assert command.body == "error: no such file⟨U+200B⟩"
    shown = "".join(view.proxy.index(r, 0).data() + view.proxy.index(r, 0).data(TextRole)
                    for r in range(view.proxy.rowCount()))
    assert RLO not in shown and "\x1b" not in shown and "\u200b" not in shown


def test_checks_and_the_judge_are_items_after_the_last_turn_in_the_order_they_ran(view, records, qtbot):
    record = records["writes_greet"]
    view.show_record(record)
    rows = [view.model.rows[r] for r in range(view.model.rowCount())]
    checks = [row for row in rows if row.kind == VALIDATION]
    assert [row.summary for row in checks] == [
        "✓ check 1 · python3 -c 'from greet import greet; assert greet(\"Ada\") == \"Hello, Ada!\"' · passed",
        "✓ check 2 · cat greet.py · passed",
        "✓ judge 1 · greet.py is idiomatic and tested · passed"]
    assert rows[-3:] == checks, "after the last turn's items"
    assert "✓ to_succeed — exited 0" in checks[0].body
    assert checks[2].body.startswith("score 0.90 vs threshold 0.50") and "Clear and tested." in checks[2].body
    # Hiding every kind of item keeps them, as it keeps the turn headers.
    for chip in view.chips.values():
        chip.click()
    assert shown_kinds(view) == [HEADER, HEADER, VALIDATION, VALIDATION, VALIDATION]
    for chip in view.chips.values():
        chip.click()
    # A click on one goes to its Evidence card (the window listens).
    index = view.proxy.index(view.proxy.rowCount() - 1, 0)
    view.list.scrollTo(index)
    with qtbot.waitSignal(view.validation_clicked) as clicked:
        qtbot.mouseClick(view.list.viewport(), Qt.MouseButton.LeftButton, pos=view.list.visualRect(index).center())
    assert clicked.args == ["judge", 1]
    view.grab().save("/tmp/trajectory-checks.png")


def test_a_failed_check_shows_its_status_and_exit_code(view, records):
    record = records["adds_numbers"]
    view.show_record(record)
    assert shown_kinds(view) == [HEADER, "command", VALIDATION, VALIDATION]
    failed = view.model.rows[2]
    assert failed.status == "failed" and failed.exit_code == 1
    assert failed.summary.startswith("✗ check 1 · python3 -c") and failed.summary.endswith(" · failed")
    assert "✗ to_succeed — exited 1" in failed.body


def test_a_check_between_two_turns_sits_between_them(view, records):
    """c.send(); c.exec(...).to_succeed(); c.send(): the check follows turn 1, not turn 2."""
    record = records["writes_greet"].model_copy(update={
        "turns": [TurnRecord(index=n, prompt=f"p{n}", status="completed", ms=10) for n in (1, 2)],
        "trajectory": [TrajectoryItem(kind="message", turn=n, role="assistant", text=f"m{n}") for n in (1, 2)],
        "phases": [PhaseSpan(phase="turn", status="ok", start_ms=0, end_ms=10, index=1),
                   PhaseSpan(phase="check", status="ok", start_ms=20, end_ms=30, index=1),
                   PhaseSpan(phase="turn", status="ok", start_ms=40, end_ms=50, index=2),
                   PhaseSpan(phase="check", status="failed", start_ms=60, end_ms=70, index=2)],
        "validations": [Validation(kind="command", name="true", status="passed", evidence={"exit_code": 0}),
                        Validation(kind="command", name="false", status="failed", evidence={"exit_code": 1}),
                        Validation(kind="check", name="x.eval.py:9", status="error",
                                   evidence={"exception": "KeyError", "message": "'a'"})]})
    view.show_record(record)
    assert [(r.kind, r.turn) for r in view.model.rows] == [
        (HEADER, 1), ("message", 1), (VALIDATION, 1), (HEADER, 2), ("message", 2), (VALIDATION, 2),
        (VALIDATION, 2)]
    assert view.model.rows[-1].summary == "! error in the eval · x.eval.py:9 · error"
    assert view.model.rows[-1].body == "KeyError: 'a'"
    assert view.model.rows_for_phase("turn", 1) == [0, 1], "a turn's items, not the check after it"


def test_clicking_a_check_in_the_window_opens_its_evidence_card(window, recorded, qtbot):
    assert window.browser.select_id(recorded.trials["adds_numbers"])
    qtbot.waitUntil(lambda: window.header.isVisible())
    window.show_view("trajectory")
    view = window.trajectory
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 4)
    index = view.proxy.index(3, 0)  # check 2
    qtbot.mouseClick(view.list.viewport(), Qt.MouseButton.LeftButton, pos=view.list.visualRect(index).center())
    assert window.tabs.currentWidget() is window.evidence
    assert window.evidence.cards[1].validation.name.startswith("echo token=")
