"""Phase bookkeeping for one trial: start/end events through the sink, and the
record's phase spans. Every event passes the trial's redactor before it leaves.

The record itself is written here, under one lock: turns, validations, artifacts
and usage from the eval body's thread. A body that outlives the timeout is muted:
its late events, turns, validations and artifacts are dropped.

Trajectory items join the record here too, redacted (`limits.redact`: a cut
made while reading keeps no half of a key) and then cut to the caps as they
arrive, at most ITEMS_PER_TURN a turn and ITEMS_PER_TRIAL a trial; the rest are
counted in one marked item at the turn's end.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from . import limits
from .events import EventSink, PhaseEnded, PhaseProgress, PhaseStarted
from .text import fmt_ms, now_ms
from .models import (Artifact, PhaseName, PhaseSpan, PhaseStatus, TrajectoryItem, TrialRecord,
                     TurnRecord, Usage, Validation)
from .redact import Redactor


@dataclass
class PhaseHandle:
    """What a phase says about itself as it ends: `text in 33ms · extra · extra`."""

    text: str = ""
    detail: str = ""
    extras: list[str] = field(default_factory=list)
    status: PhaseStatus | None = None
    timed: bool = True

    def summary(self, ms: int) -> str:
        head = f"{self.text} in {fmt_ms(ms)}" if self.timed else self.text
        return " · ".join([head.strip(), *self.extras])


@dataclass
class OpenPhase:
    """A phase that has started: its end is `Recorder.end_phase`."""

    name: PhaseName
    index: int | None
    start_ms: int
    handle: PhaseHandle


class Recorder:
    def __init__(self, record: TrialRecord, sink: EventSink, redactor: Redactor,
                 since: float | None = None):
        """`since`: when the trial began to exist (queued for a slot), as time.monotonic()."""
        self.record = record
        self.sink = sink
        self.redactor = redactor
        self.t0 = time.monotonic() if since is None else since
        self.t0_epoch_ms = now_ms() - int((time.monotonic() - self.t0) * 1000)
        self.lock = threading.Lock()
        # Numbers each event and hands it on in one step, so numbers follow the order events leave.
        self._emit_lock = threading.Lock()
        self._emitted = 0
        # Threads whose late writes are dropped: an eval body abandoned after the timeout.
        self.muted: set[int] = set()
        self._items_in_turn: dict[int, int] = {}
        self._dropped_in_turn: dict[int, int] = {}
        self._items = 0
        self._item_chars = 0

    @property
    def closed(self) -> bool:
        return threading.get_ident() in self.muted

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    def _ids(self) -> dict:
        r = self.record
        return {"batch_id": r.batch_id, "trial_id": r.id, "case_id": r.case_id,
                "variant": r.variant, "trial": r.trial}

    def emit(self, event) -> None:
        if self.closed:
            return
        # clean: a lone surrogate in any text (an exception's message) would fail the write.
        event = limits.clean(limits.redact(self.redactor, event))
        with self._emit_lock:
            self._emitted += 1
            self.sink(event.model_copy(update={"n": self._emitted}))

    # --- the record, written from the body thread ---------------------------------

    def _append(self, field: str, value) -> None:
        with self.lock:
            if not self.closed:
                getattr(self.record, field).append(value)

    def add_turn(self, turn: TurnRecord) -> None:
        self._append("turns", turn)

    def add_validation(self, validation: Validation) -> None:
        self._append("validations", validation)

    def add_artifact(self, artifact: Artifact) -> None:
        self._append("artifacts", artifact)

    def add_usage(self, usage: Usage) -> None:
        with self.lock:
            self.record.usage = self.record.usage.add(usage)

    def drop_cumulative_diffs(self) -> None:
        """A turn was diffed: the cumulative diffs of the turns before it are out of date."""
        with self.lock:
            for turn in self.record.turns:
                turn.cumulative_diff = ""

    def add_item(self, item: TrajectoryItem) -> TrajectoryItem | None:
        """Keep a trajectory item in the record: redacted, then cut to the caps (so no half
        of a key survives a cut), and returned as stored. None, and counted, when its turn
        or the trial already holds as many items as it may."""
        with self.lock:
            if self.closed:
                return None
            if (self._items_in_turn.get(item.turn, 0) >= limits.ITEMS_PER_TURN
                    or self._items >= limits.ITEMS_PER_TRIAL
                    or self._item_chars >= limits.TRAJECTORY_CHARS):
                self._dropped_in_turn[item.turn] = self._dropped_in_turn.get(item.turn, 0) + 1
                return None
        stored = limits.cap_item(limits.redact(self.redactor, item))
        size = len(stored.model_dump_json())
        with self.lock:
            if self.closed:
                return None
            self._items_in_turn[item.turn] = self._items_in_turn.get(item.turn, 0) + 1
            self._items += 1
            self._item_chars += size
            self.record.trajectory.append(stored)
        return stored

    def end_items(self, turn: int) -> TrajectoryItem | None:
        """At a turn's end: the marked item that counts the items it dropped, if any."""
        with self.lock:
            dropped = self._dropped_in_turn.pop(turn, 0)
            if not dropped or self.closed:
                return None
            why = (f"a turn keeps {limits.ITEMS_PER_TURN:,} items, a trial "
                   f"{limits.ITEMS_PER_TRIAL:,} or {limits.TRAJECTORY_CHARS:,} characters of them")
            marker = TrajectoryItem(kind="message", turn=turn, role="proctor", truncated=True,
                                    text=f"{dropped:,} items dropped: {why}",
                                    warnings=[f"{dropped:,} items dropped"])
            self.record.trajectory.append(marker)
            return marker

    def progress(self, phase: PhaseName, message: str, index: int | None = None,
                 item: TrajectoryItem | None = None) -> None:
        self.emit(PhaseProgress(**self._ids(), phase=phase, index=index, message=message, item=item))

    def past_span(self, name: PhaseName, start_ms: int, end_ms: int, text: str) -> None:
        """A phase that is known only once it is over (waiting for a slot)."""
        ids = self._ids()
        self.emit(PhaseStarted(**ids, phase=name, at=self.t0_epoch_ms + start_ms))
        with self.lock:
            self.record.phases.append(PhaseSpan(phase=name, status="ok", start_ms=start_ms,
                                                end_ms=end_ms, detail=text))
        self.emit(PhaseEnded(**ids, phase=name, status="ok", duration_ms=end_ms - start_ms,
                             detail=text, summary=f"{text} in {fmt_ms(end_ms - start_ms)}",
                             at=self.t0_epoch_ms + end_ms))

    def start_phase(self, name: PhaseName, index: int | None = None, detail: str = "") -> OpenPhase:
        """A phase that ends by `end_phase`, not by leaving a block: a check ends once its
        matchers have run, after `c.exec` has returned."""
        started = OpenPhase(name, index, self.elapsed_ms(), PhaseHandle(detail=detail))
        self.emit(PhaseStarted(**self._ids(), phase=name, index=index, detail=detail, at=now_ms()))
        return started

    def end_phase(self, phase: OpenPhase) -> None:
        """The phase's one end: its span in the record and its end event say the same."""
        handle, end = phase.handle, self.elapsed_ms()
        status = handle.status or "ok"
        handle.detail = handle.detail or handle.text
        with self.lock:
            if not self.closed:
                self.record.phases.append(PhaseSpan(phase=phase.name, status=status, start_ms=phase.start_ms,
                                                    end_ms=end, detail=handle.detail, index=phase.index))
        self.emit(PhaseEnded(**self._ids(), phase=phase.name, index=phase.index, status=status,
                             duration_ms=end - phase.start_ms, detail=handle.detail,
                             summary=handle.summary(end - phase.start_ms)))

    @contextmanager
    def phase(self, name: PhaseName, index: int | None = None, detail: str = "") -> Iterator[PhaseHandle]:
        started = self.start_phase(name, index, detail)
        try:
            yield started.handle
        except BaseException:
            started.handle.status = started.handle.status or "failed"
            started.handle.text = started.handle.text or "failed"
            raise
        finally:
            self.end_phase(started)
