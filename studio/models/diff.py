"""Unified diffs as the engine stores them (git style), cut into files lazily.

A cumulative diff can run to tens of megabytes and the studio shows one file at a
time, so `parse_diff` only finds file boundaries with `str.find` and reads each
file's header; a file's lines are read when that file is shown, and its +/−
counts are `str.count`s over its own span, made on first use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

RowKind = Literal["hunk", "context", "add", "delete", "change", "meta"]
Row = tuple[str | None, str | None, RowKind]
FileStatus = Literal["added", "deleted", "modified", "renamed"]

_GIT = "diff --git "
_BOUNDARY = "\n" + _GIT  # hunk lines start with " ", "+", "-", "\\" or "@": never a boundary
_HUNK = re.compile(r"@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass(eq=False)
class FileDiff:
    """One file's section of a diff: offsets into the whole text, which it keeps by reference."""

    source: str = field(repr=False)
    path: str
    start: int
    end: int
    body_start: int  # the first hunk header ("@@"), or `end` when the file has none
    binary: bool = False
    status: FileStatus = "modified"
    old_path: str | None = None

    @cached_property
    def added(self) -> int:
        # The body starts at "@@", so "---"/"+++" headers are never counted.
        return 0 if self.binary else self.source.count("\n+", self.body_start, self.end)

    @cached_property
    def removed(self) -> int:
        return 0 if self.binary else self.source.count("\n-", self.body_start, self.end)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def header(self) -> str:
        return self.source[self.start:self.body_start]

    @property
    def body(self) -> str:
        """The hunks: from the first "@@" to the end of the file's section."""
        return self.source[self.body_start:self.end]

    def line_count(self) -> int:
        return self.source.count("\n", self.body_start, self.end)

    def head(self, max_lines: int) -> str:
        """The first `max_lines` lines of the body, found without splitting the rest."""
        pos = self.body_start
        for _ in range(max_lines):
            nl = self.source.find("\n", pos, self.end)
            if nl < 0:
                return self.body
            pos = nl + 1
        return self.source[self.body_start:pos]


def parse_diff(text: str) -> list[FileDiff]:
    """The files of a git-style diff, in the diff's order. Reads headers only."""
    files: list[FileDiff] = []
    if not text:
        return files
    pos = 0 if text.startswith(_GIT) else _next(text, 0)
    if pos < 0:
        # Not git style (e.g. a bare `diff -u`): one section, named by its "+++" line.
        if "\n@@" in text or text.startswith("@@"):
            files.append(_file(text, 0, len(text)))
        return files
    while pos >= 0:
        nxt = _next(text, pos)
        files.append(_file(text, pos, nxt if nxt >= 0 else len(text)))
        pos = nxt
    return files


def _next(text: str, pos: int) -> int:
    i = text.find(_BOUNDARY, pos)
    return i + 1 if i >= 0 else -1


def _file(text: str, start: int, end: int) -> FileDiff:
    body = 0 if text.startswith("@@", start) else text.find("\n@@", start, end)
    body_start = end if body < 0 else (start if body == 0 else body + 1)
    header = text[start:body_start]
    binary = "\nBinary files " in header or "\nGIT binary patch" in header or header.startswith(
        "Binary files ")
    status: FileStatus = "modified"
    if "\nnew file mode" in header:
        status = "added"
    elif "\ndeleted file mode" in header:
        status = "deleted"
    elif "\nrename to " in header:
        status = "renamed"
    path, old_path = _paths(header, status)
    return FileDiff(text, path, start, end, body_start, binary, status, old_path)


