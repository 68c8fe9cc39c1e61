"""Replay: a real recorded trial's stored events played back through the live-trials model
give the record's spans, items, diffs and verdicts; play, pause, step, seek and speed move
exactly where they say; the transport bar drives the player (Space) and shows its position."""

from __future__ import annotations

import gc
import time

import pytest
from PySide6.QtCore import QTimer, Qt
from PySide6.QtWidgets import QAbstractSlider

import studio.models.replay as replay
from engine.events import PhaseEnded, PhaseProgress, PhaseStarted, TrialFinished, TrialStarted
from engine.models import TrajectoryItem
from engine.store import Store
from engine.text import fmt_ms
from studio.models.replay import MAX, ReplayPlayer, ReplayTrials, record_as_of
from studio.views.replay import ReplayView, TransportBar
from studio.views.timeline import TimelineView
from studio.views.trajectory import TrajectoryView

T0 = 1_764_000_000_000  # epoch ms


def stored_events(recorded, case: str) -> list:
    store = Store(recorded.store_path)
    try:
        return list(store.trial_events(recorded.trials[case]))
    finally:
        store.close()


def player_of(recorded, case: str = "writes_greet") -> ReplayPlayer:
    return ReplayPlayer(ReplayTrials(), stored_events(recorded, case))


def state(player: ReplayPlayer) -> tuple:
    """What the views would show of the trial now: its phase, spans and items."""
    trial = player.live.trial(player.trial_id)
    return (player.position, trial.phase, trial.started_ms, trial.folded_n,
            [(s.phase, s.index, s.start_ms, s.end_ms, s.status, s.detail) for s in trial.spans.spans],
            [item.model_dump() for item in trial.items])


