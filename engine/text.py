"""Words and times as Proctor writes them, for the CLI and the studio alike:
durations (`4.1s`), plurals (`3 files`), epoch-millisecond clocks and stamps, and
the one-line form of a trajectory item that progress events and replays print."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import TrajectoryItem


def now_ms() -> int:
    return int(time.time() * 1000)


def iso_ms(epoch_ms: int | float) -> str:
    """Epoch milliseconds as the record writes times: `2026-11-29T17:40:47.120Z`."""
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def read_iso(stamp: str) -> float | None:
    """An ISO 8601 time (`…Z`, an offset, or none: UTC) as epoch milliseconds; None when it is
    no time. For times from files and streams, which may say anything."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp() * 1000


def iso_ms_or_none(epoch_ms: float | None) -> str | None:
    """`iso_ms`, or None for none or a time past what a record can write."""
    if epoch_ms is None:
        return None
    try:
        return iso_ms(epoch_ms)
    except (OverflowError, OSError, ValueError):
        return None


def utc_now() -> str:
    return iso_ms(now_ms())


def fmt_ms(ms: int | float | None) -> str:
    """A duration as people read it: 33ms, 4.1s, 41s, 2m05s, 1h02m; `—` for none; −5.4s
    before a trial's start (the wait for a slot)."""
    if ms is None:
        return "—"
    ms = int(ms)
    if ms < 0:
        return "−" + fmt_ms(-ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        s = ms / 1000
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    m, s = divmod(round(ms / 1000), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 file`, `3 files`; `many` for a word whose plural is not word + s (`sandboxes`)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def span_ms(started_at: str | None, finished_at: str | None) -> int | None:
    """Milliseconds between two stored ISO times; None when either is missing or unreadable."""
    if not (started_at and finished_at):
        return None
    try:
        delta = datetime.fromisoformat(finished_at) - datetime.fromisoformat(started_at)
    except ValueError:
        return None
    return int(delta.total_seconds() * 1000)


def clip_line(text: str, width: int = 60) -> str:
    """`text` on one line, whitespace runs as one space, elided past `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def item_line(item: TrajectoryItem) -> str:
    """A trajectory item in one line: `$ pytest -q → 1`, `assistant: Done.`, `tool edit`."""
    if item.kind == "command":
        return f"$ {clip_line(item.command or '')} → {item.exit_code}"
    if item.kind == "message":
        return f"{item.role}: {clip_line(item.text or '')}"
    if item.kind == "toolCall":
        return f"tool {item.name}"
    return f"{item.change} {item.path}"
