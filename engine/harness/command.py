"""The command harness: bring your own agent (SPEC.md "The command harness protocol").

Each turn runs the variant's command in /workspace with the prompt on standard
input and in PROCTOR_PROMPT. Lines that are JSON objects of a known `type`
become trajectory items; other lines are kept as the turn's raw output.

Everything here comes from the agent, so nothing it prints may raise: a value
the record cannot hold (a NaN, a count past 64 bits, a lone surrogate, nesting
hundreds deep) is dropped, clamped or repaired with a warning on the item; a
line that is no JSON object stays raw output. Sizes are cut while reading
(engine/limits.py), generously, since redaction comes later, and each cut is
marked (`limits.read_cut`) so that redaction never keeps the half of a key it ends in.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .. import limits
from ..options import Command
from ..text import iso_ms
from ..models import TrajectoryItem, Usage
from ..sandbox.container import ENGINE_DIR, Sandbox
from . import OnItem, TurnOutput
from .registry import HarnessOptions
from .streams import StreamParser

ITEM_TYPES = {"message", "command", "toolCall", "fileChange"}
USAGE_FIELDS = {"input": "input", "output": "output", "cacheRead": "cache_read",
                "cacheWrite": "cache_write", "reasoning": "reasoning"}
EXIT_CODE_RANGE = (-(2**31), 2**31 - 1)
AT_MAX = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last time a record can write


def _shown(value: Any) -> str:
    """A value as a warning quotes it: a number short, even with thousands of digits; any other
    value by its type only, since the agent's text may hold anything (a lone surrogate)."""
    if not isinstance(value, (int, float)):
        return f"a {type(value).__name__}"
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}… ({len(text)} digits)"


