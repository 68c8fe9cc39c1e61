"""Claude Code's `claude -p --output-format stream-json --verbose` stream.

Format followed: Claude Code 2.1.x as of 2.1.240 (the CLI bundled with claude-agent-sdk-python
0.2.143; field names from that SDK's `_internal/message_parser.py` and `types.py`). Events:
- `system`/`init`: `session_id`, `model`, `claude_code_version`, `tools`, `cwd`;
- `assistant`: `message` (an Anthropic message: `id`, `model`, `content` blocks `text`,
  `thinking`, `tool_use` {id, name, input}, `usage`), `parent_tool_use_id` (set in a subagent);
- `user`: `message.content` blocks `tool_result` {tool_use_id, content, is_error} and
  `tool_use_result` (the tool's structured result: Bash `stdout`/`stderr`/`interrupted`,
  Write `type` "create"/"update");
- `result`: `subtype` ("success", "error_max_turns", "error_during_execution", …),
  `is_error`, `result` (the final text, or "API Error: …"), `session_id`, `usage`,
  `modelUsage`, `total_cost_usd`, `num_turns`, `terminal_reason`.
No event carries a time: items take the time their line arrived.

Anthropic's `input_tokens` leaves out cache reads and writes; Proctor's `input` counts all
input (as OpenAI's does), so the three are added.

A turn's usage is the sum of its own API messages (each counted once, by message id, at its
last event): since 2.1.277 a process started with `--resume` reports in `result` the running
totals of the whole session (`total_cost_usd`, `modelUsage`), which would bill every earlier
turn again. The result's figures are kept as `session_usage` and `cost_usd`, and are the
turn's usage only when no message carried any.
"""

from __future__ import annotations

import re

from ... import limits
from ...models import Usage
from . import (ENDED, NO_ID, Fields, StreamParser, ToolCall, checked_exit_code, failed,
               output_text, word)

SHELL_TOOLS = {"Bash"}
EDIT_TOOLS = {"Edit", "MultiEdit", "Write", "NotebookEdit"}
# Result subtypes that are the agent's own budget running out: the turn is scored.
BUDGETS = {"error_max_turns": "max_turns", "error_max_budget_usd": "max_budget"}
SYNTHETIC = "<synthetic>"
_EXIT = re.compile(r"Exit code (-?\d{1,10})\n?")


