"""The run grid: a batch's cases × variants as a user reads them, clicks them and asks for a
compare. Over the real recorded batch, and over a synthetic batch with hand-worked figures
(tests/engine/test_browse.py's `grid_batch`)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QColor

from engine.store import Store
from engine.store.browse import run_grid
from engine.text import fmt_ms
from studio import theme
from studio.models.grid import CellRole
from studio.views.grid import EMPTY_TEXT, PICK_TEXT, RunGrid

from tests.engine.test_browse import grid_batch


@pytest.fixture
def recorded_store(recorded):
    s = Store(recorded.store_path)
    yield s
    s.close()


@pytest.fixture
def grid_store(tmp_path):
    s = Store(tmp_path / "grid.db")
    grid_batch(s)
    yield s
    s.close()


def make_grid(qtbot, store: Store) -> RunGrid:
    grid = RunGrid(store)
    qtbot.addWidget(grid)
    grid.resize(900, 600)
    grid.show()
    return grid


def cell_index(grid: RunGrid, case_id: str, variant: str) -> QModelIndex:
    return grid.model.index(grid.model.cases.index(case_id), grid.model.variants.index(variant))


def click(qtbot, grid: RunGrid, case_id: str, variant: str) -> None:
    rect = grid.view.visualRect(cell_index(grid, case_id, variant))
    qtbot.mouseClick(grid.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def listed(grid: RunGrid) -> list[tuple[str, ...]]:
    table = grid.trials
    return [tuple(table.item(row, column).text() for column in range(table.columnCount()))
            for row in range(table.rowCount())]


# -- the recorded batch -------------------------------------------------------------

def test_the_grid_of_the_recorded_batch_is_the_engine_summary(recorded, recorded_store):
    """Each cell's counts, pass rate, commands and trials are what the engine summarised."""
    summary = recorded_store.batch_summary(recorded.batch_id)
    cells = run_grid(recorded_store, recorded.batch_id)
    assert [(c.case_id, c.variant) for c in cells] == [(r.case_id, r.variant) for r in summary.runs]
    for cell, run in zip(cells, summary.runs):
        assert cell.run_ids == [run.run_id]
        assert cell.distribution == run.distribution and cell.trials == run.trials
        scored = [t.duration_ms for t in run.trials if t.outcome in ("pass", "fail")]
        assert cell.median_ms == (scored[0] if scored else None)
    by_case = {c.case_id: c for c in cells}
    assert by_case["writes_greet"].pass_rate == 1.0 and by_case["adds_numbers"].pass_rate == 0.0
    void = by_case["needs_a_lockfile"]  # a setup step failed: void, so no pass rate at all
    assert void.pass_rate is None and void.distribution.voided == 1 and void.median_ms is None
    assert by_case["sleeps"].trials[0].failure.kind == "timeout"


def test_the_recorded_grid_as_a_user_sees_it(qtbot, recorded, recorded_store):
    grid = make_grid(qtbot, recorded_store)
    grid.show_batch(recorded.batch_id)
    assert grid.model.variants == ["scripted"]
    assert grid.model.cases == ["writes_greet", "adds_numbers", "needs_a_lockfile", "sleeps"]
    greet = cell_index(grid, "writes_greet", "scripted").data(CellRole)
    [trial] = greet.trials
    assert cell_index(grid, "writes_greet", "scripted").data() == (
        f"100% ◇\ncmd {trial.command_count}/{trial.command_count}/{trial.command_count}"
        f" · {fmt_ms(trial.duration_ms)}")
    assert cell_index(grid, "needs_a_lockfile", "scripted").data() == "— 1 void\ncmd —/—/— · —"
    tints = {case: QColor(cell_index(grid, case, "scripted").data(Qt.ItemDataRole.BackgroundRole))
             for case in grid.model.cases}
    assert tints["adds_numbers"].name() == theme.OUTCOME_COLOUR["fail"]  # 0%: a result, red
    assert tints["needs_a_lockfile"].name() == theme.OUTCOME_COLOUR["infra_error"]
    assert grid.cell_title.text() == PICK_TEXT and not grid.compare_button.isEnabled()

    click(qtbot, grid, "writes_greet", "scripted")
    assert listed(grid) == [(recorded.trials["writes_greet"], "1", "✓ PASS",
                             fmt_ms(trial.duration_ms))]
    assert not grid.compare_button.isEnabled()  # a pass and no fail: nothing to compare
    with qtbot.waitSignal(grid.trial_activated) as activated:
        where = grid.trials.visualItemRect(grid.trials.item(0, 0)).center()
        # A real double-click: Qt's views act on a double-click only after its first press.
        qtbot.mouseClick(grid.trials.viewport(), Qt.MouseButton.LeftButton, pos=where)
        qtbot.mouseDClick(grid.trials.viewport(), Qt.MouseButton.LeftButton, pos=where)
    assert activated.args == [recorded.trials["writes_greet"]]

    click(qtbot, grid, "sleeps", "scripted")
    assert listed(grid)[0][2] == "✗ FAIL timeout" and not grid.compare_button.isEnabled()


