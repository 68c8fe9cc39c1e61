"""The running trials, as the engine's events tell them: one model the views subscribe to.

The window hands it every batch of events the bridge drains (replay will hand it
a stored trial's events the same way). Per running trial it keeps the phase, the
start, the phase spans and, for the trials a view watches, the trajectory items;
it says what changed once per batch, never once per event. A trial leaves the
model when it finishes: its stored record is then what the views show.

Events are told apart by the number the Recorder stamps on each (`n`, 1, 2, …
per trial): a watch folds the trial from its whole stored history, then the
events the bridge delivered that the store does not hold yet, and an event
whose number was already folded is skipped. Items are kept only for watched
trials; every trial keeps only its latest RECENT_EVENTS events, for a watch
that finds the store behind the bridge.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, QTimer, Signal

from engine.events import Event, PhaseProgress, PhaseStarted, TrialFinished, TrialStarted
from engine.models import TrajectoryItem
from engine.text import now_ms
from studio.spans import LiveSpans

CLOCK_MS = 200  # a watched trial's clock (header, timeline, new items) moves 5 times a second
# Per trial: its latest delivered events, which the store may not hold yet. Few: more than our
# writer's lag, yet each kept event is a few objects the garbage collector walks again and again.
RECENT_EVENTS = 32
FINISHED_KEPT = 1_000  # finished trials remembered, for records the store has not caught up with


@dataclass(eq=False)
class LiveTrial:
    """One running trial, folded from its events in order."""

    trial_id: str
    spans: LiveSpans = field(default_factory=LiveSpans)
    phase: str | None = None  # from its latest PhaseStarted
    started_ms: int | None = None  # epoch ms of its TrialStarted
    folded_n: int = 0  # the highest event number folded: an event at or below it is folded already
    items: list[TrajectoryItem] | None = None  # its trajectory, while a view watches it
    # False: the store, when watched, lacked events the bridge delivered and this model had
    # already let go of; a watch once the store caught up is exact again.
    complete: bool = True
    # Its latest numbered events as delivered, and the highest number that fell out of them.
    recent: deque[Event] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    dropped_n: int = 0

    @property
    def watched(self) -> bool:
        return self.items is not None


def _tail(recent: deque[Event], dropped_n: int) -> tuple[deque[Event], int]:
    """The latest RECENT_EVENTS of `recent`, and the highest event number let go of."""
    if recent.maxlen == RECENT_EVENTS:
        return recent, dropped_n
    let_go = len(recent) - RECENT_EVENTS
    return deque(recent, maxlen=RECENT_EVENTS), recent[let_go - 1].n if let_go > 0 else dropped_n


@dataclass
class _Changes:
    """What one batch of events changed, said once per trial after the batch."""

    phases: dict[str, LiveTrial] = field(default_factory=dict)
    spans: dict[str, None] = field(default_factory=dict)  # ordered set
    items: dict[str, list[TrajectoryItem]] = field(default_factory=dict)
    finished: dict[str, str] = field(default_factory=dict)


class LiveTrials(QObject):
    """Running trials from engine events; `apply` a batch, subscribe to what changed."""

    phase_changed = Signal(str, str, object)  # trial id, phase, started epoch ms (int | None)
    spans_changed = Signal(str)  # trial id
    items_added = Signal(str, list)  # trial id, list[TrajectoryItem]: watched trials only
    trial_finished = Signal(str, str)  # trial id, outcome
    ticked = Signal()  # the clock moved: every CLOCK_MS while a watched trial runs

    def __init__(self, parent: QObject | None = None, clock_ms: int = CLOCK_MS) -> None:
        super().__init__(parent)
        self._trials: dict[str, LiveTrial] = {}
        self._finished: OrderedDict[str, TrialFinished] = OrderedDict()  # by trial id
        self._clock = QTimer(self, interval=clock_ms)
        self._clock.timeout.connect(self.ticked)

    # --- what views read ----------------------------------------------------------------

    def trial(self, trial_id: str) -> LiveTrial | None:
        """A running trial this model has heard of; None once it finished."""
        return self._trials.get(trial_id)

    def outcome(self, trial_id: str) -> str | None:
        """How a trial that recently finished ended (None: running, or not heard of)."""
        finished = self._finished.get(trial_id)
        return finished.outcome if finished is not None else None

    def now_ms(self) -> int:
        """The clock running trials are drawn to (epoch ms)."""
        return now_ms()

    # --- what feeds it ------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> None:
        """Fold a batch of delivered events in order, then say once per trial what changed."""
        changes = _Changes()
        self._fold(events, changes, delivered=True)
        self._say(changes)

    def watch(self, trial_id: str, history: Iterable[Event] = ()) -> LiveTrial:
        """Keep a running trial's trajectory items from now on, and run the clock for it.

        `history` is all the store holds of its events, in order. The trial is folded anew
        from it, then from the delivered events it does not hold yet; `complete` says
        whether those were all still kept. Until a watch is complete, every event delivered
        is kept, so that one more watch, once the store has caught up, is exact."""
        known = self._trials.get(trial_id)
        if known is not None and known.watched and known.complete:
            return known
        trial = self._trials[trial_id] = LiveTrial(trial_id, items=[])
        self._finished.pop(trial_id, None)
        changes = _Changes()
        self._fold((e for e in history if getattr(e, "trial_id", None) == trial_id), changes,
                   delivered=False)
        if known is not None:
            stored_n = trial.folded_n
            trial.complete = known.dropped_n <= stored_n
            self._fold([e for e in known.recent if e.n > stored_n], changes, delivered=False)
            if trial.complete:
                trial.recent, trial.dropped_n = _tail(known.recent, known.dropped_n)
            else:  # every event from now on, for the watch once the store has caught up
                trial.recent, trial.dropped_n = deque(known.recent), known.dropped_n
        # Its items so far are `trial.items`, which a view takes as it shows the trial: not
        # said as added, or a view still following it would append them twice.
        changes.items.clear()
        self._say(changes)
        self._run_clock()
        return trial

    def unwatch(self, trial_id: str) -> None:
        """No view shows this trial any more: drop its items."""
        trial = self._trials.get(trial_id)
        if trial is not None and trial.watched:
            trial.items = None
            trial.recent, trial.dropped_n = _tail(trial.recent, trial.dropped_n)
            self._run_clock()

    def forget(self, trial_id: str) -> None:
        """Drop all this model knows of a trial, as if it had never been heard of (a replay
        that starts over)."""
        self._trials.pop(trial_id, None)
        self._finished.pop(trial_id, None)
        self._run_clock()

    # --- folding ------------------------------------------------------------------------

    def _fold(self, events: Iterable[Event], changes: _Changes, delivered: bool) -> None:
        """Fold events into their trials. A hot loop: 5,000 events a second reach it."""
        trials = self._trials
        for event in events:
            trial_id = getattr(event, "trial_id", None)
            if trial_id is None:
                continue  # a batch's own events
            n = event.n
            trial = trials.get(trial_id)
            if trial is None:
                finished = self._finished.get(trial_id)
                if finished is not None and n <= finished.n:
                    continue  # a late copy of a finished trial's event
                trial = trials[trial_id] = LiveTrial(trial_id)
                self._finished.pop(trial_id, None)
            if n:
                if n <= trial.folded_n:
                    continue  # folded already: the store was ahead of the bridge
                trial.folded_n = n
                if delivered:
                    recent = trial.recent
                    if len(recent) == recent.maxlen:
                        trial.dropped_n = recent[0].n
                    recent.append(event)
            kind = type(event)
            if kind is PhaseProgress:  # most events: no span moves
                item = event.item
                if item is not None and trial.items is not None:
                    trial.items.append(item)
                    changes.items.setdefault(trial_id, []).append(item)
                continue
            if kind is PhaseStarted:
                trial.phase = event.phase
                changes.phases[trial_id] = trial
            elif kind is TrialStarted:
                trial.started_ms = event.at
            if trial.spans.apply(event):
                changes.spans[trial_id] = None
            if kind is TrialFinished:
                del trials[trial_id]
                changes.finished[trial_id] = event.outcome
                self._remember(event)

    def _say(self, changes: _Changes) -> None:
        for trial_id, trial in changes.phases.items():
            self.phase_changed.emit(trial_id, trial.phase, trial.started_ms)
        for trial_id in changes.spans:
            self.spans_changed.emit(trial_id)
        for trial_id, added in changes.items.items():
            self.items_added.emit(trial_id, added)
        for trial_id, outcome in changes.finished.items():
            self.trial_finished.emit(trial_id, outcome)
        if changes.finished:
            self._run_clock()

    def _remember(self, finished: TrialFinished) -> None:
        self._finished[finished.trial_id] = finished
        while len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)

    def _run_clock(self) -> None:
        """The clock runs while a watched trial runs, and only then."""
        needed = any(t.watched for t in self._trials.values())
        if needed and not self._clock.isActive():
            self._clock.start()
        elif not needed:
            self._clock.stop()
