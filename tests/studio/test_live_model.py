"""The live-trials model: real engine events in, typed signals out, once per batch of
events; items kept only for watched trials, taken from the store without doubling; and
the views that subscribe to it (browser row, header, timeline, trajectory) showing
what it says. A recorded trial's stored events replay into it as they streamed."""

from __future__ import annotations

from engine.events import PhaseEnded, PhaseProgress, PhaseStarted, TrialFinished, TrialStarted
from engine.models import TrajectoryItem, TrialRecord
from engine.store import Store
from studio.models.browser import COLUMN
from studio.models.live import RECENT_EVENTS, LiveTrials

T0 = 1_764_000_000_000  # epoch ms


def events_of(trial_id: str, items: int = 3, finish: bool = True, n: int = 1) -> list:
    """One trial as the engine emits it: start, image, turn 1 with `items` commands, its end."""
    ids = dict(batch_id="b_live", trial_id=trial_id, case_id="writes_greet", variant="scripted", trial=n)
    events = [TrialStarted(**ids, run_id="r_live", at=T0),
              PhaseStarted(**ids, phase="image", at=T0 + 1),
              PhaseEnded(**ids, phase="image", status="ok", duration_ms=9, at=T0 + 10),
              PhaseStarted(**ids, phase="turn", index=1, at=T0 + 20)]
    for k in range(1, items + 1):
        # A dict, as events held it before PhaseProgress.item was typed; both must work.
        item = TrajectoryItem(kind="command", turn=1, command=f"step {k}", exit_code=0, output="ok")
        events.append(PhaseProgress(**ids, phase="turn", index=1, message=f"step {k}",
                                    item=item.to_json(), at=T0 + 20 + k))
    if finish:
        events += [PhaseEnded(**ids, phase="turn", index=1, status="ok", duration_ms=90, at=T0 + 110),
                   TrialFinished(**ids, outcome="pass", at=T0 + 120)]
    # Numbered 1, 2, … as the Recorder stamps them when it emits.
    return [event.model_copy(update={"n": k}) for k, event in enumerate(events, 1)]


def commands(items) -> list[str]:
    return [i.command for i in items]


class Spy:
    """Every signal the model emits, in order, with its arguments."""

    def __init__(self, live: LiveTrials) -> None:
        self.calls: list[tuple] = []
        for name in ("phase_changed", "spans_changed", "items_added", "trial_finished"):
            getattr(live, name).connect(lambda *args, name=name: self.calls.append((name, *args)))

    def named(self, name: str) -> list[tuple]:
        return [c[1:] for c in self.calls if c[0] == name]


def test_a_batch_of_events_says_each_change_once_per_trial(qtbot):
    live = LiveTrials()
    spy = Spy(live)
    live.watch("t_a")  # a view shows t_a: its items are kept; t_b's are not
    a, b = events_of("t_a", finish=False), events_of("t_b", finish=False, n=2)
    live.apply([e for pair in zip(a, b) for e in pair])  # interleaved, as two trials run

    assert spy.named("phase_changed") == [("t_a", "turn", T0), ("t_b", "turn", T0)]
    assert spy.named("spans_changed") == [("t_a",), ("t_b",)]
    (added,) = spy.named("items_added")
    assert added[0] == "t_a" and commands(added[1]) == ["step 1", "step 2", "step 3"]
    assert all(isinstance(i, TrajectoryItem) for i in added[1])
    trial = live.trial("t_a")
    assert trial.phase == "turn" and trial.started_ms == T0 and trial.spans.running_label == "turn 1"
    assert [(s.phase, s.end_ms) for s in trial.spans.spans] == [("image", 10), ("turn", None)]
    assert live.trial("t_b").items is None

    spy.calls.clear()
    with qtbot.waitSignal(live.trial_finished) as finished:
        live.apply(events_of("t_a")[-2:])
    assert finished.args == ["t_a", "pass"]
    assert spy.named("spans_changed") == [("t_a",)] and spy.named("phase_changed") == []
    assert live.trial("t_a") is None and live.outcome("t_a") == "pass"
    assert live.trial("t_b") is not None and live.outcome("t_b") is None


def test_watching_takes_the_stored_items_once_whether_the_store_is_ahead_or_behind():
    events = events_of("t_1", items=5, finish=False)
    stored_items = ["step 1", "step 2", "step 3", "step 4", "step 5"]

    # The store is ahead of the bridge: all of it from the store now, and the bridge's late
    # delivery of the same events folds nothing twice.
    live = LiveTrials()
    live.apply(events[:6])  # up to step 2
    live.watch("t_1", history=events)
    assert commands(live.trial("t_1").items) == stored_items
    live.apply(events[6:])
    assert commands(live.trial("t_1").items) == stored_items

    # The store is behind: what it does not hold yet comes from what the model saw.
    live = LiveTrials()
    live.apply(events)
    live.watch("t_1", history=events[:6])
    assert commands(live.trial("t_1").items) == stored_items

    # Joined mid-trial (it started before the model listened): all of it from the store.
    live = LiveTrials()
    live.apply(events[5:])
    assert live.trial("t_1").spans.t0 != T0
    live.watch("t_1", history=events)
    assert commands(live.trial("t_1").items) == stored_items and live.trial("t_1").spans.t0 == T0

    live.unwatch("t_1")
    assert live.trial("t_1").items is None


