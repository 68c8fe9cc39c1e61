"""Typed, frozen engine events: one discriminated union on `type`.

A phase is a start/end pair (with progress in between), so a timeline is
derived from the events and never stored twice. Every event names its batch
and, where it has one, its trial; `at` is epoch milliseconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter, field_serializer

from .models import MAX_ATTEMPT, Failure, Outcome, PhaseName, PhaseStatus, TrajectoryItem
from .text import now_ms


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_id: str
    at: int = Field(default_factory=now_ms)


class _TrialEvent(_Event):
    trial_id: str
    case_id: str
    variant: str
    trial: int
    # Its place among the trial's events, 1, 2, … in the order the Recorder emitted them (0:
    # unnumbered, as events stored before numbering read): so a reader of both the store and
    # the live stream tells which events it already has.
    n: int = 0


class BatchStarted(_Event):
    type: Literal["batch_started"] = "batch_started"
    trigger: str
    runs: int
    trials: int


class BatchFinished(_Event):
    type: Literal["batch_finished"] = "batch_finished"
    status: str


class TrialStarted(_TrialEvent):
    type: Literal["trial_started"] = "trial_started"
    run_id: str
    attempt: StrictInt = Field(default=1, ge=1, le=MAX_ATTEMPT)  # 2, 3, …: a void trial run again


class PhaseStarted(_TrialEvent):
    type: Literal["phase_started"] = "phase_started"
    phase: PhaseName
    index: int | None = None
    detail: str = ""


class PhaseProgress(_TrialEvent):
    """Something that happened inside a phase: a trajectory item, a setup line."""

    type: Literal["phase_progress"] = "phase_progress"
    phase: PhaseName
    index: int | None = None
    message: str
    item: TrajectoryItem | None = None

    @field_serializer("item")
    def _item_as_stored(self, item: TrajectoryItem | None) -> dict[str, Any] | None:
        # Only its kind's fields, as the record keeps it: the JSON stores have always held.
        return None if item is None else item.to_json()


class PhaseEnded(_TrialEvent):
    type: Literal["phase_ended"] = "phase_ended"
    phase: PhaseName
    index: int | None = None
    status: PhaseStatus
    duration_ms: int
    # Short form for the record ("cache hit"); summary is the `-v` line's body.
    detail: str = ""
    summary: str = ""


class TrialFinished(_TrialEvent):
    type: Literal["trial_finished"] = "trial_finished"
    outcome: Outcome
    failure: Failure | None = None
    command_count: int = 0
    duration_ms: int = 0


Event = Annotated[
    Union[BatchStarted, BatchFinished, TrialStarted, PhaseStarted, PhaseProgress,
          PhaseEnded, TrialFinished],
    Field(discriminator="type"),
]
EventAdapter: TypeAdapter[Event] = TypeAdapter(Event)

EventSink = Callable[[Event], None]


def parse_event(data: str | bytes) -> Event:
    return EventAdapter.validate_json(data)
