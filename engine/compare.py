"""Two trials side by side: their trajectories aligned, their files, checks and figures compared.

Pure functions over two `TrialRecord`s (no Qt, no store): the compare view calls them.

Alignment. Each trajectory item becomes a key (`normalise`), and the two key
sequences are aligned by rapidfuzz's `Levenshtein.opcodes` (C++), so an
inserted or a deleted step shifts nothing after it. What a key keeps:

    command     "command" + the command text, masked
    toolCall    "toolCall" + the tool's name + its input as canonical JSON
                (sorted keys, compact), masked
    fileChange  "fileChange" + the path (masked) + the change kind
    message     "message" + the role; never the text, which differs every run

A key is bounded whatever the record holds (an imported record need not keep
SPEC.md's caps): it keeps KEY_CHARS characters of each text and of the input's
canonical JSON (LEAF_CHARS of each string in it), written piece by piece
without recursion, containers past limits.ITEM_DEPTH levels cut to a mark (the
engine stores none deeper), so a megabyte or a thousand levels of input cost
what its first KEY_CHARS do.

Masking replaces what differs between two runs of the same step by a
placeholder, in one pass of one regular expression (earlier rules win):

    <time>  ISO timestamps (2026-11-30T21:17:16.251Z, 2026-11-30 21:17) and
            clock times (21:17:16, 21:17:16.251)
    <uuid>  UUIDs (8-4-4-4-12 hex digits)
    <tmp>   the first component under /tmp/ or /var/tmp/ (/tmp/tmp.Xa81Qz/out
            becomes /tmp/<tmp>/out), as mktemp and tempfile name it
    <id>    prefixed ids: a short lowercase word, "_" and 8 or more hex digits
            (t_67ba13072b, t_cc9debeaec), or 8 or more letters and digits with
            two digits among them (call_abc123XYZ); test_greet1 is kept
    <hex>   hex runs of 7 or more digits with a digit among them, or of 12 or
            more (git shas, digests, addresses; 0x is kept)
    <dur>   a number with a unit of time (250ms, 1.5s, 3 sec, 2min)
    <n>     numbers of 5 or more digits (pids, ports, epochs, sizes); shorter
            numbers are kept, as they are usually the step itself (head -n 20)

Rows. An equal opcode gives `same` rows, a replace pairs items as `changed`
row by row (the longer side's extra items one-sided), an insert gives `only_b`
rows and a delete `only_a` rows. A divergence is a run of rows that are not
`same`; `divergences` holds the row where each run starts, for n/p stepping.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Hashable, Sequence
from itertools import islice
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from rapidfuzz.distance import Levenshtein

from . import limits
from .cost import recorded_cost
from .models import TrajectoryItem, TrialRecord, Validation
from .text import span_ms

RowKind = Literal["same", "changed", "only_a", "only_b"]
FileStatus = Literal["only_a", "only_b", "different"]

_VOLATILE = re.compile(
    r"(?P<time>\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b)"
    r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<tmp>(?<=/tmp/)[^/\s'\"`;|&)]+)"
    r"|(?P<id>\b[a-z]{1,5}_(?:[0-9a-f]{8,}|(?=(?:[a-zA-Z]*\d){2})[a-zA-Z0-9]{8,})\b)"
    r"|(?P<hex>\b(?:(?=[a-fA-F]*\d)[0-9a-fA-F]{7,}|[0-9a-fA-F]{12,})\b)"
    r"|(?P<dur>\b\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds|min|mins|minutes)\b)"
    r"|(?P<n>\b\d{5,}\b)"
)


def _placeholder(match: re.Match[str]) -> str:
    return f"<{match.lastgroup}>"


def mask(text: str) -> str:
    """`text` with its volatile parts replaced by placeholders (the rules are above)."""
    return _VOLATILE.sub(_placeholder, text)


# What a key keeps of one text or input: all that the engine stores of an item (its text cut to
# ITEM_TEXT, its input's JSON to TOOL_INPUT, escaping and marks included), no more.
KEY_CHARS = limits.ITEM_READ
# Of one string inside an input: so one huge value cannot hide the keys sorted after it.
LEAF_CHARS = limits.ITEM_TEXT


_JSON_STR = json.encoder.encode_basestring  # a str as JSON, not escaped to ASCII (C when it can)
_FLOATS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _scalar(value: Any) -> str:
    """A leaf as json.dumps writes it; never fails, whatever a harness handed over."""
    if isinstance(value, str):
        return _JSON_STR(value[:LEAF_CHARS])
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 10_000 else "<n>"  # str() refuses 4,300+ digits
    if isinstance(value, float):
        return _FLOATS.get(repr(value), repr(value))
    try:
        return _JSON_STR(str(value)[:LEAF_CHARS])
    except Exception:  # a __str__ that fails
        return _JSON_STR(type(value).__name__)


def _key_text(key: Any) -> str:
    """A mapping key as json.dumps writes it (1 → "1", None → "null")."""
    return key if isinstance(key, str) else _scalar(key).strip('"')


_RAW, _KEY, _VALUE = 0, 1, 2  # what a stack entry holds: punctuation, a key, a value


def canonical(value: Any, limit: int = KEY_CHARS) -> str:
    """The first `limit` characters of `value` as canonical JSON (sorted keys, compact, as
    json.dumps writes them), containers deeper than limits.ITEM_DEPTH cut to a mark. Written
    piece by piece from a stack, never recursing, and only as far as `limit` reaches."""
    pieces: list[str] = []
    size = 0
    todo: list[tuple[int, Any, int]] = [(_VALUE, value, 0)]  # (what, it, depth)
    while todo and size < limit:
        what, node, depth = todo.pop()
        if what == _RAW:
            piece = node
        elif what == _KEY:
            piece = _JSON_STR(node[:LEAF_CHARS]) + ":"
        elif isinstance(node, (dict, list, tuple)) and depth >= limits.ITEM_DEPTH:
            piece = _scalar(limits.CUT_DEEP)
        elif isinstance(node, dict):
            # Each entry writes at least `"":0,`, so no more than `reach` show. A larger
            # mapping (never in a stored item) is keyed by its first entries as written.
            reach = limit // 5 + 1
            first = sorted(((_key_text(k), v) for k, v in islice(node.items(), reach)),
                           key=lambda entry: entry[0])
            todo.append((_RAW, "}", depth))
            for i, (key, child) in enumerate(reversed(first)):
                todo.append((_VALUE, child, depth + 1))
                todo.append((_KEY, key, depth))
                if i < len(first) - 1:
                    todo.append((_RAW, ",", depth))
            piece = "{"
        elif isinstance(node, (list, tuple)):
            shown = node[: limit // 2 + 1]  # each element writes at least `0,`
            todo.append((_RAW, "]", depth))
            for i, child in enumerate(reversed(shown)):
                todo.append((_VALUE, child, depth + 1))
                if i < len(shown) - 1:
                    todo.append((_RAW, ",", depth))
            piece = "["
        else:
            piece = _scalar(node)
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces)[:limit]


def normalise(item: TrajectoryItem) -> str:
    """The key two runs of the same step share (what each kind keeps is above)."""
    if item.kind == "command":
        return "command\0" + mask((item.command or "")[:KEY_CHARS])
    if item.kind == "toolCall":
        return f"toolCall\0{(item.name or '')[:KEY_CHARS]}\0{mask(canonical(item.input))}"
    if item.kind == "fileChange":
        return f"fileChange\0{mask((item.path or '')[:KEY_CHARS])}\0{(item.change or '')[:KEY_CHARS]}"
    return f"message\0{(item.role or '')[:KEY_CHARS]}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Row(_Model):
    kind: RowKind
    a: int | None  # index in A's trajectory
    b: int | None  # index in B's trajectory


class Comparison(_Model):
    a_id: str
    b_id: str
    rows: list[Row]
    first_divergence: int | None  # a row index
    divergences: list[int]  # the row where each run of rows that are not `same` starts

    def next_divergence(self, row: int) -> int | None:
        """The first divergence after `row` (n), or None past the last."""
        at = bisect.bisect_right(self.divergences, row)
        return self.divergences[at] if at < len(self.divergences) else None

    def previous_divergence(self, row: int) -> int | None:
        """The last divergence before `row` (p), or None before the first."""
        at = bisect.bisect_left(self.divergences, row)
        return self.divergences[at - 1] if at else None


_Pair = tuple[RowKind, int | None, int | None]


def _pairs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[_Pair]:
    """Rows aligning two key sequences, by Levenshtein opcodes."""
    ids: dict[Hashable, int] = {}
    # Small ints hash and compare fastest in rapidfuzz; one dict lookup per item.
    a_ids = [ids.setdefault(key, len(ids)) for key in a]
    b_ids = [ids.setdefault(key, len(ids)) for key in b]
    rows: list[_Pair] = []
    for op in Levenshtein.opcodes(a_ids, b_ids):
        tag, a0, a1, b0, b1 = op.tag, op.src_start, op.src_end, op.dest_start, op.dest_end
        if tag == "equal":
            rows.extend(("same", a0 + i, b0 + i) for i in range(a1 - a0))
            continue
        paired = min(a1 - a0, b1 - b0) if tag == "replace" else 0
        rows.extend(("changed", a0 + i, b0 + i) for i in range(paired))
        rows.extend(("only_a", i, None) for i in range(a0 + paired, a1))
        rows.extend(("only_b", None, i) for i in range(b0 + paired, b1))
    return rows


def align(a: TrialRecord, b: TrialRecord) -> Comparison:
    """A's and B's trajectories aligned step by step, with where they part."""
    pairs = _pairs([normalise(item) for item in a.trajectory],
                   [normalise(item) for item in b.trajectory])
    rows = [Row(kind=kind, a=ia, b=ib) for kind, ia, ib in pairs]
    divergences = [i for i, (kind, _, _) in enumerate(pairs)
                   if kind != "same" and (i == 0 or pairs[i - 1][0] == "same")]
    return Comparison(a_id=a.id, b_id=b.id, rows=rows,
                      first_divergence=divergences[0] if divergences else None,
                      divergences=divergences)


# Per-turn files -------------------------------------------------------------------------------

class FileDelta(_Model):
    path: str
    status: FileStatus
    a_diff: str = ""  # this file's part of A's turn diff ("" when A did not change it)
    b_diff: str = ""


class TurnFiles(_Model):
    turn: int
    files: list[FileDelta]  # only in A, only in B, and in both but different; in path order

    def paths(self, status: FileStatus) -> list[str]:
        return [f.path for f in self.files if f.status == status]


def _header_path(rest: str) -> str:
    """The path of `diff --git a/P b/P` (rest is what follows `diff --git `)."""
    half = (len(rest) - 1) // 2
    same = rest[half:half + 1] == " " and rest[half + 1:] == "b/" + rest[2:half]
    if rest.startswith("a/") and same:
        return rest[2:half]
    # A rename (a/X b/Y): the file as it is after the turn.
    at = rest.rfind(" b/")
    return rest[at + 3:] if at >= 0 else rest


def split_diff(diff: str) -> dict[str, str]:
    """A git diff cut into each file's part, by path."""
    parts: dict[str, str] = {}
    path, start = None, 0
    for match in re.finditer(r"^diff --git (.*)$", diff, re.MULTILINE):
        if path is not None:
            parts[path] = diff[start:match.start()]
        path, start = _header_path(match.group(1)), match.start()
    if path is not None:
        parts[path] = diff[start:]
    return parts