# -- a synthetic batch with hand-worked figures ---------------------------------------

def test_cells_read_their_figures_and_colours(qtbot, grid_store):
    grid = make_grid(qtbot, grid_store)
    grid.show_batch("b_grid")
    assert "b_grid" in grid.title.text() and "3 cases × 2 variants · 11 trials" in grid.title.text()
    assert grid.model.cases == ["alpha", "beta", "gamma"] and grid.model.variants == ["v1", "v2"]
    text = {(c, v): cell_index(grid, c, v).data() for c in grid.model.cases
            for v in grid.model.variants}
    assert text[("alpha", "v1")] == "67% ◇\ncmd 3/5/9 · 50s"  # voids count in neither figure
    assert text[("alpha", "v2")] == "100% ◆\ncmd 4/6/8 · 15s"
    assert text[("beta", "v1")] == "100% ◇\ncmd 2/4.5/7 · 11s"
    assert text[("gamma", "v1")] == "— no trials\ncmd —/—/— · —"
    # beta never ran under v2: a blank cell that cannot be picked.
    missing = cell_index(grid, "beta", "v2")
    assert text[("beta", "v2")] is None and missing.flags() == Qt.ItemFlag.NoItemFlags

    def tint(case_id: str, variant: str) -> str:
        return QColor(cell_index(grid, case_id, variant).data(Qt.ItemDataRole.BackgroundRole)).name()

    assert tint("alpha", "v2") == theme.OUTCOME_COLOUR["pass"]
    assert tint("gamma", "v1") == theme.OUTCOME_COLOUR["skipped"]
    fail, passed = QColor(theme.OUTCOME_COLOUR["fail"]), QColor(theme.OUTCOME_COLOUR["pass"])
    alpha = QColor(tint("alpha", "v1"))  # two thirds of the way from the fail hue to the pass hue
    assert alpha.hslHue() == pytest.approx(
        fail.hslHue() + (passed.hslHue() - fail.hslHue()) * 0.667, abs=2)


def test_clicking_a_cell_lists_its_trials_and_compares_a_pass_with_a_fail(qtbot, grid_store):
    grid = make_grid(qtbot, grid_store)
    grid.show_batch("b_grid")
    click(qtbot, grid, "alpha", "v1")
    assert grid.cell_title.text() == "alpha · v1 · 7 trials"
    assert [row[:3] for row in listed(grid)] == [
        ("t_a1_1", "1", "✓ PASS"), ("t_a1_2", "2", "✓ PASS"), ("t_a1_3", "3", "✗ FAIL assertion"),
        ("t_a1_4", "4", "○ INFRA ERROR"), ("t_a1_5", "5", "○ INFRA ERROR"),
        ("t_a1_6", "6", "– SKIPPED"), ("t_a1_7", "7", "● RUNNING")]
    assert [row[3] for row in listed(grid)[:3]] == ["40s", "1m00s", "50s"]

    assert grid.compare_button.isEnabled()
    with qtbot.waitSignal(grid.compare_requested) as compared:
        qtbot.mouseClick(grid.compare_button, Qt.MouseButton.LeftButton)
    assert compared.args == ["t_a1_1", "t_a1_3"]  # the first pass, the first fail
    grid.trials.selectRow(1)  # a chosen pass takes the pass's side
    with qtbot.waitSignal(grid.compare_requested) as compared:
        qtbot.mouseClick(grid.compare_button, Qt.MouseButton.LeftButton)
    assert compared.args == ["t_a1_2", "t_a1_3"]

    click(qtbot, grid, "alpha", "v2")  # passes only
    assert len(listed(grid)) == 2 and not grid.compare_button.isEnabled()
    with qtbot.assertNotEmitted(grid.compare_requested):
        qtbot.mouseClick(grid.compare_button, Qt.MouseButton.LeftButton)
    click(qtbot, grid, "gamma", "v1")  # nothing ran yet
    assert listed(grid) == [] and not grid.compare_button.isEnabled()