def spans_of(trial) -> list[tuple[str, bool]]:
    return [(s.phase, s.end_ms is None) for s in trial.spans.spans]


def test_a_trial_watched_mid_stream_folds_each_event_once():
    """The store read at the click already holds events the bridge delivers only later."""
    events = events_of("t_1", items=5, finish=False)  # 0 start, 1-2 image, 3 turn, 4-8 steps 1-5
    live = LiveTrials()
    live.apply(events[5:7])  # the model began listening at step 2
    live.watch("t_1", history=events)
    live.apply(events[7:])  # steps 4 and 5, already folded from the store
    assert commands(live.trial("t_1").items) == ["step 1", "step 2", "step 3", "step 4", "step 5"]

    # Phases the bridge delivers again after the store had them leave no second span open.
    events = events_of("t_2", items=2)
    live.apply(events[1:3])  # the image's start and end: joined mid-trial
    live.watch("t_2", history=events[:6])  # the store holds up to step 2
    live.apply(events[3:-1])  # the bridge: the turn's start (again), its steps, its end
    trial = live.trial("t_2")
    assert spans_of(trial) == [("image", False), ("turn", False)]
    assert commands(trial.items) == ["step 1", "step 2"] and trial.spans.running_label == "starting"


def test_a_rewatched_trial_keeps_what_arrived_while_it_was_watched():
    events = events_of("t_1", items=5, finish=False)
    live = LiveTrials()
    live.apply(events[:5])  # up to step 1
    live.watch("t_1", history=events[:5])
    live.apply(events[5:8])  # steps 2-4 while watched
    live.unwatch("t_1")
    assert live.trial("t_1").items is None
    live.watch("t_1", history=events[:5])  # the store is still behind
    live.apply(events[8:])
    assert commands(live.trial("t_1").items) == ["step 1", "step 2", "step 3", "step 4", "step 5"]


def test_a_store_far_behind_the_bridge_is_caught_up_on_and_memory_stays_bounded():
    count = RECENT_EVENTS - 8
    events = events_of("t_1", items=count, finish=False)
    expected = [f"step {k}" for k in range(1, count + 1)]
    live = LiveTrials()
    live.apply(events)  # delivered, while the store holds only the start
    trial = live.watch("t_1", history=events[:4])
    assert trial.complete and commands(trial.items) == expected
    assert spans_of(trial) == [("image", False), ("turn", True)]

    # Further behind than the model keeps for an unwatched trial: it says so, keeps all that
    # arrives meanwhile, and a watch again once the store caught up is exact.
    live, many = LiveTrials(), events_of("t_2", items=RECENT_EVENTS * 4, finish=False)
    first, later = many[:RECENT_EVENTS + 50], many[RECENT_EVENTS + 50:]
    live.apply(first)
    assert len(live.trial("t_2").recent) <= RECENT_EVENTS, "an unwatched trial keeps a bounded tail"
    assert not live.watch("t_2", history=first[:4]).complete
    live.apply(later)  # more than that tail, while the store catches up with `first`
    trial = live.watch("t_2", history=first)
    assert trial.complete and commands(trial.items) == [f"step {k}" for k in range(1, RECENT_EVENTS * 4 + 1)]
    assert len(trial.recent) <= RECENT_EVENTS

    live.apply(events_of("t_3", items=RECENT_EVENTS * 2, finish=False))
    assert not live.watch("t_3").complete
    live.apply(events_of("t_3", items=RECENT_EVENTS * 4, finish=False)[-RECENT_EVENTS * 2:])
    live.unwatch("t_3")  # no view shows it any more: a bounded tail again
    assert len(live.trial("t_3").recent) <= RECENT_EVENTS


def test_a_stored_history_is_read_whole_a_page_at_a_time_past_damaged_rows(tmp_path):
    import sqlite3

    events = events_of("t_1", items=7)  # 13 events
    with Store(tmp_path / "history.db") as store:
        for event in events:
            store.add_event(event)
    with sqlite3.connect(tmp_path / "history.db") as conn:  # the last row of the first page
        conn.execute("UPDATE event SET json = '{broken' WHERE seq = (SELECT seq FROM event "
                     "ORDER BY seq LIMIT 1 OFFSET 2)")
    conn.close()
    with Store(tmp_path / "history.db") as store:
        read = list(store.trial_events("t_1", page=3))
    assert [e.n for e in read] == [e.n for e in events if e.n != 3]


