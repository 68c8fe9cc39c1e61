"""The run grid in the window: a batch or a run selected in the browser shows its cases ×
variants on the Overview tab; a cell's "compare a pass with a fail", a run's context menu
and a double-clicked trial lead where they say."""

from __future__ import annotations

import pytest

from engine.store import Store
from studio.models.browser import KindRole
from tests.engine.test_browse import grid_batch


@pytest.fixture
def grid_window(make_window, tmp_path, qtbot):
    path = tmp_path / "grid.db"
    with Store(path) as store:
        grid_batch(store)
    window = make_window(path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)
    return window


def run_row(window, run_id: str):
    index = window.browser.model.locate(run_id)
    assert index.isValid() and index.data(KindRole) == "run", run_id
    return index


def test_a_selected_batch_shows_its_grid_and_a_trial_its_overview(window, recorded, records, qtbot):
    assert window.browser.select_id(recorded.batch_id)
    qtbot.waitUntil(lambda: window.overview_page.currentWidget() is window.grid)
    assert window.grid.batch_id == recorded.batch_id
    assert window.grid.model.cases == [r.case_id for r in window.store.batch_summary(recorded.batch_id).runs]
    window.browser.select_id(records["adds_numbers"].id)
    qtbot.waitUntil(lambda: window.selected_trial == records["adds_numbers"].id)
    assert window.overview_page.currentWidget() is window.overview
    assert window.overview.record.id == records["adds_numbers"].id
    window.browser.select_id(recorded.batch_id)
    qtbot.waitUntil(lambda: window.overview_page.currentWidget() is window.grid)
    assert window.overview.record is None, "no trial is left behind the batch's grid"


def test_a_selected_run_picks_its_cell_and_lists_its_trials(grid_window, qtbot):
    window = grid_window
    window.browser.tree.setCurrentIndex(run_row(window, "r_a1"))
    qtbot.waitUntil(lambda: window.selected_batch == "b_grid")
    assert window.overview_page.currentWidget() is window.grid
    cell = window.grid.cell
    assert (cell.case_id, cell.variant) == ("alpha", "v1")
    assert window.grid.trials.rowCount() == 7
    assert window.grid.pair() == ("t_a1_1", "t_a1_3")
    window.grid.compare_button.click()
    assert window.pages.currentWidget() is window.compare_page
    assert (window.compare.a.id, window.compare.b.id) == ("t_a1_1", "t_a1_3")


def test_a_double_clicked_trial_in_the_grid_opens_it(grid_window, qtbot):
    window = grid_window
    window.browser.tree.setCurrentIndex(run_row(window, "r_a1"))
    qtbot.waitUntil(lambda: window.grid.cell is not None)
    window.grid.trials.cellDoubleClicked.emit(2, 0)
    qtbot.waitUntil(lambda: window.selected_trial == "t_a1_3")
    assert window.browser.current_trial() == "t_a1_3"


def test_a_runs_context_menu_compares_its_first_pass_with_its_first_fail(grid_window):
    window = grid_window
    menu = window.browser.context_menu(run_row(window, "r_a1"))
    [action] = menu.actions()
    assert action.text() == "Compare a pass with a fail" and action.isEnabled()
    action.trigger()
    assert window.pages.currentWidget() is window.compare_page
    assert (window.compare.a.id, window.compare.b.id) == ("t_a1_1", "t_a1_3")
    assert window.compare_page.title.text().startswith("Comparing A: alpha #1 · v1 and B: alpha #3")


def test_a_run_without_a_pass_and_a_fail_offers_no_compare(grid_window):
    window = grid_window
    window.browser.expand(window.browser.model.locate("b_grid"))
    [action] = window.browser.context_menu(run_row(window, "r_a2")).actions()  # passes only
    assert not action.isEnabled() and "needs both" in action.text()
    batch_menu = window.browser.context_menu(window.browser.model.locate("b_grid"))
    assert not any("Compare" in a.text() for a in batch_menu.actions()), "a batch is no run"
    # Asked anyway (the counts moved on since the menu opened): one sentence, nothing opened.
    assert window.compare_pass_with_fail("r_a2") == \
        "run r_a2 has no pass and fail to compare: it needs one of each"
    assert window.banner.isVisible() and window.pages.currentWidget() is window.normal_page