class _Fields:
    """One line's fields as the record can hold them; every value changed is noted."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.warnings: list[str] = []
        self.cut = False

    def _note(self, key: str, why: str) -> None:
        self.warnings.append(f"{key}: {why}")

    def text(self, key: str, limit: int = limits.ITEM_READ,
             default: str | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        notes: set[str] = set()
        # A non-string is kept as its JSON text, as the protocol always did.
        text = value if isinstance(value, str) else limits.as_json_text(limits.clean(value, notes))
        fixed = limits.clean_text(text)
        if fixed is not text:
            notes.add("lone surrogates replaced")
        for why in sorted(notes):
            self._note(key, why)
        fixed, cut = limits.read_cut(fixed, limit)
        self.cut = self.cut or cut
        return fixed

    def name(self, key: str, default: str | None = None) -> str | None:
        return self.text(key, limits.NAME_READ, default)

    def number(self, key: str) -> int | None:
        """An integer field: None when absent or not a finite number (noted)."""
        value = self.data.get(key)
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, float):
            if not math.isfinite(value):
                self._note(key, f"{value} is not a number; dropped")
                return None
            return int(value)
        if isinstance(value, int):
            return value
        self._note(key, f"{_shown(value)} is not a number; dropped")
        return None

    def exit_code(self) -> int | None:
        code = self.number("exitCode")
        low, high = EXIT_CODE_RANGE
        if code is not None and not low <= code <= high:
            self._note("exitCode", f"{_shown(code)} is out of range; dropped")
            return None
        return code

    def count(self, key: str) -> int | None:
        """A token count, clamped to 0..USAGE_MAX (noted)."""
        count = self.number(key)
        if count is not None and not 0 <= count <= limits.USAGE_MAX:
            self._note(key, f"{_shown(count)} is out of range; clamped")
            count = min(max(count, 0), limits.USAGE_MAX)
        return count

    def time(self) -> str | None:
        """`at` (epoch ms) as the record writes times; anything else is dropped (noted)."""
        at = self.data.get("at")
        if at is None or isinstance(at, bool):
            return None
        if isinstance(at, (int, float)) and math.isfinite(at) and 0 <= at <= AT_MAX:
            return iso_ms(at)
        self._note("at", f"{_shown(at)} is not a time in epoch milliseconds; dropped")
        return None

    def value(self, key: str) -> Any:
        """A JSON value kept as it is (a toolCall's input), cleaned and cut."""
        notes: set[str] = set()
        value = limits.clean(self.data.get(key), notes)
        for why in sorted(notes):
            self._note(key, why)
        value, cut = limits.cap_input(value, limits.TOOL_INPUT_READ, limits.read_cut)
        self.cut = self.cut or cut
        return value


def item_time(at: Any) -> str | None:
    """An item's optional `at` (epoch ms) as the record writes times; anything else is dropped."""
    return _Fields({"at": at}).time()


def parse_line(line: str, turn: int, notes: list[str] | None = None
               ) -> TrajectoryItem | Usage | tuple[str, str] | None:
    """One stdout line: an item, a usage report, ("finished", reason), or None (raw output).
    Never raises. What was changed in a usage report is added to `notes`."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, an int of 4300+ digits, nesting too deep
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if not isinstance(kind, str):
        return None
    fields = _Fields(data)
    if kind == "finished":
        return ("finished", fields.text("reason", default="") or "")
    if kind == "usage":
        counts = {name: fields.count(key) for key, name in USAGE_FIELDS.items()}
        if notes is not None:
            notes.extend(f"usage {w}" for w in fields.warnings)
        reasoning = counts.pop("reasoning")
        return Usage(**{k: v or 0 for k, v in counts.items()}, reasoning=reasoning)
    if kind not in ITEM_TYPES:
        return None
    common: dict[str, Any] = {"kind": kind, "turn": turn, "at": fields.time()}
    if kind == "message":
        item = dict(role=fields.name("role", "assistant"), text=fields.text("text", default=""))
    elif kind == "command":
        item = dict(command=fields.text("command", default=""), exit_code=fields.exit_code(),
                    output=fields.text("output", default=""))
    elif kind == "toolCall":
        item = dict(name=fields.name("name", ""), input=fields.value("input"),
                    output=fields.text("output"))
    else:
        item = dict(path=fields.name("path", ""), change=fields.name("change", "modify"))
    return TrajectoryItem(**common, **item, truncated=fields.cut, warnings=fields.warnings)


class CommandStream(StreamParser):
    """One turn's stdout in the command protocol. What every agent's stream keeps bounded
    (items past ITEMS_PER_TURN, the last message, raw output, notes) StreamParser keeps."""

    def feed(self, line: str, at_ms: int | float | None = None) -> None:
        parsed = None
        if line.lstrip().startswith("{"):  # the rest is raw output: millions of lines go fast
            notes: list[str] = []
            try:
                parsed = parse_line(line, self.turn, notes)
            except Exception:  # a line the parser cannot read is the agent's output, never a crash
                parsed = None
            for note in notes:
                self.note(note)
        if parsed is None:
            self.keep_raw(line)
        elif isinstance(parsed, TrajectoryItem):
            self.emit(parsed)  # the recorder keeps what fits and counts the rest
        elif isinstance(parsed, Usage):
            self.result.usage = self.result.usage.add(parsed)
        else:
            self.result.finished_reason = parsed[1]


class CommandHarness:
    rules_file = "AGENTS.md"

    class Options(HarnessOptions):
        command: Command  # run in /workspace for each turn, as the agent's user

    def __init__(self, options: Options):
        self.command = options.command

    def start(self, sandbox: Sandbox) -> str:
        return self.command

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput:
        prompt_path = f"{ENGINE_DIR}/prompt-{turn}.txt"
        sandbox.put_files({prompt_path.lstrip("/"): prompt.encode()}, base="/")
        stream = CommandStream(turn, on_item)
        out = sandbox.exec(self.command, timeout=timeout, stdin_path=prompt_path,
                           env={"PROCTOR_PROMPT": prompt, "PROCTOR_TURN": str(turn)},
                           on_stdout_line=stream.feed, user="agent")
        return stream.finish().turn_output(out.exit_code, out.stderr)