def _paths(header: str, status: FileStatus) -> tuple[str, str | None]:
    first = header.split("\n", 1)[0]
    rename_from = _header_value(header, "rename from ")
    rename_to = _header_value(header, "rename to ")
    if rename_to:
        return rename_to, rename_from
    if first.startswith(_GIT):
        rest = first[len(_GIT):].replace('"', "")
        # "a/P b/P": the engine names the same path twice, so the middle splits it even with spaces.
        half = (len(rest) - 5) // 2
        if rest.startswith("a/") and rest == f"a/{rest[2:2 + half]} b/{rest[2:2 + half]}":
            return rest[2:2 + half], None
    plus, minus = _header_value(header, "+++ "), _header_value(header, "--- ")
    for name in (plus, minus) if status != "deleted" else (minus, plus):
        if name and name != "/dev/null":
            return name[2:] if name[:2] in ("a/", "b/") else name, None
    if first.startswith(_GIT) and " b/" in first:
        return first.rsplit(" b/", 1)[1], None
    return first or "(diff)", None


def _header_value(header: str, prefix: str) -> str | None:
    i = header.find("\n" + prefix)
    if i < 0:
        if not header.startswith(prefix):
            return None
        i = -1
    j = header.find("\n", i + 1)
    return header[i + 1 + len(prefix): j if j >= 0 else len(header)].rstrip("\t\r")


def _lines(hunk_text: str) -> list[str]:
    lines = hunk_text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def unified_rows(hunk_text: str) -> list[tuple[int | None, int | None, RowKind]]:
    """(old line number, new line number, kind) for each line of the hunks, as shown."""
    rows: list[tuple[int | None, int | None, RowKind]] = []
    old = new = 0
    for line in _lines(hunk_text):
        head = line[:1]
        if head == "+":
            new += 1
            rows.append((None, new, "add"))
        elif head == "-":
            old += 1
            rows.append((old, None, "delete"))
        elif head == "@":
            m = _HUNK.match(line)
            if m:
                old, new = int(m.group(1)) - 1, int(m.group(2)) - 1
            rows.append((None, None, "hunk"))
        elif head == "\\":
            rows.append((None, None, "meta"))
        else:
            old, new = old + 1, new + 1
            rows.append((old, new, "context"))
    return rows


def split_rows(hunk_text: str) -> list[Row]:
    """The hunks as side-by-side rows: (old line, new line, kind), markers stripped.

    Removed lines pair with the added lines that follow them ("change"); a side
    with no counterpart is None, which the split view draws as a blank filler
    line so both sides stay aligned row for row.
    """
    rows: list[Row] = []
    minus: list[str] = []
    plus: list[str] = []

    def flush() -> None:
        for i in range(max(len(minus), len(plus))):
            old = minus[i] if i < len(minus) else None
            new = plus[i] if i < len(plus) else None
            rows.append((old, new, "change" if old is not None and new is not None
                         else "delete" if old is not None else "add"))
        minus.clear()
        plus.clear()

    for line in _lines(hunk_text):
        head = line[:1]
        if head == "-":
            if plus:  # "-" after "+": a new change block
                flush()
            minus.append(line[1:])
        elif head == "+":
            plus.append(line[1:])
        else:
            flush()
            if head == "@":
                rows.append((line, line, "hunk"))
            elif head == "\\":
                rows.append((line, line, "meta"))
            else:
                rows.append((line[1:], line[1:], "context"))
    flush()
    return rows


def split_numbers(rows: list[Row]) -> list[tuple[int | None, int | None]]:
    """Line numbers of each side of `split_rows` rows (None for fillers, hunk and meta rows)."""
    numbers: list[tuple[int | None, int | None]] = []
    old = new = 0
    for old_line, new_line, kind in rows:
        if kind == "hunk":
            m = _HUNK.match(old_line or "")
            if m:
                old, new = int(m.group(1)) - 1, int(m.group(2)) - 1
            numbers.append((None, None))
        elif kind == "meta":
            numbers.append((None, None))
        else:
            if old_line is not None:
                old += 1
            if new_line is not None:
                new += 1
            numbers.append((old if old_line is not None else None,
                            new if new_line is not None else None))
    return numbers
