"""The trajectory over real recorded trials: turn headers and items, kind filter,
search, copy, redaction badges, and 10,000 items without a stall."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from engine.models import TrajectoryItem, TurnRecord
from studio.models.trajectory import HEADER, KindRole, TextRole
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
    index = view.proxy.index(view.proxy.rowCount() - 1, 0)
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
    record = base.model_copy(update={"trajectory": items, "turns": turns})

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
