"""The trial browser: what a user sees in the tree, and how filters, sorting, keys and
live updates change it. Built on the real recorded batch, and on synthetic stores for
paging and live trials."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QIcon

from engine.models import TrialRecord
from engine.store import Store
from engine.store.browse import BrowseFilter
from studio import theme
from studio.models import browser as browser_model
from studio.models.browser import (
    COLUMN, BatchIdRole, BrowserModel, KindRole, TrialIdRole,
)
from studio.views.browser import EMPTY_TEXT, BrowserPanel

from tests.make_store import make_store

CASES = ["writes_greet", "adds_numbers", "needs_a_lockfile", "sleeps"]


@pytest.fixture
def store(recorded):
    s = Store(recorded.store_path)
    yield s
    s.close()


@pytest.fixture
def panel(qtbot, store):
    p = BrowserPanel(store, poll_ms=0, tick_ms=0)
    qtbot.addWidget(p)
    p.resize(900, 500)
    p.show()
    return p


def text(model, index: QModelIndex, key: str) -> str:
    return model.index(index.row(), COLUMN[key], index.parent()).data()


def children(model, parent: QModelIndex) -> list[QModelIndex]:
    if model.canFetchMore(parent):
        model.fetchMore(parent)
    return [model.index(row, 0, parent) for row in range(model.rowCount(parent))]


def poll(qtbot, panel) -> None:
    """The panel's poll, waited for: it reads on a worker thread and applies when that's done."""
    with qtbot.waitSignal(panel.model.refreshed, timeout=5000):
        panel.poll()


def runs_by_case(model) -> dict[str, QModelIndex]:
    (batch,) = children(model, QModelIndex())
    return {run.data().split(" · ")[0]: run for run in children(model, batch)}


def test_the_batch_its_runs_and_trials_with_glyphs(qtbot, store, recorded, records):
    model = BrowserModel(store)
    (batch,) = children(model, QModelIndex())
    assert batch.data(BatchIdRole) == recorded.batch_id and batch.data(KindRole) == "batch"
    # b_… · api · just now  1/3: one pass of three scored trials (the void one never counts)
    assert batch.data().startswith(recorded.batch_id[:7] + " · api · ")
    assert batch.data().endswith("1/3")
    runs = runs_by_case(model)
    assert sorted(runs) == sorted(CASES)
    assert runs["writes_greet"].data() == "writes_greet · scripted"
    glyphs = {"writes_greet": "✓ pass", "adds_numbers": "✗ fail · assertion",
              "needs_a_lockfile": "○ void", "sleeps": "✗ fail · timeout"}
    for case, run in runs.items():
        (trial,) = children(model, run)
        assert trial.data() == "#1" and trial.data(KindRole) == "trial"
        assert trial.data(TrialIdRole) == recorded.trials[case]
        assert text(model, trial, "outcome").startswith(glyphs[case])
        icon = trial.data(Qt.ItemDataRole.DecorationRole)
        assert isinstance(icon, QIcon) and not icon.isNull()
        colour = model.index(trial.row(), COLUMN["outcome"], run).data(
            Qt.ItemDataRole.ForegroundRole)
        assert colour.name() == theme.OUTCOME_COLOUR[records[case].outcome]
        assert text(model, trial, "commands") == str(records[case].command_count)
    greet = records["writes_greet"]
    assert text(model, runs["writes_greet"], "tokens") != "—"
    assert greet.usage.input + greet.usage.output >= 3400


def test_pass_rate_is_a_dash_for_the_void_run_and_the_void_trial_says_why(store, records):
    model = BrowserModel(store)
    runs = runs_by_case(model)
    assert text(model, runs["needs_a_lockfile"], "pass_rate") == "—"
    assert text(model, runs["writes_greet"], "pass_rate") == "100%"
    assert text(model, runs["adds_numbers"], "pass_rate") == "0%"
    (void,) = children(model, runs["needs_a_lockfile"])
    reason = records["needs_a_lockfile"].failure.reason
    assert reason in void.data(Qt.ItemDataRole.ToolTipRole)
    assert reason in text(model, void, "outcome")


def test_filtering_by_outcome_fail_leaves_the_failing_runs(qtbot, panel):
    panel.outcome.setCurrentIndex(panel.outcome.findData("fail"))
    assert panel.model.filter == BrowseFilter(outcomes={"fail"})
    runs = runs_by_case(panel.model)
    assert sorted(runs) == ["adds_numbers", "sleeps"]
    for run in runs.values():
        trials = children(panel.model, run)
        assert all(text(panel.model, t, "outcome").startswith("✗") for t in trials)
    panel.outcome.setCurrentIndex(panel.outcome.findData("infra_error"))
    assert sorted(runs_by_case(panel.model)) == ["needs_a_lockfile"]


def test_failure_kind_and_case_combos_come_from_the_store(panel):
    kinds = [panel.failure_kind.itemData(i) for i in range(1, panel.failure_kind.count())]
    assert kinds == ["assertion", "infra", "timeout"]
    panel.failure_kind.setCurrentIndex(panel.failure_kind.findData("timeout"))
    assert sorted(runs_by_case(panel.model)) == ["sleeps"]
    panel.failure_kind.setCurrentIndex(0)
    panel.case.setCurrentIndex(panel.case.findData("adds_numbers"))
    assert sorted(runs_by_case(panel.model)) == ["adds_numbers"]
    panel.case.setCurrentIndex(0)
    panel.tag.setCurrentIndex(panel.tag.findData("math"))
    assert sorted(runs_by_case(panel.model)) == ["adds_numbers"]


def test_free_text_filters_after_a_pause(qtbot, panel, recorded):
    qtbot.keyClicks(panel.search, "GREET")
    assert panel.model.filter.text == ""  # debounced: no query per key
    qtbot.waitUntil(lambda: panel.model.filter.text == "GREET", timeout=2000)
    assert sorted(runs_by_case(panel.model)) == ["writes_greet"]
    panel.search.setText(recorded.trials["sleeps"])  # a trial id
    qtbot.waitUntil(lambda: sorted(runs_by_case(panel.model)) == ["sleeps"], timeout=2000)
    panel.search.setText("no such thing")
    qtbot.waitUntil(lambda: panel.model.rowCount() == 0, timeout=2000)
    assert not panel.empty.isHidden() and "filters" in panel.empty.text()
    panel.clear_filter()
    assert panel.model.rowCount() == 1 and panel.empty.isHidden()


def test_sort_by_duration(panel, records):
    def duration(case: str) -> float:
        rec = records[case]
        return (datetime.fromisoformat(rec.finished_at)
                - datetime.fromisoformat(rec.started_at)).total_seconds()

    for order, reverse in ((Qt.SortOrder.DescendingOrder, True),
                           (Qt.SortOrder.AscendingOrder, False)):
        panel.tree.sortByColumn(COLUMN["duration"], order)
        (batch,) = children(panel.model, QModelIndex())
        shown = [run.data().split(" · ")[0] for run in children(panel.model, batch)]
        assert shown == sorted(CASES, key=duration, reverse=reverse)


def test_select_id_expands_selects_and_says_so(qtbot, panel, recorded):
    trial_id = recorded.trials["adds_numbers"]
    with qtbot.waitSignal(panel.trial_selected) as selected:
        assert panel.select_id(trial_id)
    assert selected.args == [trial_id]
    current = panel.tree.currentIndex()
    assert current.data(TrialIdRole) == trial_id
    assert panel.tree.isExpanded(current.parent())
    assert panel.tree.isExpanded(current.parent().parent())
    with qtbot.waitSignal(panel.batch_selected) as selected:
        assert panel.select_id(recorded.batch_id[:8])  # a unique prefix is enough
    assert selected.args == [recorded.batch_id]
    assert not panel.select_id("t_nope")


def test_select_id_clears_a_filter_that_hides_the_trial(panel, recorded):
    panel.outcome.setCurrentIndex(panel.outcome.findData("pass"))
    assert panel.select_id(recorded.trials["sleeps"])
    assert panel.outcome.currentIndex() == 0 and not panel.model.filter.active


def test_keys_move_and_enter_opens(qtbot, panel, recorded):
    panel.tree.sortByColumn(COLUMN["name"], Qt.SortOrder.AscendingOrder)
    panel.select_id(recorded.batch_id)
    panel.tree.setFocus()
    with qtbot.waitSignal(panel.trial_selected) as selected:
        qtbot.keyClick(panel.tree, Qt.Key.Key_Down)  # the first run: adds_numbers
        assert panel.tree.currentIndex().data(KindRole) == "run"
        panel.expand(panel.tree.currentIndex())
        qtbot.keyClick(panel.tree, Qt.Key.Key_Down)  # its trial
    assert selected.args == [recorded.trials["adds_numbers"]]
    with qtbot.waitSignal(panel.trial_activated) as activated:
        qtbot.keyClick(panel.tree, Qt.Key.Key_Return)
    assert activated.args == [recorded.trials["adds_numbers"]]
    qtbot.keyClick(panel.tree, Qt.Key.Key_Up)
    assert panel.tree.currentIndex().data(KindRole) == "run"


def test_batches_page_in_as_the_view_asks(qtbot, tmp_path):
    path = make_store(tmp_path / "many.db", trials=3000, batches=1000)
    with Store(path) as store:
        model = BrowserModel(store)
        assert model.rowCount() == 200 and model.canFetchMore(QModelIndex())
        model.fetchMore(QModelIndex())
        assert model.rowCount() == 400
        while model.canFetchMore(QModelIndex()):
            model.fetchMore(QModelIndex())
        assert model.rowCount() == 1000
        ids = [model.index(row, 0).data(BatchIdRole) for row in range(1000)]
        assert len(set(ids)) == 1000

        panel = BrowserPanel(store, poll_ms=0, tick_ms=0)
        qtbot.addWidget(panel)
        panel.resize(600, 400)
        panel.show()
        first = panel.model.rowCount()
        assert first < 1000
        panel.tree.scrollToBottom()  # reaching the end asks for the next page
        qtbot.waitUntil(lambda: panel.model.rowCount() > first, timeout=2000)


def _record(trial_id: str, n: int, outcome: str | None = None) -> TrialRecord:
    return TrialRecord(id=trial_id, batch_id="b_live", run_id="r_live", case_id="writes_greet",
                       variant="scripted", trial=n, trigger="studio", outcome=outcome,
                       started_at="2026-11-29T17:40:47.120Z",
                       finished_at="2026-11-29T17:40:55.620Z" if outcome else None)


def test_live_trials_show_a_moving_phase_and_elapsed_time(qtbot, tmp_path):
    from engine.events import PhaseStarted, TrialStarted
    from studio.models.live import LiveTrials

    with Store(tmp_path / "live.db") as store:
        live = LiveTrials()
        panel = BrowserPanel(store, poll_ms=0, tick_ms=0, live=live)
        qtbot.addWidget(panel)
        assert not panel.empty.isHidden() and panel.empty.text() == EMPTY_TEXT

        store.create_batch("b_live", "studio", owner="", started_at="2026-11-29T17:40:47.000Z")
        store.create_run("r_live", "b_live", "writes_greet", "scripted", position=0)
        store.create_trial(_record("t_live1", 1), owner="")
        store.mark_trial_running("t_live1", "2026-11-29T17:40:47.120Z")
        store.set_trial_phase("t_live1", "setup")
        store.flush()
        poll(qtbot, panel)  # another process wrote: the panel notices on its own
        assert panel.empty.isHidden()
        assert panel.tree.isExpanded(panel.model.index(0, 0))  # the newest batch opens
        model = panel.model
        run = model.index_of("run", "r_live")
        panel.expand(run)
        trial = model.index_of("trial", "t_live1")
        assert text(model, trial, "outcome").startswith("● setup")

        started = int(time.time() * 1000) - 5000
        ids = dict(batch_id="b_live", trial_id="t_live1", case_id="writes_greet", variant="scripted", trial=1)
        live.apply([TrialStarted(**ids, run_id="r_live", at=started),
                    PhaseStarted(**ids, phase="turn")])  # the engine's events, ahead of the store
        shown = text(model, trial, "outcome")
        assert shown.startswith("● turn 5.")
        time.sleep(1.0)
        with qtbot.waitSignal(model.dataChanged):
            model.tick()
        later = text(model, trial, "outcome")
        assert later.startswith("● turn ") and float(later[7:-1]) >= float(shown[7:-1]) + 1

        # A second trial and the first one's end arrive; the tree keeps its expansion.
        store.create_trial(_record("t_live2", 2), owner="")
        store.save_trial(_record("t_live1", 1, "pass"))
        store.flush()
        poll(qtbot, panel)
        assert panel.tree.isExpanded(model.index_of("run", "r_live"))
        assert model.rowCount(model.index_of("run", "r_live")) == 2
        assert text(model, model.index_of("trial", "t_live1"), "outcome") == "✓ pass"
        assert text(model, model.index_of("trial", "t_live2"), "outcome") == "● queued"
        assert panel.case.findData("writes_greet") > 0  # the new case is in the combo


def test_refresh_inserts_moves_and_removes_rows_consistently(qtbot, qtmodeltester, tmp_path):
    """A live filter and sort: rows come, move and go; the model stays a valid Qt model and
    the selected trial stays selected."""
    with Store(tmp_path / "moves.db") as store:
        for n, batch in enumerate(("b_a", "b_b")):
            store.create_batch(batch, "cli", owner="", started_at=f"2026-11-29T17:0{n}:00.000Z")
            store.create_run(f"r_{batch}", batch, "writes_greet", "scripted", position=0)
            rec = _record(f"t_{batch}", 1).model_copy(
                update=dict(batch_id=batch, run_id=f"r_{batch}"))
            store.create_trial(rec, owner="")
            store.mark_trial_running(rec.id, "2026-11-29T17:40:47.120Z")
        store.flush()
        panel = BrowserPanel(store, poll_ms=0, tick_ms=0)
        qtbot.addWidget(panel)
        model = panel.model
        panel.tree.sortByColumn(COLUMN["tokens"], Qt.SortOrder.DescendingOrder)
        panel.outcome.setCurrentIndex(panel.outcome.findData("running"))
        # Qt's tester stays attached and checks every change below. (Attached before a reset
        # it would flag its own fetchMore of lazy children while it handles the reset.)
        qtmodeltester.check(model, force_py=False)
        assert [model.index(r, 0).data(BatchIdRole) for r in range(2)] == ["b_b", "b_a"]
        assert panel.select_id("t_b_a")

        # b_a's trial finishes with many tokens and a second one is queued: b_a moves to
        # the top, its finished trial leaves the "running" filter, the queued one comes.
        first = store.get_trial("t_b_a")
        store.create_trial(_record("t_b_a2", 2).model_copy(
            update=dict(batch_id="b_a", run_id="r_b_a")), owner="")
        store.save_trial(first.model_copy(update=dict(
            outcome="pass", finished_at="2026-11-29T17:41:00.000Z",
            usage=first.usage.model_copy(update=dict(input=5000)))))
        store.flush()
        poll(qtbot, panel)
        assert [model.index(r, 0).data(BatchIdRole) for r in range(2)] == ["b_a", "b_b"]
        assert panel.tree.currentIndex().data(TrialIdRole) is None  # it left the filter
        run = model.index_of("run", "r_b_a")
        assert [model.index(r, 0, run).data(TrialIdRole) for r in range(model.rowCount(run))] \
            == ["t_b_a2"]

        # b_b overtakes b_a: the rows swap and the selection moves with its trial.
        assert panel.select_id("t_b_a2")
        store.save_trial(_record("t_b_b2", 2, "pass").model_copy(update=dict(
            batch_id="b_b", run_id="r_b_b", usage=first.usage.model_copy(update=dict(input=9000)))))
        store.flush()
        poll(qtbot, panel)
        assert [model.index(r, 0).data(BatchIdRole) for r in range(2)] == ["b_b", "b_a"]
        assert panel.tree.currentIndex().data(TrialIdRole) == "t_b_a2"

        # Everything finishes: nothing is running, so the filter leaves nothing.
        for trial_id in ("t_b_a2", "t_b_b"):
            store.save_trial(store.get_trial(trial_id).model_copy(update=dict(outcome="fail")))
        store.flush()
        poll(qtbot, panel)
        assert model.rowCount() == 0 and not panel.empty.isHidden()


def _batch(store: Store, batch: str, case: str, minute: int) -> None:
    store.create_batch(batch, "cli", owner="", started_at=f"2026-11-29T17:{minute:02}:00.000Z")
    store.create_run(f"r_{batch}", batch, case, "scripted", position=0)
    store.create_trial(_record(f"t_{batch}", 1, "pass").model_copy(
        update=dict(batch_id=batch, run_id=f"r_{batch}", case_id=case)), owner="")


def test_refresh_async_reads_off_the_gui_thread_and_applies_a_new_batch(qtbot, tmp_path,
                                                                         monkeypatch):
    with Store(tmp_path / "async.db") as store:
        _batch(store, "b_old", "writes_greet", 0)
        store.flush()
        model = BrowserModel(store)
        (old,) = children(model, QModelIndex())
        assert children(model, old)  # its runs loaded, so a refresh re-reads them too
        read_on = []
        for name in ("batches_page", "runs_of"):
            real = getattr(browser_model, name)

            def spy(*args, real=real, **kwargs):
                read_on.append(threading.current_thread())
                return real(*args, **kwargs)
            monkeypatch.setattr(browser_model, name, spy)

        _batch(store, "b_new", "adds_numbers", 1)
        store.flush()
        with qtbot.waitSignal(model.refreshed, timeout=5000):
            assert model.refresh_async(only_if_changed=True)
            assert model.refreshing and not model.refresh_async()  # one read in flight at most
            assert not model.index_of("batch", "b_new").isValid()  # applied later, not here
        assert not model.refreshing
        assert [model.index(r, 0).data(BatchIdRole) for r in range(2)] == ["b_new", "b_old"]
        assert model.index_of("run", "r_b_old").isValid()  # b_old's expansion is kept
        assert read_on and threading.main_thread() not in read_on

        # Nothing changed since: the read finds the same stamp and applies nothing.
        with qtbot.assertNotEmitted(model.refreshed, wait=200):
            assert model.refresh_async(only_if_changed=True)
            qtbot.waitUntil(lambda: not model.refreshing, timeout=5000)


def test_a_refresh_read_before_a_filter_change_is_dropped(qtbot, tmp_path):
    with Store(tmp_path / "stale.db") as store:
        _batch(store, "b_old", "writes_greet", 0)
        store.flush()
        model = BrowserModel(store)
        _batch(store, "b_new", "adds_numbers", 1)
        store.flush()
        with qtbot.assertNotEmitted(model.refreshed, wait=200):
            assert model.refresh_async()  # reads with no filter: b_new and b_old
            # The filter changes before the read arrives: the model reloads under it, and the
            # unfiltered result, when it comes, must not put b_new back.
            model.set_filter(BrowseFilter(cases=frozenset({"writes_greet"})))
            qtbot.waitUntil(lambda: not model.refreshing, timeout=5000)
        assert [model.index(r, 0).data(BatchIdRole) for r in range(model.rowCount())] == ["b_old"]
        assert not model.index_of("batch", "b_new").isValid()
        with qtbot.waitSignal(model.refreshed, timeout=5000):
            assert model.refresh_async()  # a read taken under the filter is applied
        assert [model.index(r, 0).data(BatchIdRole) for r in range(model.rowCount())] == ["b_old"]


def _visible_rows(panel) -> list[QModelIndex]:
    rows, index = [], panel.model.index(0, 0)
    while index.isValid():
        rows.append(index)
        index = panel.tree.indexBelow(index)
    return rows


def test_a_search_opens_the_batches_and_runs_that_hold_its_matches(qtbot, tmp_path):
    from engine.store.browse import filter_options

    with Store(make_store(tmp_path / "search.db", trials=400, batches=8)) as store:
        panel = BrowserPanel(store, poll_ms=0, tick_ms=0)
        qtbot.addWidget(panel)
        panel.resize(900, 600)
        panel.show()
        before = [i.data(BatchIdRole) for i in _visible_rows(panel) if panel.tree.isExpanded(i)]
        case = filter_options(store).cases[0]
        panel.search.setText(case)
        panel.apply_filter()
        shown = _visible_rows(panel)
        matches = [i for i in shown if i.data(KindRole) == "trial"]
        # Each match one look away: every batch and run that holds one is open.
        assert len({i.parent().parent().data(BatchIdRole) for i in matches}) > 1
        assert all(panel.tree.isExpanded(i) for i in shown if i.data(KindRole) != "trial")
        assert all(case in i.parent().data() for i in matches)

        # A filter most trials match opens a screenful or two, not the whole store.
        panel.search.clear()
        panel.outcome.setCurrentIndex(panel.outcome.findData("pass"))
        shown = _visible_rows(panel)
        assert any(not panel.tree.isExpanded(i) for i in shown if i.data(KindRole) == "batch")
        assert len(shown) < 200

        # Cleared: the batches open as the user had them before the search.
        panel.clear_filter()
        assert [i.data(BatchIdRole) for i in _visible_rows(panel) if panel.tree.isExpanded(i)] == before
        panel.close()


def _finished_batch(store: Store, batch: str, case: str, minute: int) -> None:
    _batch(store, batch, case, minute)
    store.finish_batch(batch, "finished", f"2026-11-29T17:{minute:02}:30.000Z")


@pytest.fixture
def deletable(qtbot, tmp_path):
    """A panel over a finished batch (b_done) and a running one (b_running)."""
    store = Store(tmp_path / "delete.db")
    _finished_batch(store, "b_done", "writes_greet", 0)
    _batch(store, "b_running", "adds_numbers", 1)  # never finished: still running
    store.flush()
    panel = BrowserPanel(store, poll_ms=0, tick_ms=0)
    qtbot.addWidget(panel)
    panel.show()
    yield panel
    panel.close()
    store.close()


def _answer(monkeypatch, button) -> list[str]:
    """QMessageBox.question answers `button`; returns the questions asked."""
    from PySide6.QtWidgets import QMessageBox

    asked: list[str] = []

    def question(parent, title, text, *args, **kwargs):
        asked.append(text)
        return button

    monkeypatch.setattr(QMessageBox, "question", question)
    return asked


def test_delete_batch_asks_first_and_no_keeps_it(deletable, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    panel = deletable
    asked = _answer(monkeypatch, QMessageBox.StandardButton.No)
    [action] = panel.context_menu(panel.model.locate("b_done")).actions()
    assert action.text() == "Delete batch…" and action.isEnabled()
    action.trigger()
    assert len(asked) == 1 and "b_done" in asked[0] and "1 trial" in asked[0]
    assert panel.store.batch_summary("b_done") is not None
    assert panel.model.index_of("batch", "b_done").isValid()


def test_delete_batch_yes_asks_the_store_to_delete_it(deletable, monkeypatch):
    """The call the window makes, spied: Store.delete_batches is another change's (engine/store)."""
    from PySide6.QtWidgets import QMessageBox

    panel = deletable
    _answer(monkeypatch, QMessageBox.StandardButton.Yes)
    calls = []
    monkeypatch.setattr(panel.store, "delete_batches", calls.append, raising=False)
    assert panel.delete_batch("b_done")
    assert calls == [["b_done"]]


