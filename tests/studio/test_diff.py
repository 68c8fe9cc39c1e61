"""The Diff panel over real records: files, counts, turns, split alignment, and 20 MB diffs."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor

from engine.models import TrialRecord, TurnRecord
from studio.models.diff import parse_diff, split_rows
from studio.views.diff import DiffColours, DiffEdit, DiffView


@pytest.fixture
def view(qtbot):
    w = DiffView()
    qtbot.addWidget(w)
    w.resize(1100, 700)
    w.show()
    return w


def file_labels(view: DiffView) -> list[str]:
    model = view.file_model
    return [model.data(model.index(row)) for row in range(model.rowCount())]


def lines(edit: DiffEdit) -> list[str]:
    return edit.toPlainText().split("\n")


def row_colour(edit: DiffEdit, row: int) -> str:
    """The background a user sees at the right end of a row (past its text)."""
    block = edit.document().findBlockByNumber(row)
    y = int(edit.blockBoundingGeometry(block).translated(edit.contentOffset()).center().y())
    image = edit.viewport().grab().toImage()
    return image.pixelColor(edit.viewport().width() - 5, y).name()


def with_diff(record: TrialRecord, diff: str) -> TrialRecord:
    turn = TurnRecord(index=1, prompt="change it", status="completed", ms=1, diff=diff,
                      cumulative_diff=diff)
    return record.model_copy(update={"turns": [turn]})


def test_cumulative_diff_lists_every_file_with_counts_and_binary_files_unrendered(view, records):
    view.show_record(records["writes_greet"])
    assert [view.turn_combo.itemText(i) for i in range(view.turn_combo.count())] == [
        "Cumulative", "Turn 1", "Turn 2"]
    assert file_labels(view) == ["greet.py  +3 −0", "logo.bin  binary", "test_greet.py  +4 −0"]
    assert "3 files changed" in view.summary.text()

    # The first file is shown: its hunk, + rows on green, the hunk header on blue.
    assert view.current_file.path == "greet.py"
    assert lines(view.unified) == ["@@ -0,0 +1,3 @@", "+def greet(name):", "+    # Greet someone.",
                                   '+    return f"Hello, {name}!"']
    colours = DiffColours.current()
    assert row_colour(view.unified, 1) == QColor(colours.add_bg).name()
    assert row_colour(view.unified, 0) == QColor(colours.hunk_bg).name()
    assert view.unified.numbers[1:] == [(None, 1), (None, 2), (None, 3)]

    view.select_file("logo.bin")
    assert view.pages.currentWidget() is view.message
    assert view.message.text().startswith("Binary file — not shown")
    assert view.unified.toPlainText() == ""  # named, never rendered


def test_a_one_turn_trial_shows_its_turns_diff_as_the_whole_change(view, records):
    record = records["adds_numbers"]
    assert record.turns[0].cumulative_diff == ""  # the engine stores the diff once, as the turn's
    view.show_record(record)
    assert view.turn_combo.currentText() == "Cumulative"
    assert file_labels(view) == ["calc.py  +2 −0"]
    assert lines(view.unified) == ["@@ -0,0 +1,2 @@", "+def add(a, b):", "+    return a - b"]


def test_the_cumulative_view_when_no_turn_keeps_a_cumulative_diff(view, records):
    greet = records["writes_greet"]
    first, second = greet.turns[0].diff, greet.turns[1].diff
    # Only the second turn changed anything: its diff is the whole change.
    view.show_record(greet.model_copy(update={"turns": [
        greet.turns[0].model_copy(update={"diff": "", "cumulative_diff": ""}),
        greet.turns[1].model_copy(update={"cumulative_diff": ""})]}))
    assert file_labels(view) == ["greet.py  +2 −1", "logo.bin  binary", "test_greet.py  +4 −0"]
    # Two turns changed files and none keeps a cumulative diff: their changes undid each other.
    view.show_record(greet.model_copy(update={"turns": [
        t.model_copy(update={"cumulative_diff": ""}) for t in greet.turns]}))
    assert first and second and view.files == []
    assert view.message.text() == "The agent changed no files."


def test_each_turn_has_its_own_diff(view, records):
    view.show_record(records["writes_greet"])
    view.set_turn(1)
    assert file_labels(view) == ["greet.py  +2 −0"]
    view.set_turn(2)
    assert file_labels(view) == ["greet.py  +2 −1", "logo.bin  binary", "test_greet.py  +4 −0"]
    assert lines(view.unified) == ["@@ -1,2 +1,3 @@", " def greet(name):",
                                   '-    return "Hi " + name', "+    # Greet someone.",
                                   '+    return f"Hello, {name}!"']
    colours = DiffColours.current()
    assert row_colour(view.unified, 2) == QColor(colours.delete_bg).name()
    assert view.unified.numbers == [(None, None), (1, 1), (2, None), (None, 2), (None, 3)]


def test_split_view_aligns_old_and_new_row_for_row(view, records):
    view.show_record(records["writes_greet"])
    view.set_turn(2)
    view.set_mode("split")
    assert view.pages.currentWidget() is view.split
    assert lines(view.old_edit) == ["@@ -1,2 +1,3 @@", "def greet(name):",
                                    '    return "Hi " + name', ""]
    assert lines(view.new_edit) == ["@@ -1,2 +1,3 @@", "def greet(name):", "    # Greet someone.",
                                    '    return f"Hello, {name}!"']
    assert view.old_edit.kinds == ["hunk", "context", "delete", "filler"]
    assert view.new_edit.kinds == ["hunk", "context", "add", "add"]
    assert [n for (n,) in view.old_edit.numbers] == [None, 1, 2, None]
    assert [n for (n,) in view.new_edit.numbers] == [None, 1, 2, 3]


def test_split_panes_scroll_together(view, records):
    old = "".join(f"line {i}\n" for i in range(300))
    new = "".join(f"line {i}\n" if i % 7 else f"changed {i}\nadded {i}\n" for i in range(300))
    body = ("".join(f"-{x}\n" for x in old.splitlines())
            + "".join(f"+{x}\n" for x in new.splitlines()))
    diff = ("diff --git a/long.txt b/long.txt\n--- a/long.txt\n+++ b/long.txt\n"
            f"@@ -1,300 +1,343 @@\n{body}")
    view.show_record(with_diff(records["writes_greet"], diff))
    view.set_mode("split")
    assert view.old_edit.blockCount() == view.new_edit.blockCount() == 344
    view.new_edit.verticalScrollBar().setValue(120)
    assert view.old_edit.verticalScrollBar().value() == 120
    view.old_edit.verticalScrollBar().setValue(40)
    assert view.new_edit.verticalScrollBar().value() == 40
    top = [edit.firstVisibleBlock().blockNumber() for edit in (view.old_edit, view.new_edit)]
    assert top[0] == top[1]


def test_split_rows_pair_removals_with_the_additions_after_them():
    rows = split_rows("@@ -1,4 +1,3 @@\n a\n-b\n-c\n+B\n d\n+e\n\\ No newline at end of file\n")
    assert rows == [("@@ -1,4 +1,3 @@", "@@ -1,4 +1,3 @@", "hunk"), ("a", "a", "context"),
                    ("b", "B", "change"), ("c", None, "delete"), ("d", "d", "context"),
                    (None, "e", "add"),
                    ("\\ No newline at end of file", "\\ No newline at end of file", "meta")]


def big_diff(size: int = 20_000_000) -> str:
    """A 1.2 MB first file, then 10 KB files up to `size`, and a binary file among them."""
    first = "".join(f"+print('line {i}')  # {'x' * 20}\n" for i in range(30_000))
    big = "diff --git a/big.py b/big.py\nnew file mode 100644\n--- /dev/null\n+++ b/big.py\n"
    parts = [big + f"@@ -0,0 +1,30000 @@\n{first}",
             "diff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\n"]
    hunk = "".join(f" keep {j}\n-old {j}\n+new {j} [redacted]\n" for j in range(120))
    total, i = sum(map(len, parts)), 0
    while total < size:
        name = f"src/m{i}.py"
        part = (f"diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n"
                f"@@ -1,240 +1,240 @@\n{hunk}")
        parts.append(part)
        total += len(part)
        i += 1
    return "".join(parts)


def test_a_20_mb_diff_parses_and_shows_its_first_file(view, records):
    # How fast: bench/studio.py's first paint of a trial with a 20 MB diff (goal 0.5 s).
    text = big_diff()
    files = parse_diff(text)
    view.show_record(with_diff(records["writes_greet"], text))
    assert len(files) == len(view.files) > 1000
    assert files[1].binary and files[2].added == files[2].removed == 120

    # The big first file shows its first 2,000 lines, and everything on request.
    assert view.current_file.path == "big.py"
    assert not view.large_bar.isHidden()
    assert "first 2,000 of 30,001 lines" in view.large_label.text()
    assert view.unified.blockCount() == 2000
    view.show_all_button.click()
    assert view.unified.blockCount() == 30_001
    assert view.large_bar.isHidden()

    # Another file, chosen from the list, renders alone, with its [redacted] marks as badges.
    view.select_file("src/m3.py")
    assert view.unified.blockCount() == 361
    block = view.unified.document().findBlockByNumber(3)
    assert block.text() == "+new 0 [redacted]"
    badge = [r for r in block.layout().formats() if r.start == 7]
    assert badge and badge[0].format.background().color().name() == QColor("#b3261e").name()


def test_empty_states(view, records):
    view.show_record(None)
    assert view.outer.currentWidget() is view.empty
    assert "Select a trial" in view.empty.text()
    view.show_record(records["needs_a_lockfile"])
    assert "No turns ran" in view.empty.text()
    view.show_record(records["sleeps"])  # its one turn was aborted before it changed anything
    assert view.files == []
    assert view.message.text() == "The agent changed no files."