def turn_files(a: TrialRecord, b: TrialRecord) -> list[TurnFiles]:
    """Per turn (by number): the files only A changed, only B, or both but differently."""
    a_turns = {t.index: t for t in a.turns}
    b_turns = {t.index: t for t in b.turns}
    result = []
    for index in sorted(a_turns.keys() | b_turns.keys()):
        sides = []
        for turn in (a_turns.get(index), b_turns.get(index)):
            diffs = split_diff(turn.diff) if turn else {}
            # A file the turn lists but whose diff was cut off still counts as changed.
            diffs.update({p: "" for p in (turn.files_changed if turn else []) if p not in diffs})
            sides.append(diffs)
        in_a, in_b = sides
        files = []
        for path in sorted(in_a.keys() | in_b.keys()):
            if path not in in_b:
                files.append(FileDelta(path=path, status="only_a", a_diff=in_a[path]))
            elif path not in in_a:
                files.append(FileDelta(path=path, status="only_b", b_diff=in_b[path]))
            elif in_a[path] != in_b[path]:
                files.append(FileDelta(path=path, status="different",
                                       a_diff=in_a[path], b_diff=in_b[path]))
        result.append(TurnFiles(turn=index, files=files))
    return result


# Checks and judge verdicts -------------------------------------------------------------------