def test_unnumbered_events_of_an_earlier_store_still_fold():
    events = [event.model_copy(update={"n": 0}) for event in events_of("t_1", items=3)]
    live = LiveTrials()
    trial = live.watch("t_1", history=events[:5])
    live.apply(events[5:])
    assert commands(trial.items) == ["step 1", "step 2", "step 3"] and live.outcome("t_1") == "pass"


def test_the_clock_ticks_only_while_a_watched_trial_runs(qtbot):
    live = LiveTrials(clock_ms=10)
    live.apply(events_of("t_1", finish=False))
    with qtbot.assertNotEmitted(live.ticked, wait=100):
        pass
    live.watch("t_1")
    qtbot.waitSignal(live.ticked, timeout=1000).wait()
    live.apply(events_of("t_1")[-1:])
    with qtbot.assertNotEmitted(live.ticked, wait=100):
        pass


def test_subscribed_views_show_the_running_phase_and_items(qtbot, tmp_path):
    from studio.views.browser import BrowserPanel
    from studio.views.header import TrialHeader
    from studio.views.timeline import TimelineView
    from studio.views.trajectory import TrajectoryView

    events = events_of("t_1", items=3)
    record = TrialRecord(id="t_1", batch_id="b_live", run_id="r_live", case_id="writes_greet",
                         variant="scripted", trial=1, trigger="studio")  # running: no outcome
    with Store(tmp_path / "live.db") as store:
        store.create_batch("b_live", "studio", owner="", started_at="2026-11-29T17:40:47.000Z")
        store.create_run("r_live", "b_live", "writes_greet", "scripted", position=0)
        store.create_trial(record, owner="")
        store.flush()
        live = LiveTrials(clock_ms=20)
        panel = BrowserPanel(store, poll_ms=0, tick_ms=0, live=live)
        header, timeline, trajectory = TrialHeader(live), TimelineView(live), TrajectoryView(live)
        for widget in (panel, header, timeline, trajectory):
            qtbot.addWidget(widget)
        timeline.show()  # a hidden timeline waits for its tab to be shown to draw
        panel.expand(panel.model.index_of("run", "r_live"))
        row = panel.model.index_of("trial", "t_1")

        def browser_text() -> str:
            return panel.model.index(row.row(), COLUMN["outcome"], row.parent()).data()

        assert browser_text() == "● queued"  # what the store says
        live.watch("t_1", history=events[:2])  # the store holds its start and the image's
        for view in (header, timeline, trajectory):
            view.show_record(record)
        assert header.reason.full_text().startswith("image ·")
        assert timeline.row_labels == ["image"] and trajectory.model.rowCount() == 0

        # The image ends, turn 1 starts, three commands: in many batches, as the bridge drains
        # them. The browser's row says so at once; the views redraw on the clock, not per batch.
        drawn: list[str] = []
        header.show_live = lambda *args, show=header.show_live: drawn.append("header") or show(*args)
        timeline._draw = lambda *args, draw=timeline._draw: drawn.append("timeline") or draw(*args)
        for event in events[2:-2]:
            live.apply([event])
        assert browser_text().startswith("● turn") and drawn == []
        qtbot.waitUntil(lambda: header.reason.full_text().startswith("turn 1 ·"))
        assert "RUNNING" in header.outcome.text()
        qtbot.waitUntil(lambda: timeline.row_labels == ["image", "turn"])
        qtbot.waitUntil(lambda: trajectory.model.rowCount() == 4)  # a header + 3 items
        assert [trajectory.model.index(r).data() for r in range(4)] == \
            ["Turn 1", "$ step 1  → exit 0", "$ step 2  → exit 0", "$ step 3  → exit 0"]

        live.apply(events[-2:])  # the trial ends: the views keep what they show until its record
        shown = header.reason.full_text()
        live.apply(events_of("t_2")[:4])  # another trial's events move nothing here
        assert header.reason.full_text() == shown and timeline.row_labels == ["image", "turn"]
        assert trajectory.model.rowCount() == 4
        assert browser_text() == "● queued"  # nothing ahead of the store any more
        timeline.show_record(None)
        assert timeline.row_labels == []


def test_a_recorded_trial_replays_into_the_model_as_it_streamed(recorded, records):
    store = Store(recorded.store_path)
    try:
        trial_id = recorded.trials["writes_greet"]
        events = [event for _, event in store.events(trial_id=trial_id)]
    finally:
        store.close()
    record = records["writes_greet"]
    live = LiveTrials()
    spy = Spy(live)
    trial = live.watch(trial_id)
    for event in events:  # one at a time, as a replay steps
        live.apply([event])

    assert spy.named("trial_finished") == [(trial_id, "pass")]
    assert [(s.phase, s.index, s.status) for s in trial.spans.spans] == \
        [(p.phase, p.index, p.status) for p in record.phases]
    added = [i for _, items in spy.named("items_added") for i in items]
    assert added == trial.items and [i.to_json() for i in added] == [i.to_json() for i in record.trajectory]
    phases = [phase for _, phase, _ in spy.named("phase_changed")]
    assert phases == [p.phase for p in record.phases] and live.trial(trial_id) is None
