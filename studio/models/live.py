"""The running trials, as the engine's events tell them: one model the views subscribe to.

The window hands it every batch of events the bridge drains (replay will hand it
a stored trial's events the same way). Per running trial it keeps the phase, the
start, the phase spans and, for the trials a view watches, the trajectory items;
it says what changed once per batch, never once per event. A trial leaves the
model when it finishes: its stored record is then what the views show.

Items are kept only for watched trials: a batch of many running trials would
otherwise hold every trajectory in memory twice (here and in the store).
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

CLOCK_MS = 200  # a watched trial's clock (header, the timeline's now line) moves 5 times a second
RECENT_ITEMS = 64  # per unwatched trial: the items a watch may find the store not yet holding
FINISHED_KEPT = 1_000  # finished trials remembered, for records the store has not caught up with


def item_of(event: Event) -> TrajectoryItem | None:
    """The trajectory item a progress event carries (typed, as parse_event reads it too)."""
    return event.item if isinstance(event, PhaseProgress) else None


@dataclass
class LiveTrial:
    """One running trial, folded from its events in order."""

    trial_id: str
    spans: LiveSpans = field(default_factory=LiveSpans)
    phase: str | None = None  # from its latest PhaseStarted
    started_ms: int | None = None  # epoch ms of its TrialStarted
    seen: int = 0  # its events folded so far
    whole: bool = False  # folded from its TrialStarted on, so `seen` counts from its first event
    items: list[TrajectoryItem] | None = None  # its trajectory, while a view watches it
    # Its latest events that carry an item, numbered by `seen`: what a watch adds when the
    # store is behind the bridge. Typed only then, so an unwatched trial costs no validation.
    recent: deque[tuple[int, PhaseProgress]] = field(
        default_factory=lambda: deque(maxlen=RECENT_ITEMS))

    @property
    def watched(self) -> bool:
        return self.items is not None

    def fold(self, event: Event) -> tuple[bool, bool, TrajectoryItem | None]:
        """Take one event: (phase changed, spans changed, the item it carries if watched)."""
        self.seen += 1
        if isinstance(event, PhaseProgress):  # most events: no span moves
            item = None
            if event.item is not None and self.items is not None:
                item = item_of(event)
                self.items.append(item)
            elif event.item is not None and self.whole:
                self.recent.append((self.seen, event))
            return False, False, item
        phase_changed = False
        if isinstance(event, TrialStarted):
            self.started_ms, self.whole = event.at, self.seen == 1
        elif isinstance(event, PhaseStarted):
            self.phase, phase_changed = event.phase, True
        return phase_changed, self.spans.apply(event), None


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
        self._finished: OrderedDict[str, str] = OrderedDict()  # trial id -> outcome
        self._clock = QTimer(self, interval=clock_ms)
        self._clock.timeout.connect(self.ticked)

    # --- what views read ----------------------------------------------------------------

    def trial(self, trial_id: str) -> LiveTrial | None:
        """A running trial this model has heard of; None once it finished."""
        return self._trials.get(trial_id)

    def outcome(self, trial_id: str) -> str | None:
        """How a trial that recently finished ended (None: running, or not heard of)."""
        return self._finished.get(trial_id)

    def now_ms(self) -> int:
        """The clock running trials are drawn to (epoch ms)."""
        return now_ms()

    # --- what feeds it ------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> None:
        """Fold a batch of events in order, then say once per trial what changed."""
        phases: dict[str, LiveTrial] = {}
        spans: dict[str, None] = {}  # ordered set
        items: dict[str, list[TrajectoryItem]] = {}
        finished: dict[str, str] = {}
        for event in events:
            trial_id = getattr(event, "trial_id", None)
            if trial_id is None:
                continue  # a batch's own events
            trial = self._trials.get(trial_id)
            if trial is None:
                trial = self._trials[trial_id] = LiveTrial(trial_id)
                self._finished.pop(trial_id, None)
            phase_changed, spans_changed, item = trial.fold(event)
            if phase_changed:
                phases[trial_id] = trial
            if spans_changed:
                spans[trial_id] = None
            if item is not None:
                items.setdefault(trial_id, []).append(item)
            if isinstance(event, TrialFinished):
                del self._trials[trial_id]
                finished[trial_id] = event.outcome
                self._remember(trial_id, event.outcome)
        for trial_id, trial in phases.items():
            self.phase_changed.emit(trial_id, trial.phase, trial.started_ms)
        for trial_id in spans:
            self.spans_changed.emit(trial_id)
        for trial_id, added in items.items():
            self.items_added.emit(trial_id, added)
        for trial_id, outcome in finished.items():
            self.trial_finished.emit(trial_id, outcome)
        if finished:
            self._run_clock()

    def watch(self, trial_id: str, history: Iterable[Event] = ()) -> LiveTrial:
        """Keep a running trial's trajectory items from now on, and run the clock for it.

        `history` is what the store holds of its events, in order. A trial folded from its
        start keeps its spans and takes the items of the events it has folded: from the
        history where the store is ahead of the bridge, from `recent` where it is behind.
        Any other trial (it began before this model listened) is folded anew from it."""
        trial = self._trials.get(trial_id)
        if trial is not None and trial.watched:
            return trial
        stored = [e for e in history if getattr(e, "trial_id", None) == trial_id]
        if trial is not None and trial.whole:
            items = [i for e in stored[:trial.seen] if (i := item_of(e)) is not None]
            items += [item_of(e) for n, e in trial.recent if n > len(stored)]
            trial.items, trial.recent = items, deque(maxlen=RECENT_ITEMS)
        else:
            trial = self._trials[trial_id] = LiveTrial(trial_id, items=[])
            self._finished.pop(trial_id, None)
            self.apply(stored)  # says so, as it does for the bridge's events
        self._run_clock()
        return trial

    def unwatch(self, trial_id: str) -> None:
        """No view shows this trial any more: drop its items."""
        trial = self._trials.get(trial_id)
        if trial is not None and trial.watched:
            trial.items = None
            self._run_clock()

    def _remember(self, trial_id: str, outcome: str) -> None:
        self._finished[trial_id] = outcome
        while len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)

    def _run_clock(self) -> None:
        """The clock runs while a watched trial runs, and only then."""
        needed = any(t.watched for t in self._trials.values())
        if needed and not self._clock.isActive():
            self._clock.start()
        elif not needed:
            self._clock.stop()
