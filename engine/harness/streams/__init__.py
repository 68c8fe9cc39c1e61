"""Agent CLIs' JSON-lines streams turned into trajectories: one parser per CLI.

Each parser reads one turn's stdout, line by line (`StreamParser.feed`), and ends
with a `StreamResult`: trajectory items (`message`, `command`, `toolCall`,
`fileChange`), usage, the model that served the turn, the CLI's session id (to
resume the next turn), the final message and a finished reason in the command
protocol's terms (SPEC.md): `done`, an agent's own budget (`max_turns`), or
`failed: …` when the CLI reports it could not run (the trial is then void).
A turn whose stream has no final event has no finished reason and is still scored.

Everything in a stream is untrusted. Nothing here raises on what a line holds: a
line that is no JSON object is kept as raw output, a field of the wrong type is
skipped with a warning on its item (or a note in the raw output), and every text
and list is cut while reading (engine/limits.py), marked, before redaction.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ... import limits
from ...models import TrajectoryItem, Usage
from ...text import iso_ms, iso_ms_or_none, now_ms, read_iso
from .. import OnItem, TurnOutput

NOTES_KEPT = 20  # notes about the stream itself (wrong-typed fields outside any item), per turn
NOTE_MAX = 300  # one warning: a path in the event and what was wrong there
EXIT_CODE_MIN, EXIT_CODE_MAX = -(2**31), 2**31 - 1
ID_MAX = 200  # a session id, model name or version: short words, never a text
# A session id goes back on the next turn's command line (`--resume ID`): only plain words.
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]*")
_FAILED = "failed: "
ENDED = "the stream ended before this tool's result"
NO_ID = "a tool call without an id: its result cannot be matched"


@dataclass
class StreamResult:
    """What one turn's stream said; `finished_reason` is None when it had no final event."""

    items: list[TrajectoryItem] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    usage_reported: bool = False  # whether the stream carried any token counts at all
    session_usage: Usage | None = None  # the session's running total, where the CLI gives one
    model: str | None = None
    session_id: str | None = None
    version: str | None = None  # the CLI's own version, when its stream says it
    cost_usd: float | None = None  # what the CLI itself reported (Claude Code); informative only
    final_message: str = ""
    finished_reason: str | None = None
    raw_output: str = ""
    items_dropped: int = 0  # items past ITEMS_PER_TURN, still handed to `on_item`

    @property
    def status(self) -> Literal["completed", "failed"]:
        """A turn's status as the record keeps it; `aborted` is the engine's to decide."""
        failed = self.finished_reason is not None and self.finished_reason.startswith("failed:")
        return "failed" if failed else "completed"

    def turn_output(self, exit_code: int | None, stderr: str = "") -> TurnOutput:
        """The harness protocol's form of this turn, for `Harness.run_turn` to return; the CLI's
        stderr joins the raw output, cut before redaction as the command harness cuts it."""
        stderr, _ = limits.read_cut(limits.clean_text(stderr), limits.RAW_READ)
        raw = "\n".join(part for part in (self.raw_output, stderr) if part)
        return TurnOutput(items=self.items, usage=self.usage, model=self.model,
                          finished_reason=self.finished_reason, exit_code=exit_code, raw_output=raw)


def failed(reason: str) -> str:
    """A finished reason that voids the trial, quoting the CLI on one line, cut before redaction."""
    line = " ".join(limits.clean_text(reason).split())
    return _FAILED + (limits.quote(line, limits.FAILURE_REASON) or "the CLI reported an error")


def word(value: Any) -> str | None:
    """A session id, model name or version: a short plain word, or None."""
    if isinstance(value, str) and len(value) <= ID_MAX and _WORD.fullmatch(value):
        return value
    return None


