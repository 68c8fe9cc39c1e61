"""A command's output as it streams out of `docker exec`: kept up to a bound, and
handed on line by line to whoever parses it (the command harness).
"""

from __future__ import annotations

from typing import Callable

# A command's output kept in memory; the record caps it further.
OUTPUT_KEEP = 2_000_000


class OutputCollector:
    """Decodes a byte stream, keeps up to OUTPUT_KEEP chars, and calls back per line."""

    def __init__(self, on_line: Callable[[str], None] | None):
        self.on_line = on_line
        self.parts: list[str] = []
        self.kept = 0
        self.pending = b""

    def feed(self, data: bytes) -> None:
        if self.kept < OUTPUT_KEEP:
            text = data.decode("utf-8", "replace")
            self.parts.append(text[: OUTPUT_KEEP - self.kept])
            self.kept += len(text)
        if self.on_line:
            self.pending += data
            *lines, self.pending = self.pending.split(b"\n")
            for line in lines:
                self.on_line(line.decode("utf-8", "replace"))

    def close(self) -> None:
        if self.on_line and self.pending:
            self.on_line(self.pending.decode("utf-8", "replace"))
            self.pending = b""

    def text(self) -> str:
        return "".join(self.parts)