def test_delete_batch_yes_removes_it_from_the_store_and_the_tree(qtbot, deletable, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    panel = deletable
    _answer(monkeypatch, QMessageBox.StandardButton.Yes)
    [action] = panel.context_menu(panel.model.locate("b_done")).actions()
    with qtbot.waitSignal(panel.batch_deleted, timeout=5000) as deleted:
        action.trigger()
    assert deleted.args == ["b_done"]
    assert panel.store.batch_summary("b_done") is None and panel.store.get_trial("t_b_done") is None
    assert not panel.model.index_of("batch", "b_done").isValid()
    assert panel.model.index_of("batch", "b_running").isValid()


def test_a_running_batch_cannot_be_deleted_and_the_menu_says_why(deletable, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    panel = deletable
    asked = _answer(monkeypatch, QMessageBox.StandardButton.Yes)
    [action] = panel.context_menu(panel.model.locate("b_running")).actions()
    assert not action.isEnabled() and "running" in action.text()
    assert not panel.delete_batch("b_running") and asked == []
    assert panel.store.batch_summary("b_running") is not None


def test_the_window_shows_nothing_of_a_deleted_batch(qtbot, tmp_path, make_window, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    with Store(tmp_path / "window.db") as store:
        _finished_batch(store, "b_kept", "adds_numbers", 0)
        _finished_batch(store, "b_done", "writes_greet", 1)
    window = make_window(tmp_path / "window.db")
    _answer(monkeypatch, QMessageBox.StandardButton.Yes)
    # Another batch deleted: the trial shown stays.
    assert window.browser.select_id("t_b_kept")
    qtbot.waitUntil(lambda: window.selected_trial == "t_b_kept")
    assert window.browser.delete_batch("b_done")
    assert window.selected_trial == "t_b_kept" and window.browser.current_trial() == "t_b_kept"
    assert window.header.title.full_text().startswith("adds_numbers #1")
    # The shown trial's batch deleted: nothing of it stays, and the window says nothing is selected.
    assert window.browser.delete_batch("b_kept")
    assert window.selected_trial is None and window.selected_batch is None
    assert window.header.title.full_text() == "No trial selected"