def iso_time(value: Any) -> str | None:
    """An RFC 3339 time from a stream (`2026-11-29T17:40:47.120Z`) as the record writes times."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    return iso_ms_or_none(read_iso(value))


class Fields:
    """One JSON object from the stream, read field by field: a value of the wrong type is None
    and a warning (`path: expected a string, got a list`); texts are repaired and cut while
    reading (`cut` is set). Nested objects share the warnings, with their path."""

    def __init__(self, data: dict[str, Any], warnings: list[str] | None = None, path: str = ""):
        self.data = data
        self.warnings = warnings if warnings is not None else []
        self.path = path
        self.cut = [False]  # shared with nested objects, so one flag covers an item

    def warn(self, text: str) -> None:
        if len(self.warnings) < NOTES_KEPT:  # one event's warnings stay few and short
            self.warnings.append(limits.quote(limits.clean_text(text), NOTE_MAX))

    def warn_all(self, warnings: list[str]) -> None:
        for text in warnings:
            self.warn(text)

    def _wrong(self, key: str, expected: str, value: Any) -> None:
        self.warn(f"{self.path}{key}: expected {expected}, got a {type(value).__name__}; skipped")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def text(self, key: str, limit: int = limits.ITEM_READ) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self._wrong(key, "a string", value)
            return None
        return self.cut_text(value, limit)

    def cut_text(self, value: str, limit: int = limits.ITEM_READ) -> str:
        fixed = limits.clean_text(value)
        if fixed is not value:
            self.warn(f"{self.path or 'text'}: lone surrogates replaced")
        fixed, cut = limits.read_cut(fixed, limit)
        self.cut[0] = self.cut[0] or cut
        return fixed

    def name(self, key: str) -> str | None:
        return self.text(key, limits.NAME_READ)

    def integer(self, key: str) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._wrong(key, "a number", value)
            return None
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                self._wrong(key, "a finite number", value)
                return None
            value = int(value)
        return value

    def exit_code(self, key: str) -> int | None:
        return checked_exit_code(self.integer(key), self, key)

    def count(self, key: str) -> int:
        """A token count: 0 when absent or wrong, clamped to 0..USAGE_MAX (noted)."""
        value = self.integer(key)
        if value is None:
            return 0
        if not 0 <= value <= limits.USAGE_MAX:
            self.warn(f"{self.path}{key}: out of range; clamped")
            value = min(max(value, 0), limits.USAGE_MAX)
        return value

    def flag(self, key: str) -> bool | None:
        value = self.data.get(key)
        if value is None or isinstance(value, bool):
            return value
        self._wrong(key, "true or false", value)
        return None

    def number(self, key: str) -> float | None:
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if value is not None:
                self._wrong(key, "a number", value)
            return None
        value = float(value)
        return value if value == value and abs(value) != float("inf") else None

    def obj(self, key: str) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self._wrong(key, "an object", value)
            return None
        nested = Fields(value, self.warnings, f"{self.path}{key}.")
        nested.cut = self.cut
        return nested

    def objs(self, key: str, limit: int = limits.ITEMS_PER_TURN) -> list[Fields]:
        """A list of objects, each read as Fields; other entries skipped, cut at `limit`."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self._wrong(key, "a list", value)
            return []
        kept = []
        for index, entry in enumerate(value[:limit]):
            if isinstance(entry, dict):
                nested = Fields(entry, self.warnings, f"{self.path}{key}[{index}].")
                nested.cut = self.cut
                kept.append(nested)
            else:
                self._wrong(f"{key}[{index}]", "an object", entry)
        if len(value) > limit:
            self.cut[0] = True
        return kept

    def value(self, key: str) -> Any:
        """A JSON value kept as it is (a tool's input): cleaned, and cut as JSON text if long."""
        return self.capped(self.data.get(key), key)

    def capped(self, value: Any, key: str = "input") -> Any:
        notes: set[str] = set()
        value = limits.clean(value, notes)
        for why in sorted(notes):
            self.warn(f"{self.path}{key}: {why}")
        value, cut = limits.cap_input(value, limits.TOOL_INPUT_READ, limits.read_cut)
        self.cut[0] = self.cut[0] or cut
        return value

    def item(self, kind: str, turn: int, at: str | None, **fields: Any) -> TrajectoryItem:
        return TrajectoryItem(kind=kind, turn=turn, at=at,  # type: ignore[arg-type]
                              truncated=self.cut[0], warnings=list(self.warnings), **fields)


def checked_exit_code(code: int | None, reading: Fields, key: str = "exit code") -> int | None:
    """An exit code as a process can have one; anything else is dropped (noted)."""
    if code is not None and not EXIT_CODE_MIN <= code <= EXIT_CODE_MAX:
        reading.warn(f"{reading.path}{key}: out of range; dropped")
        return None
    return code


class ToolCall:
    """A tool call waiting for its result. It keeps only what its items need, already cut, never
    the event it came from: a stream may leave thousands unanswered."""

    def __init__(self, fields: Fields, name: str, at: str | None, key: str):
        self.name, self.at = name, at
        self.fields = Fields({}, fields.warnings)
        self.fields.cut = fields.cut
        args = fields.data.get(key)
        args = args if isinstance(args, dict) else {}
        self.command = _cut_arg(args, "command", self.fields, limits.ITEM_READ)
        self.path = _cut_arg(args, "file_path", self.fields, limits.NAME_READ) or _cut_arg(
            args, "notebook_path", self.fields, limits.NAME_READ)
        self.input = fields.value(key)


def _cut_arg(args: dict[str, Any], key: str, reading: Fields, limit: int) -> str | None:
    value = args.get(key)
    return reading.cut_text(value, limit) if isinstance(value, str) else None


def output_text(content: Any, reading: Fields) -> str:
    """A tool result's content as text: a string, or the text blocks of a list (Anthropic and
    MCP content), joined; other blocks are named. Cut while reading."""
    if isinstance(content, str):
        return reading.cut_text(content)
    if not isinstance(content, list):
        text = limits.as_json_text(limits.clean(content))
        return "" if content is None else reading.cut_text(text)
    parts: list[str] = []
    size = 0
    for block in content[:limits.EVIDENCE_ENTRIES]:
        if size > limits.ITEM_READ:
            break
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            part = block["text"][:limits.ITEM_READ + 1]
        elif isinstance(block, dict) and isinstance(block.get("type"), str):
            part = f"[{block['type'][:100]}]"
        else:
            continue
        parts.append(part)
        size += len(part) + 1
    return reading.cut_text("\n".join(parts))


