"""A batch selected in the window: every view shows the batch or an honest empty state, never
the trial seen before; its header, grid and timeline follow it while it runs, to its end."""

from __future__ import annotations

from engine.models import Failure
from engine.store import Store
from tests.engine.test_browse import _trial


def finish(store: Store, trial_id: str, outcome: str) -> None:
    record = store.get_trial(trial_id)
    failure = Failure(kind="assertion", reason="exit 1") if outcome == "fail" else None
    store.save_trial(record.model_copy(update=dict(
        outcome=outcome, failure=failure, finished_at="2026-11-29T17:01:00.000Z")))
    store.flush()


def test_a_batch_selected_after_a_trial_leaves_nothing_of_the_trial(window, recorded, records, qtbot):
    trial = records["writes_greet"]
    assert window.browser.select_id(trial.id)
    qtbot.waitUntil(lambda: window.selected_trial == trial.id)
    for view in window.views.values():  # each view filled with the trial
        window.tabs.setCurrentWidget(view)
    assert window.trajectory.model.rowCount() > 0 and window.evidence.cards
    assert window.diff.file_list.model().rowCount() > 0

    window.tabs.setCurrentWidget(window.trajectory)
    assert window.browser.select_id(recorded.batch_id)
    qtbot.waitUntil(lambda: window.selected_batch == recorded.batch_id)
    for view in window.views.values():
        window.tabs.setCurrentWidget(view)
    assert window.trajectory.model.rowCount() == 0, "the trial's items under the batch's header"
    assert window.evidence.cards == [] and window.diff.file_list.model().rowCount() == 0
    assert window.overview.record is None
    assert window.header.title.full_text().startswith(recorded.batch_id)
    qtbot.waitUntil(lambda: len(window.timeline.row_labels) == len(recorded.trials))


def test_a_selected_batch_follows_the_store_while_it_runs_and_when_it_ends(make_window, tmp_path, qtbot):
    path = tmp_path / "running.db"
    with Store(path) as store:
        store.create_batch("b_run", "cli", owner="", started_at="2026-11-29T17:00:00.000Z")
        store.create_run("r_run", "b_run", "alpha", "v1", position=0)
        for n in (1, 2):
            _trial(store, "b_run", "r_run", n, None, case="alpha", variant="v1")
        store.flush()
    window = make_window(path)
    assert window.browser.select_id("b_run")
    qtbot.waitUntil(lambda: window.selected_batch == "b_run")
    assert "RUNNING" in window.header.outcome.text()
    assert "0 pass" in window.header.reason.full_text()

    # Another process (a CLI run) finishes a trial, then the whole batch.
    with Store(path) as other:
        finish(other, "t_run_1", "pass")
    qtbot.waitUntil(lambda: "1 pass" in window.header.reason.full_text(), timeout=5000)
    assert "RUNNING" in window.header.outcome.text()
    qtbot.waitUntil(lambda: window.grid.model.cell(window.grid.model.index(0, 0)).distribution.passed == 1,
                    timeout=5000)
    with Store(path) as other:
        finish(other, "t_run_2", "fail")
        other.finish_batch("b_run", "finished", "2026-11-29T17:05:00.000Z")
        other.flush()
    qtbot.waitUntil(lambda: "1 fail" in window.header.reason.full_text(), timeout=5000)
    qtbot.waitUntil(lambda: "RUNNING" not in window.header.outcome.text(), timeout=5000)
    assert "finished" in window.header.reason.full_text()