class CheckPair(_Model):
    a: Validation | None
    b: Validation | None

    @property
    def differs(self) -> bool:
        return (self.a.status if self.a else None) != (self.b.status if self.b else None)


class Checks(_Model):
    pairs: list[CheckPair]
    first_difference: int | None  # index in pairs of the first whose status differs


def checks(a: TrialRecord, b: TrialRecord) -> Checks:
    """Checks and judge verdicts side by side, paired by kind and name in order."""
    rows = _pairs([(v.kind, v.name) for v in a.validations],
                  [(v.kind, v.name) for v in b.validations])
    pairs = [CheckPair(a=None if ia is None else a.validations[ia],
                       b=None if ib is None else b.validations[ib]) for _, ia, ib in rows]
    first = next((i for i, pair in enumerate(pairs) if pair.differs), None)
    return Checks(pairs=pairs, first_difference=first)


# Figures as deltas ----------------------------------------------------------------------------

class Deltas(_Model):
    """B − A of each figure; None when either side lacks it."""

    duration_ms: int | None
    command_count: int
    tokens: dict[str, int | None]  # input, output, cache_read, cache_write, reasoning
    timings: dict[str, int]  # the record's Timings fields (setup_ms, agent_ms, …)
    phases: dict[str, int]  # total ms per phase name, over the phases either side ran
    cost_usd: float | None = None  # None when either side's cost is unknown (engine.cost)