class StreamParser:
    """One turn's stdout, line by line, into a StreamResult. Subclasses read one CLI's events
    (`event`); this class keeps what every CLI shares bounded: at most ITEMS_PER_TURN items
    (and the last message), RAW_READ characters of raw output, NOTES_KEPT notes."""

    def __init__(self, turn: int, on_item: OnItem | None = None):
        self.turn = turn
        self.on_item = on_item
        self.result = StreamResult()
        self.raw: list[str] = []
        self.raw_chars = 0
        self.raw_dropped = 0
        self.notes: list[str] = []
        self.last_message: TrajectoryItem | None = None
        self.now: str | None = None  # the time the current line arrived, for items without one

    # --- reading lines ------------------------------------------------------------------------

    def feed(self, line: str, at_ms: int | float | None = None) -> None:
        """One line of stdout; `at_ms` (epoch ms) is when it arrived, the time of the items it
        makes when the stream itself has none. Never raises."""
        self.now = iso_ms(at_ms if at_ms is not None else now_ms())
        data = None
        stripped = line.strip()
        # A line past LINE_READ was cut by the reader: what is left is no JSON, so it stays raw.
        if stripped.startswith("{") and len(stripped) <= limits.LINE_READ:
            try:
                data = json.loads(stripped)
            except (ValueError, RecursionError):  # not JSON, a 4300-digit int, nesting too deep
                data = None
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            self.keep_raw(line)
            return
        try:
            self.event(Fields(data), data["type"])
        except Exception as e:  # a shape no parser foresaw is the CLI's output, never a crash
            self.note(f"an event of type {data['type'][:100]!r} could not be read "
                      f"({type(e).__name__})")
            self.keep_raw(line)

    def feed_all(self, text: str) -> StreamResult:
        """A whole recorded stream at once (tests, and re-reading saved output)."""
        for line in text.splitlines():
            self.feed(line)
        return self.finish()

    def keep_raw(self, line: str) -> None:
        if self.raw_chars < limits.RAW_READ:
            kept, _ = limits.read_cut(limits.clean_text(line), limits.RAW_READ - self.raw_chars)
            self.raw.append(kept)
            self.raw_chars += len(kept) + 1
        else:
            self.raw_dropped += 1

    def note(self, text: str) -> None:
        """Something about the stream itself, kept at the head of the raw output."""
        if len(self.notes) < NOTES_KEPT:
            self.notes.append(limits.quote(limits.clean_text(text), limits.FAILURE_REASON))

    def notes_from(self, fields: Fields) -> None:
        for warning in fields.warnings:
            self.note(warning)

    # --- what subclasses call ------------------------------------------------------------------

    def event(self, fields: Fields, kind: str) -> None:
        raise NotImplementedError

    def emit(self, item: TrajectoryItem) -> None:
        result = self.result
        if len(result.items) < limits.ITEMS_PER_TURN:
            result.items.append(item)
        else:
            result.items_dropped += 1
            if item.kind == "message" and item.role == "assistant":
                self.last_message = item  # so the final message is still the last one
        if self.on_item is not None:
            self.on_item(item)  # the recorder keeps what fits and counts the rest

    def message(self, fields: Fields, text: str, role: str = "assistant",
                at: str | None = None) -> None:
        if not text:
            return
        self.emit(fields.item("message", self.turn, at or self.now, role=role, text=text))
        if role == "assistant":
            self.result.final_message = text

    def session(self, value: Any, source: str) -> None:
        if value is None:
            return
        session = word(value)
        if session is None:
            self.note(f"{source}: not a session id; ignored")
        else:
            self.result.session_id = session

    def model(self, value: Any, source: str) -> None:
        if value is None:
            return
        model = word(value)
        if model is None:
            self.note(f"{source}: not a model name; ignored")
        else:
            self.result.model = model

    def usage(self, usage: Usage) -> None:
        self.result.usage = usage
        self.result.usage_reported = True

    # --- the end --------------------------------------------------------------------------------

    def flush(self) -> None:
        """Called once the stream has ended: items still waiting for their result are emitted."""

    def finish(self) -> StreamResult:
        self.flush()
        result = self.result
        if self.last_message is not None:
            result.items.append(self.last_message)
        lines = [f"[proctor] {note}" for note in self.notes] + self.raw
        if self.raw_dropped:
            lines.append(f"… [{self.raw_dropped:,} more lines of raw output dropped]")
        result.raw_output = "\n".join(lines)
        result.final_message, _ = limits.read_cut(result.final_message, limits.ITEM_READ)
        return result
