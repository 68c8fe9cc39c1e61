"""The command harness: bring your own agent (SPEC.md "The command harness protocol").

Each turn runs the variant's command in /workspace with the prompt on standard
input and in PROCTOR_PROMPT. Lines that are JSON objects of a known `type`
become trajectory items; other lines are kept as the turn's raw output.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import Variant
from ..events import iso_ms
from ..models import TrajectoryItem, Usage
from ..sandbox.container import ENGINE_DIR, Sandbox
from . import OnItem, TurnOutput

ITEM_TYPES = {"message", "command", "toolCall", "fileChange"}


def item_time(at: Any) -> str | None:
    """An item's optional `at` (epoch ms) as the record writes times; anything else is dropped."""
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        return None
    return iso_ms(at)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def parse_line(line: str, turn: int) -> TrajectoryItem | Usage | tuple[str, str] | None:
    """One stdout line: an item, a usage report, ("finished", reason), or None (raw output)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if kind == "finished":
        return ("finished", str(data.get("reason", "")))
    if kind == "usage":
        return Usage(input=_int(data.get("input")) or 0, output=_int(data.get("output")) or 0,
                     cache_read=_int(data.get("cacheRead")) or 0,
                     cache_write=_int(data.get("cacheWrite")) or 0,
                     reasoning=_int(data.get("reasoning")))
    if kind not in ITEM_TYPES:
        return None
    common = {"kind": kind, "turn": turn, "at": item_time(data.get("at"))}
    if kind == "message":
        return TrajectoryItem(**common, role=str(data.get("role", "assistant")), text=_text(data.get("text")) or "")
    if kind == "command":
        return TrajectoryItem(**common, command=_text(data.get("command")) or "",
                              exit_code=_int(data.get("exitCode")), output=_text(data.get("output")) or "")
    if kind == "toolCall":
        return TrajectoryItem(**common, name=str(data.get("name", "")), input=data.get("input"),
                              output=_text(data.get("output")))
    return TrajectoryItem(**common, path=str(data.get("path", "")), change=str(data.get("change", "modify")))


class CommandHarness:
    rules_file = "AGENTS.md"

    def __init__(self, variant: Variant):
        assert variant.command
        self.command = variant.command

    def start(self, sandbox: Sandbox) -> str:
        return self.command

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput:
        prompt_path = f"{ENGINE_DIR}/prompt-{turn}.txt"
        sandbox.put_files({prompt_path.lstrip("/"): prompt.encode()}, base="/")
        result = TurnOutput()
        raw: list[str] = []

        def on_line(line: str) -> None:
            parsed = parse_line(line, turn)
            if isinstance(parsed, TrajectoryItem):
                result.items.append(parsed)
                on_item(parsed)
            elif isinstance(parsed, Usage):
                result.usage = result.usage.add(parsed)
            elif isinstance(parsed, tuple):
                result.finished_reason = parsed[1]
            else:
                raw.append(line)

        out = sandbox.exec(self.command, timeout=timeout, stdin_path=prompt_path,
                           env={"PROCTOR_PROMPT": prompt, "PROCTOR_TURN": str(turn)},
                           on_stdout_line=on_line)
        result.exit_code = out.exit_code
        result.raw_output = "\n".join(raw) + (("\n" + out.stderr) if out.stderr else "")
        return result
