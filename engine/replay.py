"""A stored trial's events, to play back: `proctor replay` prints them, the studio's player
feeds them to the live-trial model.

A trial recorded with events replays those events as they were stored. A record with none
(an older record, or one imported from another tool) replays events made from the record
alone: its phase spans as start/end pairs, its trajectory items inside their turns.
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from .events import Event, EventAdapter, TrialFinished, TrialStarted
from .models import TrajectoryItem, TrialRecord
from .store import Store
from .text import fmt_ms, item_line

# The longest wait between two events, in seconds of replay: a trial that sat 15 minutes
# in a slow check replays that gap in 2 s, so a replay never looks stalled.
IDLE_CAP_S = 2.0
SPEEDS = (1, 4, 16, 0)  # 0: as fast as possible
_Key = tuple[int, int, int, int, int]  # ms since start, then tie-breaks
_FIRST = 2**62  # sorts a zero-length span before the spans that start when it does


def replay_events(store: Store, trial_id: str) -> list[Event] | None:
    """The trial's events in order (`trial_id` may be a unique prefix); None if there is no
    such trial. Made from the record when the store holds none of its events."""
    record = store.get_trial(trial_id)
    if record is None:
        return None
    stored = list(store.trial_events(record.id))
    return stored or events_from_record(record)


def events_from_record(record: TrialRecord) -> list[Event]:
    """The events a trial would have streamed, made from its record: TrialStarted, each
    phase span's start and end, each trajectory item inside its turn, and TrialFinished."""
    t0 = _epoch_ms(record.started_at) or 0
    ids = dict(batch_id=record.batch_id, trial_id=record.id, case_id=record.case_id,
               variant=record.variant, trial=record.trial)
    # (ms since start, tie-breaks) → event. At the same ms: ends, then starts (an outer span's
    # first), then items. A zero-length span is a point: it starts, holds its items and ends
    # before any other span starts there. Equal keys keep the record's order (a stable sort).
    timed: list[tuple[_Key, dict]] = []
    for i, span in enumerate(record.phases):
        start, end = span.start_ms, span.end_ms
        if end <= start:
            start_key, end_key = (start, 1, -_FIRST, i, 0), (start, 1, -_FIRST, i, 2)
        else:
            start_key, end_key = (start, 1, -end, i, 0), (end, 0, -start, i, 0)
        timed.append((start_key, dict(
            type="phase_started", phase=span.phase, index=span.index, detail=span.detail)))
        took = max(0, end - start)
        timed.append((end_key, dict(
            type="phase_ended", phase=span.phase, index=span.index, status=span.status,
            duration_ms=took, detail=span.detail,
            summary=f"{span.detail} in {fmt_ms(took)}".strip())))
    end_ms = max((s.end_ms for s in record.phases), default=0)
    for key, item in _placed_items(record, t0, end_ms):
        timed.append((key, dict(type="phase_progress", phase="turn", index=item.turn,
                                message=item_line(item), item=item)))
    timed.sort(key=lambda pair: pair[0])

    events: list[Event] = [TrialStarted(**ids, run_id=record.run_id, at=t0, n=1)]
    for key, fields in timed:
        fields = {**fields, **ids, "at": t0 + key[0], "n": len(events) + 1}
        events.append(EventAdapter.validate_python(fields))
    if record.outcome is not None:
        events.append(TrialFinished(**ids, outcome=record.outcome, failure=record.failure,
                                    at=t0 + end_ms, n=len(events) + 1))
    return events


def _placed_items(record: TrialRecord, t0: int, end_ms: int) -> list[tuple[_Key, TrajectoryItem]]:
    """Each item's sort key, its time (ms since start) first, inside its turn's span: its own
    `at` if it falls there, else spread evenly; with no span for its turn, at the trial's end."""
    spans = {s.index: (i, s) for i, s in enumerate(record.phases) if s.phase == "turn"}
    by_turn: dict[int, list[TrajectoryItem]] = {}
    for item in record.trajectory:
        by_turn.setdefault(item.turn, []).append(item)
    placed: list[tuple[_Key, TrajectoryItem]] = []
    for turn, items in by_turn.items():
        i, span = spans.get(turn, (None, None))
        start, end = (span.start_ms, span.end_ms) if span else (end_ms, end_ms)
        point = span is not None and end <= start
        last = start
        for k, item in enumerate(items):
            spread = start + (end - start) * (k + 1) // (len(items) + 1)
            own = _epoch_ms(item.at)
            at = own - t0 if own is not None and start <= own - t0 < end else spread
            last = max(last, min(at, max(start, end - 1)))  # in the record's order, inside the span
            key = (last, 1, -_FIRST, i, 1) if point and i is not None else (last, 2, 0, 0, 0)
            placed.append((key, item))
    return placed


def _epoch_ms(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def delays(events: Sequence[Event], speed: float) -> list[float]:
    """Seconds to wait before each event: the recorded gap since the one before divided by
    `speed`, at most IDLE_CAP_S; all 0 at speed 0 (as fast as possible)."""
    if speed < 0:
        raise ValueError(f"a replay speed is 0 or more, not {speed}")
    waits = [0.0] * len(events)
    if speed == 0:
        return waits
    for i in range(1, len(events)):
        gap_ms = max(0, events[i].at - events[i - 1].at)
        waits[i] = min(gap_ms / 1000 / speed, IDLE_CAP_S)
    return waits
