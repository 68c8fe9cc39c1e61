"""Replay: a stored trial's events fed into a live-trials model, as they streamed.

The player owns a position (how many of the trial's events are folded) and a
clock (recorded ms since the trial's first event). Playing moves the clock at the
recorded pace times a speed and folds every event it passes. At MAX it folds
MAX_RATE events a second, within a time budget per tick: the views append what
arrived once per clock tick of the model, and 10,000 rows at once stall the GUI
for 70 ms, so the rate, not the folding, is what keeps the GUI responsive.
Seeking forwards folds on from the position; seeking backwards forgets the trial
and folds it anew up to the target, without pacing. The views follow the model
(`ReplayTrials`) exactly as they follow a running trial, drawn to the replay's clock.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, QTimer, Signal

from engine.events import Event, PhaseStarted
from engine.models import TrialRecord
from studio.models.live import LiveTrial, LiveTrials

SPEEDS: tuple[float, ...] = (1.0, 4.0, 16.0)
MAX = 0.0  # speed: as fast as the GUI allows
TICK_MS = 20  # a paced replay's clock moves 50 times a second
MAX_TICK_MS = 5  # at MAX: folds this often
MAX_RATE = 20_000  # events a second at MAX: a view appends at most ~1,000 rows per model tick
# The replay model's clock, on which the views take new rows: at the live 200 ms, MAX handed
# them ~4,000 rows a tick, a 40-60 ms stall to append; a quarter of that is a quarter the stall.
REPLAY_CLOCK_MS = 50
TICK_BUDGET_MS = 10.0  # folding per tick at MAX: the rest of the event loop's turn paints
CHUNK = 64  # events folded per `apply` at MAX, between looks at the budget
IDLE_CAP_MS = 2_000  # the longest a replay shows nothing happening (wall time), whatever was recorded
CHECK_KIND = {"check": "command", "judge": "judge"}  # the phase a validation's result came out of


def record_as_of(record: TrialRecord, trial: LiveTrial) -> TrialRecord:
    """The stored record cut to what a replay has reached, for the views that show records
    (diff, evidence): its phases so far, each turn once its diff phase ended (or, with no
    diff phase, the turn), each check and judge verdict once its phase ended, and its items."""
    ended = {(s.phase, s.index) for s in trial.spans.spans if s.end_ms is not None}
    diffed = {p.index for p in record.phases if p.phase == "diff"}
    turns = [t for t in record.turns
             if ("diff", t.index) in ended or (t.index not in diffed and ("turn", t.index) in ended)]
    seen: dict[str, int] = {}
    validations = []
    for validation in record.validations:
        seen[validation.kind] = number = seen.get(validation.kind, 0) + 1
        if any((phase, number) in ended for phase, kind in CHECK_KIND.items() if kind == validation.kind):
            validations.append(validation)
    return record.model_copy(update=dict(
        outcome=None, failure=None, void_fields=[], turns=turns, validations=validations,
        phases=[p for p in record.phases if (p.phase, p.index) in ended],
        trajectory=record.trajectory[:len(trial.items or ())]))


class ReplayTrials(LiveTrials):
    """A live-trials model for replay: drawn to the replay's clock, and able to start a
    trial over (a seek backwards)."""

    def __init__(self, parent: QObject | None = None, clock_ms: int = REPLAY_CLOCK_MS) -> None:
        super().__init__(parent, clock_ms)
        self.replay_at: int | None = None  # epoch ms the replay has reached; None: wall clock

    def now_ms(self) -> int:
        return self.replay_at if self.replay_at is not None else super().now_ms()

    def restart(self, trial_id: str) -> None:
        """Forget all of a trial and watch it from nothing, as if it had not started."""
        self.forget(trial_id)
        self.watch(trial_id, [])


class ReplayPlayer(QObject):
    """Plays one trial's events into a `ReplayTrials`; play, pause, step, seek, speed."""

    position_changed = Signal(int, int)  # elapsed ms, total ms
    state_changed = Signal(bool)  # playing
    finished = Signal()  # the last event is folded
    restarted = Signal()  # the trial was started over (a seek backwards): views show it anew

    def __init__(self, live: ReplayTrials, events: Sequence[Event], trial_id: str | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        if trial_id is None:
            trial_id = next((e.trial_id for e in events if getattr(e, "trial_id", None)), None)
        if trial_id is None:
            raise ValueError("This trial has no events to replay.")
        self.live = live
        self.trial_id = trial_id
        self.events: list[Event] = [e for e in events if getattr(e, "trial_id", None) == trial_id]
        self.t0 = self.events[0].at if self.events else 0
        self._elapsed = [e.at - self.t0 for e in self.events]  # sorted: the store keeps them in order
        self.total_ms = self._elapsed[-1] if self.events else 0
        self.phase_marks: list[tuple[int, str]] = [  # (elapsed ms, phase) of each phase start
            (ms, e.phase) for ms, e in zip(self._elapsed, self.events) if isinstance(e, PhaseStarted)]
        self.position = 0  # events folded
        self.elapsed_ms = 0.0  # where the replay stands: recorded ms since the first event
        self.speed = 1.0
        self._ticked_at = 0.0  # monotonic ms of the last tick
        self._timer = QTimer(self)
        self._timer.timeout.connect(self._tick)
        self.live.restart(trial_id)
        self._set_clock(0)

    # --- what callers read --------------------------------------------------------------

    @property
    def playing(self) -> bool:
        return self._timer.isActive()

    @property
    def at_end(self) -> bool:
        return self.position >= len(self.events)

    def elapsed_of(self, index: int) -> int:
        """Recorded ms from the first event to event `index`."""
        return self._elapsed[index]

    # --- transport ----------------------------------------------------------------------

    def play(self) -> None:
        if self.playing or not self.events:
            return
        if self.at_end:  # play at the end: from the start again
            self.seek(0)
        self._ticked_at = time.monotonic() * 1000
        self._timer.start(MAX_TICK_MS if self.speed == MAX else TICK_MS)
        self.state_changed.emit(True)

    def pause(self) -> None:
        if self.playing:
            self._timer.stop()
            self.state_changed.emit(False)

    def toggle(self) -> None:
        self.pause() if self.playing else self.play()

    def set_speed(self, speed: float) -> None:
        """1, 4, 16 … times the recorded pace, or MAX."""
        self.speed = speed
        if self.playing:
            self._timer.start(MAX_TICK_MS if speed == MAX else TICK_MS)

    def step_event(self) -> bool:
        """Pause, and fold the next event; False at the end."""
        return self._step_to(self.position if not self.at_end else None)

    def step_phase(self) -> bool:
        """Pause, and fold up to the next phase's start; False when no phase starts any more."""
        return self._step_to(self._next(lambda e: isinstance(e, PhaseStarted)))

    def step_turn(self) -> bool:
        """Pause, and fold up to the next turn's start; False when no turn starts any more."""
        return self._step_to(self._next(lambda e: isinstance(e, PhaseStarted) and e.phase == "turn"))

    def seek(self, position: int) -> None:
        """Fold exactly the first `position` events, without pacing; backwards starts over."""
        position = max(0, min(position, len(self.events)))
        if position < self.position:
            self.live.restart(self.trial_id)
            self.position = 0
            self.restarted.emit()
        self._advance(position, self._elapsed[position - 1] if position else 0)

    def seek_ms(self, elapsed_ms: int) -> None:
        """Fold every event recorded up to `elapsed_ms`, and stand there."""
        elapsed_ms = max(0, min(elapsed_ms, self.total_ms))
        position = bisect_right(self._elapsed, elapsed_ms)
        if position < self.position:
            self.seek(position)
        self._advance(position, elapsed_ms)

    # --- inside -------------------------------------------------------------------------

    def _next(self, wanted: Callable[[Event], bool]) -> int | None:
        """The index of the next event not yet folded that is `wanted`."""
        return next((i for i in range(self.position, len(self.events)) if wanted(self.events[i])), None)

    def _step_to(self, index: int | None) -> bool:
        self.pause()
        if index is None:
            return False
        self.seek(index + 1)
        return True

    def _fold_to(self, position: int) -> None:
        if position > self.position:
            self.live.apply(self.events[self.position:position])
            self.position = position

    def _advance(self, position: int, elapsed_ms: float) -> None:
        """Fold on to `position`, stand at `elapsed_ms`, and say so; the end once, as reached."""
        ended = self.at_end
        self._fold_to(position)
        self._set_clock(elapsed_ms)
        if self.at_end and not ended:
            self._end()

    def _tick(self) -> None:
        now = time.monotonic() * 1000
        wall, self._ticked_at = now - self._ticked_at, now
        if self.speed == MAX:
            position = self._fold_for(max(1, int(wall * MAX_RATE / 1000)), TICK_BUDGET_MS)
            self._advance(position, self._elapsed[position - 1] if position else 0)
            return
        clock = self.elapsed_ms + wall * self.speed
        if not self.at_end:
            last = self._elapsed[self.position - 1] if self.position else 0
            if (clock - last) / self.speed > IDLE_CAP_MS:  # a long wait: on to what came next
                clock = max(clock, self._elapsed[self.position])
        self._advance(bisect_right(self._elapsed, clock), min(clock, self.total_ms))

    def _fold_for(self, count: int, budget_ms: float) -> int:
        """At MAX: fold up to `count` events in chunks while the tick's budget lasts; returns
        where to stand, the last chunk left to `_advance`, so the end is said in one place."""
        start, target = time.perf_counter(), min(self.position + count, len(self.events))
        while self.position + CHUNK < target and (time.perf_counter() - start) * 1000 < budget_ms:
            self._fold_to(self.position + CHUNK)
        return target if (time.perf_counter() - start) * 1000 < budget_ms else self.position

    def _set_clock(self, elapsed_ms: float) -> None:
        self.elapsed_ms = elapsed_ms
        self.live.replay_at = int(self.t0 + elapsed_ms)
        self.position_changed.emit(int(elapsed_ms), self.total_ms)

    def _end(self) -> None:
        if self.playing:
            self._timer.stop()
            self.state_changed.emit(False)
        self.finished.emit()
