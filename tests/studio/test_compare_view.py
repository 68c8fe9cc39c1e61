"""The Compare panel over real records (a pass and a fail) and over trajectories built to part at known steps."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocumentFragment

from engine.models import PhaseSpan, TrajectoryItem, Validation
from studio.models.compare import GUTTER, FirstRole, KindRole, item_summary
from studio.views.compare import CompareView
from tests.trajectories import cmd, record, steps


@pytest.fixture
def view(qtbot):
    w = CompareView()
    qtbot.addWidget(w)
    w.resize(1024, 700)
    w.show()
    qtbot.waitExposed(w)
    return w


def visible(view: CompareView, row: int) -> bool:
    rect = view.table.visualRect(view.model.index(row, 0))
    return rect.isValid() and view.table.viewport().rect().contains(rect)


def plain(label) -> str:
    return QTextDocumentFragment.fromHtml(label.text()).toPlainText()


# --- the recorded pass and fail -----------------------------------------------------------------

def test_pass_against_fail_opens_at_the_first_divergence(view, records):
    a, b = records["writes_greet"], records["adds_numbers"]
    view.show_pair(a, b)
    assert view.current_row() == view.comparison.first_divergence == 0
    assert visible(view, 0)
    # Row 0 pairs A's first file change with B's only command: a changed step, marked in the gutter.
    assert view.model.data(view.model.index(0, 0)).endswith("greet.py (add)")
    assert view.model.data(view.model.index(0, 2)).endswith("$ cat calc.py")
    assert view.model.data(view.model.index(0, GUTTER)) == "◆"
    assert [view.model.data(view.model.index(r, 0), KindRole) for r in range(view.model.rowCount())] \
        == ["changed"] + ["only_a"] * 6
    assert plain(view.a_pill).strip() == "✓ PASS" and plain(view.b_pill).strip() == "✗ FAIL assertion"
    assert "writes_greet #1 · scripted" in view.a_line.full_text()
    # B − A, formatted as people read it.
    assert "commands −1" in view.deltas_label.text() and "input +22,000" in view.deltas_label.text()
    assert view.position_label.text() == "Divergence 1 of 1 (first) · row 1"


def test_the_first_differing_check_is_marked(view, records):
    view.show_pair(records["writes_greet"], records["adds_numbers"])
    assert view.checks.first_difference == 0
    table = view.checks_table
    assert table.item(0, 0).text() == "◆ first difference"
    assert table.item(0, 1).text().startswith("command: python3 -c 'from greet import greet")
    assert (table.item(0, 2).text(), table.item(0, 3).text()) == ("✓ passed", "✗ failed")
    assert table.item(0, 0).font().bold()
    # `cat greet.py` passed on A; B ran `echo token=…` instead: paired by name, so each is one-sided.
    marks = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert marks.count("◆ first difference") == 1
    assert "judge: greet.py is idiomatic and tested" in [table.item(r, 1).text() for r in range(table.rowCount())]
    assert view.checks_note.text().startswith("First difference: command")


def test_the_files_tab_lists_each_turns_sets_and_shows_both_diffs(view, records):
    view.show_pair(records["writes_greet"], records["adds_numbers"])
    files = view.files
    assert files.listed(1, "only_a") == ["greet.py"]
    assert files.listed(1, "only_b") == ["calc.py"]
    assert files.listed(2, "only_a") == ["greet.py", "logo.bin", "test_greet.py"]
    assert files.listed(1, "different") == [] and files.listed(2, "only_b") == []
    # The first file is open: calc.py, which only B created.
    assert files.b_diff.toPlainText().startswith("diff --git a/calc.py b/calc.py")
    assert files.a_diff.toPlainText() == "A did not change calc.py in this turn."
    turn2 = files.tree.topLevelItem(1)
    files.tree.setCurrentItem(turn2.child(2))
    assert "+    assert greet(\"Ada\") == \"Hello, Ada!\"" in files.a_diff.toPlainText()


def test_a_trial_against_itself_has_no_divergence(view, records):
    a = records["writes_greet"]
    view.show_pair(a, a)
    assert view.comparison.first_divergence is None and view.current_row() is None
    assert view.position_label.text() == "The two trajectories match step for step."
    assert not view.next_button.isEnabled() and not view.previous_button.isEnabled()
    assert view.files.empty.text() == "Both trials changed the same files in the same way, turn by turn."
    assert view.checks_note.text() == "Every check and verdict has the same status on both sides."


def test_empty_states_say_what_to_do(view, records):
    assert view.stack.currentIndex() == 0
    assert view.empty.text().startswith("Nothing to compare yet. Select two trials")
    view.show_pair(records["writes_greet"], None)
    assert view.stack.currentIndex() == 0
    assert "Only one trial is selected (writes_greet #1 · scripted)" in view.empty.text()
    view.show_pair(records["writes_greet"], records["adds_numbers"])
    assert view.stack.currentIndex() == 1


# --- built trajectories -------------------------------------------------------------------------

def test_the_highlighted_row_is_exactly_the_changed_step(view):
    a = steps(400)
    b = list(a)
    b[237] = cmd("pytest -q tests/test_236.py -x")
    view.show_pair(record(a), record(b, id="t_b"))
    assert view.current_row() == 237
    assert visible(view, 237) and not visible(view, 0)
    assert view.model.data(view.model.index(237, 0), FirstRole)
    assert view.model.data(view.model.index(237, 2)).strip() == "238  $ pytest -q tests/test_236.py -x"


def test_n_and_p_step_between_divergences(view, qtbot):
    a = steps(300)
    b = a[:40] + [cmd("rm -rf build")] + a[40:150] + a[151:]  # inserted at 40, deleted at 150
    b[260] = cmd("make")  # changed
    view.show_pair(record(a), record(b, id="t_b"))
    divergences = view.comparison.divergences
    assert divergences[0] == 40 and len(divergences) == 3
    assert view.current_row() == 40 and not view.previous_button.isEnabled()
    view.activateWindow()
    view.table.setFocus()
    qtbot.keyClick(view.table, Qt.Key.Key_N)
    assert view.current_row() == divergences[1] and visible(view, divergences[1])
    qtbot.keyClick(view.table, Qt.Key.Key_N)
    assert view.current_row() == divergences[2] and not view.next_button.isEnabled()
    qtbot.keyClick(view.table, Qt.Key.Key_N)  # past the last: stays
    assert view.current_row() == divergences[2]
    qtbot.keyClick(view.table, Qt.Key.Key_P)
    assert view.current_row() == divergences[1]
    view.previous_button.click()
    assert view.current_row() == 40
    assert view.position_label.text() == "Divergence 1 of 3 (first) · row 41"
    # From a row between two divergences, n goes to the next one after it.
    view.table.selectRow(100)
    view.next_button.click()
    assert view.current_row() == divergences[1]


def test_a_row_summary_names_the_step():
    assert item_summary(cmd("ls -la")) == "$ ls -la"
    assert item_summary(TrajectoryItem(kind="command", turn=1, command="false", exit_code=1)) \
        == "$ false  → exit 1"
    assert item_summary(TrajectoryItem(kind="toolCall", turn=1, name="edit", input={"path": "a.py"})) \
        == 'edit {"path": "a.py"}'
    assert item_summary(TrajectoryItem(kind="fileChange", turn=1, path="a.py", change="add")) == "a.py (add)"
    assert item_summary(TrajectoryItem(kind="message", turn=1, role="user", text="hi\nthere")) == "user: hi"
    # Agent text shown as it is, never as it would act: a right-to-left override, a colour code.
    assert item_summary(TrajectoryItem(kind="fileChange", turn=1, path="\u202etxt.exe", change="add")) \
        == "⟨U+202E⟩txt.exe (add)"
    assert item_summary(cmd("\x1b[31mrm -rf /\x1b[0m")) == "$ rm -rf /"


def test_checks_paired_by_name_mark_a_check_only_one_side_ran(view):
    ok = Validation(kind="command", name="pytest", status="passed")
    a = record(steps(4), validations=[ok, Validation(kind="judge", name="tidy", status="passed")])
    b = record(steps(4), id="t_b", validations=[ok])
    view.show_pair(a, b)
    assert view.checks.first_difference == 1
    assert view.checks_table.item(1, 3).text() == "— (not run)"


def test_two_10000_step_trajectories_show_within_a_second(view, qtbot, capsys):
    a = steps(10_000)
    b = list(a)
    for i in range(50, 10_000, 100):  # 100 places
        b[i] = cmd(f"make target_{i}")
    phases = [PhaseSpan(phase="turn", status="ok", start_ms=0, end_ms=1000, index=1)]
    ra, rb = record(a, phases=phases), record(b, id="t_b", phases=phases)
    started = time.perf_counter()
    view.show_pair(ra, rb)
    view.repaint()  # paint now, not on the next event loop turn
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(f"\ncompare: show_pair + paint of two 10,000-step trajectories: {elapsed * 1000:.0f} ms")
    assert view.model.rowCount() == 10_000 and len(view.comparison.divergences) == 100
    assert view.current_row() == 50
    assert elapsed < 3.0  # goal 1 s; a loaded CI machine gets headroom



def test_the_deltas_line_says_the_cost_b_minus_a(view, records):
    """Priced sides show the dollar difference; a side with no price says unknown, never $0."""
    a, b = records["writes_greet"], records["adds_numbers"]
    view.show_pair(a, b)  # the command harness names no model: its tokens have no price
    assert view.deltas_label.text().endswith(" · cost unknown")
    view.show_pair(a.model_copy(update={"cost_usd": 0.5}), b.model_copy(update={"cost_usd": 0.0625}))
    assert view.deltas_label.text().endswith(" · cost −$0.44")
    view.show_pair(a.model_copy(update={"cost_usd": 0.002}), b.model_copy(update={"cost_usd": 0.0052}))
    assert view.deltas_label.text().endswith(" · cost +$0.0032")
