"""Words and times as Proctor writes them, for the CLI and the studio alike:
durations (`4.1s`), plurals (`3 files`), and epoch-millisecond clocks and stamps."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def now_ms() -> int:
    return int(time.time() * 1000)


def iso_ms(epoch_ms: int | float) -> str:
    """Epoch milliseconds as the record writes times: `2026-11-29T17:40:47.120Z`."""
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def utc_now() -> str:
    return iso_ms(now_ms())


def fmt_ms(ms: int | float | None) -> str:
    """A duration as people read it: 33ms, 4.1s, 41s, 2m05s, 1h02m; `—` for none."""
    if ms is None:
        return "—"
    ms = int(ms)
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


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
