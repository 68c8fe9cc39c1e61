"""Phase spans derived from events, so a running trial's timeline grows live.

The timeline is computed from start/end pairs (never stored twice): a phase
that has started but not ended is open, drawn up to "now".
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.events import Event, PhaseEnded, PhaseStarted, TrialStarted
from engine.models import TrialRecord


@dataclass
class Span:
    phase: str
    index: int | None
    start_ms: int
    end_ms: int | None  # None: still running
    status: str = "running"
    detail: str = ""

    @property
    def label(self) -> str:
        return self.phase if self.index is None else f"{self.phase} {self.index}"


def spans_from_record(record: TrialRecord) -> list[Span]:
    return [Span(s.phase, s.index, s.start_ms, s.end_ms, s.status, s.detail) for s in record.phases]


class LiveSpans:
    """Folds one trial's events into spans, relative to its first event."""

    def __init__(self) -> None:
        self.t0: int | None = None
        self.spans: list[Span] = []
        self._open: dict[tuple[str, int | None], Span] = {}

    def apply(self, event: Event) -> bool:
        """Returns True when the spans changed."""
        if isinstance(event, TrialStarted) and self.t0 is None:
            self.t0 = event.at
            return False
        if not isinstance(event, (PhaseStarted, PhaseEnded)):
            return False
        if self.t0 is None:
            self.t0 = event.at
        at = event.at - self.t0
        key = (event.phase, event.index)
        if isinstance(event, PhaseStarted):
            span = Span(event.phase, event.index, at, None, "running", event.detail)
            self._open[key] = span
            self.spans.append(span)
        else:
            span = self._open.pop(key, None)
            if span is None:  # joined mid-phase: the start came before we listened
                span = Span(event.phase, event.index, at - event.duration_ms, None)
                self.spans.append(span)
            span.end_ms, span.status, span.detail = at, event.status, event.detail
        return True

    def now_ms(self, now_epoch_ms: int) -> int:
        return 0 if self.t0 is None else now_epoch_ms - self.t0

    @property
    def running_label(self) -> str:
        """The phase it is in now ("turn 2"), or "starting" before the first one."""
        return next((s.label for s in reversed(self.spans) if s.end_ms is None), "starting")