def duration_ms(record: TrialRecord) -> int | None:
    return span_ms(record.started_at, record.finished_at)


def _phase_totals(record: TrialRecord) -> dict[str, int]:
    totals: dict[str, int] = {}
    for span in record.phases:
        totals[span.phase] = totals.get(span.phase, 0) + span.end_ms - span.start_ms
    return totals


Number = TypeVar("Number", int, float)


def _minus(b: Number | None, a: Number | None) -> Number | None:
    return None if a is None or b is None else b - a


def deltas(a: TrialRecord, b: TrialRecord) -> Deltas:
    """Duration, command count, tokens, cost and timings of B minus those of A."""
    a_usage, b_usage = a.usage.model_dump(), b.usage.model_dump()
    a_timings, b_timings = a.timings.model_dump(), b.timings.model_dump()
    a_phases, b_phases = _phase_totals(a), _phase_totals(b)
    phase_names = list(dict.fromkeys([*a_phases, *b_phases]))
    return Deltas(
        duration_ms=_minus(duration_ms(b), duration_ms(a)),
        command_count=b.command_count - a.command_count,
        tokens={name: _minus(b_usage[name], a_usage[name]) for name in a_usage},
        timings={name: b_timings[name] - a_timings[name] for name in a_timings},
        phases={name: b_phases.get(name, 0) - a_phases.get(name, 0) for name in phase_names},
        cost_usd=_minus(recorded_cost(b), recorded_cost(a)),
    )