def synthetic(items: int, gap_ms: int = 0) -> list:
    """One trial as the engine emits it: start, one turn of `items` commands, a wait, its end."""
    ids = dict(batch_id="b_r", trial_id="t_r", case_id="case", variant="v", trial=1)
    events = [TrialStarted(**ids, run_id="r", at=T0), PhaseStarted(**ids, phase="turn", index=1, at=T0 + 1)]
    for k in range(items):
        item = TrajectoryItem(kind="command", turn=1, command=f"step {k}", exit_code=0, output="ok")
        events.append(PhaseProgress(**ids, phase="turn", index=1, message="", item=item, at=T0 + 2 + k // 10))
    end = T0 + 2 + items // 10 + gap_ms
    events += [PhaseEnded(**ids, phase="turn", index=1, status="ok", duration_ms=end - T0, at=end),
               TrialFinished(**ids, outcome="pass", at=end + 1)]
    return [event.model_copy(update={"n": k}) for k, event in enumerate(events, 1)]


@pytest.mark.parametrize("case", ["writes_greet", "adds_numbers", "needs_a_lockfile", "sleeps"])
def test_a_recorded_trial_replayed_at_full_speed_is_its_record(qtbot, recorded, records, case):
    record = records[case]
    player = player_of(recorded, case)
    trial = player.live.trial(player.trial_id)  # the model lets go of it as it finishes
    player.set_speed(MAX)
    positions: list[tuple[int, int]] = []
    player.position_changed.connect(lambda *at: positions.append(at))
    with qtbot.waitSignal(player.live.trial_finished, timeout=5000) as finished:
        player.play()
    qtbot.waitUntil(lambda: not player.playing)

    assert finished.args == [record.id, record.outcome]
    # Every span ends as the record has it: a check with its verdict, the record phase "saved".
    assert [(s.phase, s.index, s.status, s.detail) for s in trial.spans.spans] == \
        [(p.phase, p.index, p.status, p.detail) for p in record.phases]
    for replayed, stored in zip(trial.spans.spans, record.phases):  # the record reads its own clock
        assert abs(replayed.start_ms - stored.start_ms) <= 50 and abs(replayed.end_ms - stored.end_ms) <= 50
    assert len(trial.items) == len(record.trajectory)
    for replayed, stored in zip(trial.items, record.trajectory):  # field by field
        assert replayed.model_dump() == stored.model_dump()
    as_of = record_as_of(record, trial)  # what the diff and evidence views get at the end
    assert [t.model_dump() for t in as_of.turns] == [t.model_dump() for t in record.turns]
    assert [v.model_dump() for v in as_of.validations] == [v.model_dump() for v in record.validations]
    assert positions[-1] == (player.total_ms, player.total_ms) and player.at_end


def test_a_record_with_no_events_replays_from_its_phases_and_items(qtbot, records):
    events_from_record = pytest.importorskip("engine.replay").events_from_record
    record = records["writes_greet"]
    player = ReplayPlayer(ReplayTrials(), events_from_record(record))
    trial = player.live.trial(record.id)
    player.seek(len(player.events))
    assert [(s.phase, s.index, s.status, s.start_ms, s.end_ms) for s in trial.spans.spans] == \
        [(p.phase, p.index, p.status, p.start_ms, p.end_ms) for p in record.phases]
    assert [i.model_dump() for i in trial.items] == [i.model_dump() for i in record.trajectory]
    assert player.live.outcome(record.id) == "pass"


def test_each_diff_and_verdict_appears_as_its_phase_ends(qtbot, recorded, records):
    record = records["writes_greet"]
    player = player_of(recorded)
    ends = {(e.phase, e.index): i for i, e in enumerate(player.events) if isinstance(e, PhaseEnded)}

    player.seek(ends[("diff", 1)])  # diff 1 has not ended yet
    assert record_as_of(record, player.live.trial(player.trial_id)).turns == []
    player.step_event()
    [turn] = record_as_of(record, player.live.trial(player.trial_id)).turns
    assert turn.model_dump() == record.turns[0].model_dump() and turn.diff
    player.seek(ends[("check", 1)] + 1)
    [check] = record_as_of(record, player.live.trial(player.trial_id)).validations
    assert check == record.validations[0]


def test_steps_move_exactly_to_the_next_event_phase_and_turn(qtbot, recorded):
    player = player_of(recorded)
    events = player.events
    assert player.step_event() and player.position == 1 and isinstance(events[0], TrialStarted)
    assert player.live.trial(player.trial_id).started_ms == events[0].at

    starts = [i for i, e in enumerate(events) if isinstance(e, PhaseStarted)]
    player.seek(0)
    reached = []
    while player.step_phase():
        trial = player.live.trial(player.trial_id)
        reached.append(player.position - 1)
        last = events[player.position - 1]
        assert trial.phase == last.phase and trial.spans.spans[-1].end_ms is None
        assert player.elapsed_ms == player.elapsed_of(player.position - 1)
    assert reached == starts

    turns = [i for i in starts if events[i].phase == "turn"]
    assert len(turns) == 2
    player.seek(0)
    reached = []
    while player.step_turn():
        reached.append(player.position - 1)
        assert player.live.trial(player.trial_id).spans.running_label == f"turn {len(reached)}"
    assert reached == turns and player.position == turns[-1] + 1  # no turn after the last

    player.play()
    player.step_event()  # a step pauses
    assert not player.playing and player.position == turns[-1] + 2


def test_pause_stops_the_replay_and_play_keeps_the_recorded_pace(qtbot, recorded):
    player = player_of(recorded)
    states: list[bool] = []
    player.state_changed.connect(states.append)
    player.play()
    qtbot.waitUntil(lambda: player.position > 5, timeout=3000)
    player.pause()
    assert states == [True, False] and not player.playing
    paused = state(player), player.elapsed_ms
    qtbot.wait(300)
    assert (state(player), player.elapsed_ms) == paused
    # At 1× the 1.9 s trial is not over in 0.3 s; at 16× it is over in well under its time.
    assert not player.at_end
    player.set_speed(16)
    started = time.monotonic()
    with qtbot.waitSignal(player.finished, timeout=3000):
        player.play()
    assert time.monotonic() - started < player.total_ms / 1000
    assert player.elapsed_of(len(player.events) - 1) == player.total_ms


def test_seeking_back_then_forth_ends_in_the_same_state(qtbot, recorded):
    player = player_of(recorded)
    player.seek(30)
    there = state(player)
    with qtbot.waitSignal(player.restarted):
        player.seek(len(player.events))  # to the end: the trial finishes …
        player.seek(30)  # … and is started over, then folded to 30 again
    assert state(player) == there
    player.seek(5)
    assert state(player)[0] == 5 and len(state(player)[4]) < len(there[4])
    player.seek(30)
    assert state(player) == there
    # By time: every event recorded up to that moment, and the clock right there.
    elapsed = [player.elapsed_of(i) for i in range(len(player.events))]
    for ms in (elapsed[29], elapsed[29] - 1, elapsed[3]):
        player.seek_ms(ms)
        assert player.position == sum(at <= ms for at in elapsed) and player.elapsed_ms == ms


def test_a_long_wait_is_cut_short(qtbot, monkeypatch):
    monkeypatch.setattr(replay, "IDLE_CAP_MS", 100)
    player = ReplayPlayer(ReplayTrials(), synthetic(3, gap_ms=600_000))  # ten idle minutes
    assert player.total_ms > 600_000
    started = time.monotonic()
    with qtbot.waitSignal(player.finished, timeout=3000):
        player.play()
    assert time.monotonic() - started < 2.0


def test_no_events_is_one_sentence():
    with pytest.raises(ValueError, match="no events to replay"):
        ReplayPlayer(ReplayTrials(), [])


def test_the_transport_bar_plays_on_space_and_shows_the_position(qtbot, recorded):
    player = player_of(recorded)
    bar = TransportBar(player)
    qtbot.addWidget(bar)
    bar.show()
    bar.activateWindow()
    qtbot.waitUntil(bar.isActiveWindow)  # Space is the window's shortcut: it works in the active window
    total = fmt_ms(player.total_ms)
    assert bar.position.text() == f"0ms / {total}"
    assert bar.slider.maximum() == player.total_ms
    assert len(bar.slider.marks) == sum(isinstance(e, PhaseStarted) for e in player.events)

    qtbot.keyClick(bar, Qt.Key.Key_Space)
    assert player.playing and bar.play_button.text() == "⏸"
    qtbot.keyClick(bar, Qt.Key.Key_Space)
    assert not player.playing and bar.play_button.text() == "▶"

    bar.step_turn.click()
    elapsed = player.elapsed_of(player.position - 1)
    assert bar.position.text() == f"{fmt_ms(elapsed)} / {total}" and bar.slider.value() == elapsed
    bar.speed.setCurrentIndex(bar.speed.findText("max"))
    assert player.speed == MAX
    bar.slider.setSliderPosition(0)
    bar.slider.triggerAction(QAbstractSlider.SliderAction.SliderPageStepAdd)  # a click on the groove
    assert player.elapsed_ms == bar.slider.pageStep() and bar.slider.value() == bar.slider.pageStep()


def test_the_replay_view_grows_the_timeline_and_trajectory_then_shows_the_record(qtbot, recorded, records):
    record = records["writes_greet"]
    player = player_of(recorded)
    view = replay_view(player, record)
    qtbot.addWidget(view)
    view.show()
    turn = next(i for i, e in enumerate(player.events) if isinstance(e, PhaseStarted) and e.phase == "turn")
    player.seek(turn + 1)
    qtbot.waitUntil(lambda: view.timeline.row_labels[-1:] == ["turn"])
    player.set_speed(MAX)
    with qtbot.waitSignal(player.finished, timeout=5000):
        player.play()
    phases = list(dict.fromkeys(p.phase for p in record.phases))
    assert view.timeline.row_labels == phases
    # At the end the checks and the judge's verdict come in after the items, as in the record view.
    model = view.trajectory.model
    assert model.rowCount() == len(record.trajectory) + len(record.turns) + len(record.validations)
    assert [r.kind for r in model.rows[-len(record.validations):]] == ["validation"] * len(record.validations)
    player.seek(turn + 1)  # back: the views follow the trial again, from its start
    qtbot.waitUntil(lambda: view.timeline.row_labels[-1:] == ["turn"])
    assert view.trajectory.model.rowCount() == 0


@pytest.fixture
def studio_gc():
    """The collector as the studio's window sets it (what exists is frozen, young collections
    rarer): else the garbage of the tests before is walked again in the middle of a replay."""
    from studio.app import GC_YOUNG

    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *threshold[1:])
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_ten_thousand_items_replay_at_full_speed_without_stalling_the_gui(qtbot, studio_gc):
    player = ReplayPlayer(ReplayTrials(), synthetic(10_000))
    view = replay_view(player, _record_of(player))
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    qtbot.waitExposed(view)
    gaps: list[float] = []
    last = [time.perf_counter()]

    def beat() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    heart = QTimer(interval=5, timeout=beat)
    player.set_speed(MAX)
    started = time.perf_counter()
    heart.start()
    with qtbot.waitSignal(player.finished, timeout=20_000):
        player.play()
    took = time.perf_counter() - started
    qtbot.wait(100)  # a stall in the last tick shows as the gap before the next beat
    heart.stop()
    stall = max(gaps, default=took)
    print(f"\nreplay of 10,000 items at max: {took * 1000:.0f} ms, longest GUI stall {stall * 1000:.0f} ms")
    # Goals 2 s and 50 ms on a quiet machine (~0.5 s and ~30 ms); here, beside other tests,
    # with room. Folded all at once, the 10,000 rows arrived in one append: a 65-110 ms stall.
    assert took < 5 and stall < 0.1 and len(gaps) >= 5


def replay_view(player: ReplayPlayer, record) -> ReplayView:
    """The transport bar over a timeline and a trajectory, as the window stacks them."""
    view = ReplayView(player, record, [TimelineView(player.live), TrajectoryView(player.live)])
    view.timeline, view.trajectory = view.views
    return view


def _record_of(player: ReplayPlayer):
    from engine.models import TrialRecord

    first = player.events[0]
    return TrialRecord(id=first.trial_id, batch_id=first.batch_id, run_id="r", case_id=first.case_id,
                       variant=first.variant, trial=first.trial, trigger="api", outcome="pass")