class ClaudeStream(StreamParser):
    def __init__(self, turn: int, on_item=None):
        super().__init__(turn, on_item)
        self.calls: dict[str, ToolCall] = {}
        self.message_usage: dict[str, Usage] = {}  # this turn's API messages, by id

    def event(self, fields: Fields, kind: str) -> None:
        if kind == "system":
            if fields.data.get("subtype") == "init":
                self.session(fields.data.get("session_id"), "system.session_id")
                self.model(fields.data.get("model"), "system.model")
                self.result.version = word(fields.data.get("claude_code_version"))
            self.notes_from(fields)
        elif kind == "assistant":
            self._assistant(fields)
        elif kind == "user":
            self._user(fields)
        elif kind == "result":
            self._result(fields)
        # Other types (stream_event, rate_limit_event, hook events) carry nothing for the record.

    def _assistant(self, fields: Fields) -> None:
        message = fields.obj("message")
        if message is None:
            self.notes_from(fields)
            return
        top_level = fields.data.get("parent_tool_use_id") is None
        model = message.data.get("model")
        # A subagent may run on another model, and "<synthetic>" marks text the CLI wrote itself.
        if top_level and model != SYNTHETIC:
            self.model(model, "assistant.message.model")
        usage = message.obj("usage")
        message_id = word(message.data.get("id"))
        known = self.message_usage
        if usage is not None and message_id and (message_id in known
                                                 or len(known) < limits.ITEMS_PER_TURN):
            # One API message arrives as one event per content block, each with the same usage.
            known[message_id] = _usage(usage)
        for entry in message.objs("content"):
            block = Fields(entry.data)  # each item carries its own warnings and cut mark
            block_type = block.data.get("type")
            if block_type == "text":
                self.message(block, block.text("text") or "",
                             role="assistant" if top_level else "subagent")
            elif block_type == "thinking":
                self.message(block, block.text("thinking") or "", role="reasoning")
            elif block_type in ("tool_use", "server_tool_use"):
                call_id = block.name("id")
                call = ToolCall(block, block.name("name") or "", self.now, "input")
                if call_id is not None and len(self.calls) < limits.ITEMS_PER_TURN:
                    self.calls[call_id] = call
                else:
                    self._call_item(call, None, None, NO_ID)
        self.notes_from(fields)

    def _user(self, fields: Fields) -> None:
        message = fields.obj("message")
        if message is None:
            self.notes_from(fields)
            return
        structured = fields.obj("tool_use_result") if isinstance(
            fields.data.get("tool_use_result"), dict) else None
        content = message.data.get("content")
        if isinstance(content, str):  # a user text: injected context, not the prompt (never echoed)
            text = Fields({})
            self.message(text, text.cut_text(content), role="user")
            return
        for entry in message.objs("content"):
            block = Fields(entry.data)
            if block.data.get("type") == "tool_result":
                call = self.calls.pop(block.data.get("tool_use_id"), None) if isinstance(
                    block.data.get("tool_use_id"), str) else None
                if call is None:
                    self.note("a tool_result with no tool_use before it; ignored")
                    continue
                self._call_item(call, block, structured)
            elif block.data.get("type") == "text":
                self.message(block, block.text("text") or "", role="user")
        self.notes_from(fields)

    def _call_item(self, call: ToolCall, result: Fields | None, structured: Fields | None,
                   missing: str = ENDED) -> None:
        """The items of one tool call, once its result is known (None: the stream ended first)."""
        reading = call.fields
        is_error = result.flag("is_error") if result is not None else None
        if result is not None:
            reading.warn_all(result.warnings)
        output = output_text(result.data.get("content"), reading) if result is not None else None
        if result is None:
            reading.warn(missing)
        if call.name in SHELL_TOOLS and call.command is not None:
            exit_code = None
            if result is not None and not is_error:
                exit_code = 0
            elif output is not None and (match := _EXIT.match(output)):
                exit_code = checked_exit_code(int(match.group(1)), reading)
                output = output[match.end():]
            if structured is not None and structured.flag("interrupted"):
                exit_code = None
            self.emit(reading.item("command", self.turn, call.at, command=call.command,
                                   exit_code=exit_code, output=output or ""))
            return
        self.emit(reading.item("toolCall", self.turn, call.at, name=call.name, input=call.input,
                               output=output))
        if call.name in EDIT_TOOLS and call.path and result is not None and not is_error:
            change = "modify"
            if structured is not None and structured.data.get("type") == "create":
                change = "add"
            self.emit(reading.item("fileChange", self.turn, call.at, path=call.path,
                                   change=change))

    def _result(self, fields: Fields) -> None:
        self.session(fields.data.get("session_id"), "result.session_id")
        usage = fields.obj("usage")
        if usage is not None:
            self.result.session_usage = _usage(usage)
        self.result.cost_usd = fields.number("total_cost_usd")
        text = fields.text("result")
        subtype = fields.name("subtype") or ""
        if fields.flag("is_error"):
            listed = fields.data.get("errors")
            errors = [e[:limits.FAILURE_REASON] for e in listed[:5] if isinstance(e, str)
                      ] if isinstance(listed, list) else []
            if subtype in BUDGETS:
                self.result.finished_reason = BUDGETS[subtype]
            else:
                # An API failure comes as subtype "success", its "API Error: …" text in `result`.
                why = "; ".join(errors) or text or ""
                named = subtype not in ("", "success")
                self.result.finished_reason = failed(
                    f"{subtype}: {why}" if named and why else subtype if named else why)
        else:
            self.result.finished_reason = "done" if subtype in ("", "success") else subtype[:100]
            if text:
                self.result.final_message = text
        self.notes_from(fields)

    def flush(self) -> None:
        for call in self.calls.values():
            self._call_item(call, None, None)
        self.calls.clear()
        if self.message_usage:
            total = Usage()
            for usage in self.message_usage.values():
                total = total.add(usage)
            self.usage(total)
        elif self.result.session_usage is not None:
            self.usage(self.result.session_usage)


def _usage(usage: Fields) -> Usage:
    read = usage.count("cache_read_input_tokens")
    write = usage.count("cache_creation_input_tokens")
    return Usage(input=usage.count("input_tokens") + read + write,
                 output=usage.count("output_tokens"), cache_read=read, cache_write=write)
