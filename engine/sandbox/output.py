"""A command's output as it streams out of `docker exec`: kept up to a bound, and
handed on line by line to whoever parses it (the command harness).

Linear in the bytes read, flat in memory: a line is gathered as a list of pieces
with a running length (joining a growing `bytes` on every chunk made a 50 MB line
take 32 s), and a line longer than LINE_READ is cut while it is read, the rest up to
its newline counted and dropped, never held. What is kept ends in a read mark when
the output went on (`limits.read_cut`), so redaction keeps no half of a key there.
"""

from __future__ import annotations

import codecs
from typing import Callable

from ..limits import LINE_READ, read_mark

# A command's output kept in memory, in bytes; the record caps it further.
OUTPUT_KEEP = 2_000_000


class OutputCollector:
    """Decodes a byte stream, keeps up to OUTPUT_KEEP bytes of it, and calls back per line."""

    def __init__(self, on_line: Callable[[str], None] | None):
        self.on_line = on_line
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0  # bytes past OUTPUT_KEEP
        # Incremental, so a character split across two chunks is decoded whole.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._line: list[bytes] = []  # the pieces of the line being read
        self._line_len = 0
        self._line_dropped = 0  # bytes of it past LINE_READ, counted, not kept

    def feed(self, data: bytes) -> None:
        room = OUTPUT_KEEP - self.kept
        if room > 0:
            piece = data[:room]
            self.parts.append(self._decoder.decode(piece))
            self.kept += len(piece)
        self.dropped += max(len(data) - room, 0)
        if self.on_line is None:
            return
        lines = data.split(b"\n")
        if len(lines) == 1:
            self._add(data)
            return
        self._add(lines[0])
        self._emit()
        for line in lines[1:-1]:
            if len(line) > LINE_READ:
                self._add(line)
                self._emit()
            else:
                self.on_line(line.decode("utf-8", "replace"))
        self._add(lines[-1])

    def _add(self, piece: bytes) -> None:
        room = LINE_READ - self._line_len
        if len(piece) > room:
            self._line_dropped += len(piece) - max(room, 0)
            piece = piece[: max(room, 0)]
        if piece:
            self._line.append(piece)
            self._line_len += len(piece)

    def _emit(self) -> None:
        assert self.on_line is not None
        line = b"".join(self._line).decode("utf-8", "replace")
        if self._line_dropped:
            line += f" … [line cut: {self._line_dropped:,} more bytes dropped]"
        self._line, self._line_len, self._line_dropped = [], 0, 0
        self.on_line(line)

    def close(self) -> None:
        if self.kept < OUTPUT_KEEP:
            self.parts.append(self._decoder.decode(b"", final=True))
        if self.on_line and (self._line_len or self._line_dropped):
            self._emit()

    def text(self) -> str:
        return "".join(self.parts) + (read_mark(self.dropped, "bytes") if self.dropped else "")