def test_show_run_selects_its_cell_and_a_refresh_keeps_it(qtbot, grid_store):
    grid = make_grid(qtbot, grid_store)
    grid.show_run("r_b1")
    assert grid.batch_id == "b_grid"
    assert grid.view.currentIndex() == cell_index(grid, "beta", "v1")
    assert grid.view.selectionModel().isSelected(cell_index(grid, "beta", "v1"))
    assert [row[0] for row in listed(grid)] == ["t_b1_1", "t_b1_2"]
    grid.show_batch("b_grid")  # the same batch again: a refresh
    assert grid.cell is not None and (grid.cell.case_id, grid.cell.variant) == ("beta", "v1")
    assert [row[0] for row in listed(grid)] == ["t_b1_1", "t_b1_2"]


def test_honest_empty_states(qtbot, grid_store):
    grid = make_grid(qtbot, grid_store)
    assert grid.stack.currentWidget() is grid.empty and grid.empty.text() == EMPTY_TEXT
    grid.show_batch("b_nope")
    assert grid.empty.text() == "No batch b_nope in this store: pick one in the browser."
    grid.show_run("r_nope")
    assert grid.empty.text() == "No run r_nope in this store: pick one in the browser."
    grid_store.create_batch("b_new", "studio", owner="", started_at="2026-11-30T10:00:00.000Z")
    grid_store.flush()
    grid.show_batch("b_new")
    assert grid.stack.currentWidget() is grid.empty and grid.model.rowCount() == 0
    assert grid.empty.text() == ("Batch b_new has no runs yet: they appear once its plan is "
                                 "written.")
    grid.show_batch("b_gr")  # a unique prefix, as everywhere else ids are typed
    assert grid.batch_id == "b_grid" and grid.stack.currentWidget() is not grid.empty


def test_cells_add_their_cost_once_it_is_read(qtbot, grid_store):
    """The median cost per scored trial on the second line, the total in the tooltip; a trial
    whose tokens have no price makes the total "at least", never a $0 guess."""
    grid = make_grid(qtbot, grid_store)
    grid.show_batch("b_grid")
    alpha, beta = cell_index(grid, "alpha", "v1"), cell_index(grid, "beta", "v1")
    assert "cost: not read yet" in alpha.data(Qt.ItemDataRole.ToolTipRole)
    ids = {(t.trial, c.case_id, c.variant): t.id for c in run_grid(grid_store, "b_grid")
           for t in c.trials}
    costs = {ids[(1, "alpha", "v1")]: 0.01, ids[(2, "alpha", "v1")]: 0.03,
             ids[(3, "alpha", "v1")]: 0.02, ids[(4, "alpha", "v1")]: 0.0,  # a void: no tokens
             ids[(5, "alpha", "v1")]: None,  # a void that spent tokens under no priced model
             ids[(1, "beta", "v1")]: None, ids[(2, "beta", "v1")]: None}
    with qtbot.waitSignal(grid.model.dataChanged):
        grid.model.set_costs(costs)
    assert alpha.data() == "67% ◇\ncmd 3/5/9 · 50s · $0.02?"
    tip = alpha.data(Qt.ItemDataRole.ToolTipRole).splitlines()
    assert tip[-1] == "cost: median $0.02 per scored trial, total ≥ $0.06 (1 trial unknown)"
    assert beta.data() == "100% ◇\ncmd 2/4.5/7 · 11s"  # no figure, and never $0
    assert beta.data(Qt.ItemDataRole.ToolTipRole).splitlines()[-1] == (
        "cost unknown for 2 trials (no model, or no price for it)")
    assert cell_index(grid, "alpha", "v2").data() == "100% ◆\ncmd 4/6/8 · 15s"  # not read yet
