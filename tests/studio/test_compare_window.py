"""Compare in the window: two trials Ctrl-clicked in the browser then Compare, or
`proctor studio --open ID1,ID2 --view compare`; Esc or a single selection goes back to the tabs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage

from studio.theme import OUTCOME_COLOUR


def click(qtbot, window, trial_id: str, ctrl: bool = False) -> None:
    """Click a trial's row in the browser as a user would (Ctrl held for a second one)."""
    tree, model = window.browser.tree, window.browser.model
    index = model.index_of("trial", trial_id)
    assert index.isValid(), trial_id
    tree.scrollTo(index)
    modifier = Qt.KeyboardModifier.ControlModifier if ctrl else Qt.KeyboardModifier.NoModifier
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, modifier,
                     tree.visualRect(index).center())


def studio(store, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "engine.cli", "studio", "--store", str(store), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_ctrl_click_two_trials_enables_compare_and_opens_the_first_divergence(window, recorded, qtbot):
    a, b = recorded.trials["writes_greet"], recorded.trials["adds_numbers"]
    for trial in (b, a):  # both runs open, so both rows can be clicked
        assert window.browser.select_id(trial)
    click(qtbot, window, a)
    qtbot.waitUntil(lambda: window.selected_trial == a)
    assert not window.compare_action.isEnabled(), "one trial selected: nothing to compare with"
    click(qtbot, window, b, ctrl=True)
    qtbot.waitUntil(window.compare_action.isEnabled)
    assert window.browser.selected_trials() == [a, b]
    sizes = window.splitter.sizes()
    window.compare_action.trigger()
    assert window.pages.currentWidget() is window.compare_page
    compare = window.compare
    assert (compare.a.id, compare.b.id) == (a, b), "the first selected is A"
    assert compare.model.rowCount() > 0
    assert compare.current_row() == compare.comparison.first_divergence is not None
    title = window.compare_page.title.text()
    assert title.startswith("Comparing")
    assert "writes_greet #1" in title and "adds_numbers #1" in title
    # n steps on from the keyboard once the table has focus (it does, on open).
    assert compare.table.hasFocus()
    # Both sides get the room they need from the browser's, which gets it back after.
    assert window.splitter.sizes()[1] >= compare.minimumSizeHint().width()

    qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert window.pages.currentWidget() is window.normal_page
    assert window.splitter.sizes() == sizes
    window.compare_action.trigger()
    assert window.pages.currentWidget() is window.compare_page
    click(qtbot, window, b)  # a single trial again: its tabs, as before
    qtbot.waitUntil(lambda: window.pages.currentWidget() is window.normal_page)
    assert window.selected_trial == b and not window.compare_action.isEnabled()
    assert window.header.title.full_text().startswith("adds_numbers #1")


def test_a_trial_and_a_batch_selected_together_do_not_compare(window, recorded, qtbot):
    a = recorded.trials["writes_greet"]
    assert window.browser.select_id(a)
    batch = window.browser.model.index_of("batch", recorded.batch_id)
    rect = window.browser.tree.visualRect(batch)
    qtbot.mouseClick(window.browser.tree.viewport(), Qt.MouseButton.LeftButton,
                     Qt.KeyboardModifier.ControlModifier, rect.center())
    assert window.browser.selected_trials() == []
    assert not window.compare_action.isEnabled()
    # A Ctrl-click leaves Qt's offscreen keyboard state holding Ctrl: let go of it, as a hand would.
    qtbot.keyRelease(window.browser.tree, Qt.Key.Key_Control)


def test_open_two_ids_with_view_compare_in_the_window(window, recorded):
    from studio.app import open_from_args

    a, b = recorded.trials["adds_numbers"], recorded.trials["writes_greet"]
    assert open_from_args(window, f"{a},{b}", "compare") is None
    assert window.pages.currentWidget() is window.compare_page
    assert (window.compare.a.id, window.compare.b.id) == (a, b)
    assert window.compare.model.rowCount() > 0
    assert window.browser.selected_trials() == [a, b]
    assert window.compare_action.isEnabled()
    assert open_from_args(window, f"{a},t_nope", "compare") == \
        f"no batch or trial t_nope in {window.store.path}"
    assert open_from_args(window, recorded.batch_id + "," + a, "compare").startswith(
        f"{recorded.batch_id} is a batch")


def test_a_compare_screenshot_renders_both_trials(recorded, tmp_path):
    out = tmp_path / "compare.png"
    a, b = recorded.trials["writes_greet"], recorded.trials["adds_numbers"]
    done = studio(recorded.store_path, "--open", f"{a},{b}", "--view", "compare",
                  "--screenshot", str(out), "--size", "1024x700")
    assert done.returncode == 0, done.stderr
    image = QImage(str(out)).convertToFormat(QImage.Format.Format_RGB32)
    assert (image.width(), image.height()) == (1024, 700)
    pixels = np.frombuffer(image.constBits(), np.uint32).reshape(700, -1)[:, 470:] & 0xFFFFFF
    assert len(np.unique(pixels)) > 50, "the compare view is blank"
    fail = QColor(OUTCOME_COLOUR["fail"]).rgb() & 0xFFFFFF
    assert int((pixels == fail).sum()) > 200, "B's FAIL pill is not in the picture"


def test_compare_errors_are_one_line_and_exit_2(recorded, tmp_path):
    a, b = recorded.trials["writes_greet"], recorded.trials["adds_numbers"]
    out = tmp_path / "x.png"
    unknown = studio(recorded.store_path, "--open", f"{a},t_nope", "--view", "compare",
                     "--screenshot", str(out))
    # (Qt's offscreen plugin may say a line of its own before ours.)
    assert unknown.returncode == 2 and unknown.stderr.strip().splitlines()[-1] == \
        f"proctor: no batch or trial t_nope in {recorded.store_path}"
    wrong_view = studio(recorded.store_path, "--open", f"{a},{b}", "--view", "overview",
                        "--screenshot", str(out))
    assert wrong_view.returncode == 2
    assert wrong_view.stderr.strip() == (
        "proctor: two ids (--open ID1,ID2) open the compare view only: add --view compare")
    one = studio(recorded.store_path, "--open", a, "--view", "compare", "--screenshot", str(out))
    assert one.returncode == 2
    assert one.stderr.strip() == "proctor: the compare view needs two trial ids: --open ID1,ID2"
    assert not out.exists()


# --- a pass and a fail of the same case, made now in Docker --------------------------------------

SAME_CASE_AGENT = r"""
say() { printf '%s\n' "$1"; }
if [ "$PROCTOR_TURN" = 1 ]; then
  say '{"type":"command","command":"cat calc.py","exitCode":0,"output":"return a - b"}'
  if [ "$1" = careful ]; then
    sed -i 's/a - b/a + b/' calc.py
    say '{"type":"fileChange","path":"calc.py","change":"modify"}'
  else
    say '{"type":"message","role":"assistant","text":"calc.py looks right to me."}'
  fi
else
  printf 'from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n' > test_calc.py
  say '{"type":"fileChange","path":"test_calc.py","change":"add"}'
fi
say '{"type":"finished","reason":"done"}'
"""

SAME_CASE_EVAL = """
from pathlib import Path
from engine import evaluation, git

@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh"), "calc.py": Path("calc.py")})
def fixes_add(c):
    c.send("calc.py's add subtracts: fix it.")
    c.send("Now add a test.")
    c.exec("test -f test_calc.py").to_succeed()
    c.exec("python3 -c 'from calc import add; assert add(2, 3) == 5, add(2, 3)'").to_succeed()
"""

SAME_CASE_TOML = """
[defaults]
image = "proctor-test-base:bookworm"
timeout = "2m"
concurrency = 2

[[variants]]
name = "careful"
harness = "command"
command = "sh /workspace/.agent/run.sh careful"

[[variants]]
name = "hasty"
harness = "command"
command = "sh /workspace/.agent/run.sh hasty"
"""


def test_a_real_pass_and_fail_of_one_case_diverge_at_the_turn_and_check_that_differ(
        suite, run_eval, store, make_window, qtbot):
    """Two agents at one task, recorded in Docker: the careful one fixes calc.py in turn 1,
    the hasty one says it looks right. Compare opens on that step, turn 1, and marks the
    add check (the second) as the first that differs; the test file both wrote is no difference."""
    path = suite(SAME_CASE_EVAL, SAME_CASE_TOML,
                 {"agent.sh": SAME_CASE_AGENT, "calc.py": "def add(a, b):\n    return a - b\n"})
    summary, _events, records = run_eval(path)
    by_variant = {r.variant: r.trials[0].id for r in summary.runs}
    passed, failed = records[by_variant["careful"]], records[by_variant["hasty"]]
    assert (passed.outcome, failed.outcome) == ("pass", "fail")
    store.flush()

    window = make_window(store.path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    for trial in (failed, passed):  # each one's run opened in the tree
        assert window.browser.select_id(trial.id)
    click(qtbot, window, passed.id)
    click(qtbot, window, failed.id, ctrl=True)
    qtbot.waitUntil(window.compare_action.isEnabled)
    window.compare_action.trigger()
    compare = window.compare
    assert (compare.a.id, compare.b.id) == (passed.id, failed.id)

    comparison = compare.comparison
    first = comparison.rows[comparison.first_divergence]
    assert comparison.first_divergence == 1 and compare.current_row() == 1, "after the shared `cat calc.py`"
    a_item, b_item = passed.trajectory[first.a], failed.trajectory[first.b]
    assert (a_item.kind, a_item.path, a_item.turn) == ("fileChange", "calc.py", 1)
    assert (b_item.kind, b_item.role, b_item.turn) == ("message", "assistant", 1)
    assert comparison.divergences == [1], "turn 2 is the same on both sides"

    checks = compare.checks
    assert checks.first_difference == 1
    pair = checks.pairs[1]
    assert (pair.a.status, pair.b.status) == ("passed", "failed") and "add(2, 3)" in pair.a.name
    assert compare.checks_table.item(1, 0).text() == "◆ first difference"

    assert compare.files.listed(1, "only_a") == ["calc.py"]
    assert compare.files.listed(2, "different") == [], "both wrote the same test_calc.py"
