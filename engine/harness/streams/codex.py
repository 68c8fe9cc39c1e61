"""Codex CLI's `codex exec --json` stream (JSON lines of thread events).

Format followed: codex-rs/exec/src/exec_events.rs as of @openai/codex 0.4x–0.5x (the
TypeScript SDK's sdk/typescript/src/events.ts and items.ts mirror it). Events:
- `thread.started` {thread_id}: the session to resume (`codex exec resume ID`);
- `turn.started`; `turn.completed` {usage: input_tokens, cached_input_tokens, output_tokens,
  and in later versions reasoning_output_tokens, cache_write_input_tokens};
  `turn.failed` {error: {message}}; `error` {message} (also sent for a retried stream error);
- `item.started` / `item.updated` / `item.completed` {item: {id, type, …}} with item types
  `agent_message` {text}, `reasoning` {text}, `command_execution` {command,
  aggregated_output, exit_code, status}, `file_change` {changes: [{path, kind}], status},
  `mcp_tool_call` {server, tool, arguments, result, error, status}, `web_search` {query},
  `todo_list` {items}, `error` {message}; unknown types are kept as tool calls.
Only completed items become trajectory items; `item.started` gives their time. No event
carries a time: items take the time their first line arrived. The stream does not name the
model: the harness knows the one it asked for. OpenAI's `input_tokens` already count the
cached ones, as Proctor's `input` does.

`turn.completed`'s usage is the session's running total (`total_token_usage` in
event_processor_with_jsonl_output.rs), so a resumed thread reports every earlier turn again
(seen with codex-cli 0.142: input 16504 → 85681 → 103779 over three one-word turns). The
harness passes the previous turn's total (`StreamResult.session_usage`) and gets this turn's.
"""

from __future__ import annotations

import shlex

from ... import limits
from ...models import Usage
from . import Fields, StreamParser, failed, output_text

CHANGE_KINDS = {"add": "add", "delete": "delete", "update": "modify"}
_SHELLS = {"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/bin/zsh"}


def shell_script(command: str) -> str:
    """`bash -lc 'pytest -q'` as `pytest -q`: Codex runs every command through a login shell."""
    if len(command) > limits.ITEM_READ:
        return command
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if len(argv) == 3 and argv[0] in _SHELLS and argv[1] in ("-lc", "-c"):
        return argv[2]
    return command


class CodexStream(StreamParser):
    def __init__(self, turn: int, on_item=None, previous: Usage | None = None):
        """`previous`: the session's total after the turn before (None for a new session)."""
        super().__init__(turn, on_item)
        self.previous = previous
        self.started: dict[str, str | None] = {}  # item id → when its item.started arrived
        self.last_error: str | None = None  # an `error` event not yet followed by anything else

    def event(self, fields: Fields, kind: str) -> None:
        if kind != "error":
            self.last_error = None
        if kind == "thread.started":
            self.session(fields.data.get("thread_id"), "thread.started.thread_id")
        elif kind == "item.started":
            item = fields.obj("item")
            item_id = item.name("id") if item is not None else None
            if item_id and len(self.started) < limits.ITEMS_PER_TURN:
                self.started.setdefault(item_id, self.now)
        elif kind == "item.completed":
            item = fields.obj("item")
            if item is not None:
                self._item(Fields(item.data))
        elif kind in ("turn.completed", "turn.failed"):
            usage = fields.obj("usage")
            if usage is not None:
                self._turn_usage(_usage(usage))
            if kind == "turn.completed":
                self.result.finished_reason = "done"
            else:
                error = fields.obj("error")
                message = error.text("message") if error is not None else None
                self.result.finished_reason = failed(message or "the turn failed")
        elif kind == "error":
            # A retried stream error comes as an `error` too: fatal only if nothing follows.
            self.last_error = fields.text("message") or "an error event"
            self.note(f"error: {limits.quote(self.last_error, limits.FAILURE_REASON)}")
        self.notes_from(fields)

    def _item(self, item: Fields) -> None:
        item_type = item.name("type") or ""
        item_id = item.data.get("id")
        at = self.started.pop(item_id, None) if isinstance(item_id, str) else None
        at = at or self.now
        if item_type == "agent_message":
            self.message(item, item.text("text") or "", at=at)
        elif item_type == "reasoning":
            self.message(item, item.text("text") or "", role="reasoning", at=at)
        elif item_type == "command_execution":
            command = item.text("command") or ""
            self.emit(item.item("command", self.turn, at, command=shell_script(command),
                                exit_code=item.exit_code("exit_code"),
                                output=item.text("aggregated_output") or ""))
        elif item_type == "file_change":
            self._file_change(item, at)
        elif item_type == "mcp_tool_call":
            server, tool = item.name("server") or "", item.name("tool") or ""
            result, error = item.obj("result"), item.obj("error")
            output = (output_text(result.data.get("content"), item) if result is not None
                      else error.text("message") if error is not None else None)
            self.emit(item.item("toolCall", self.turn, at, name=f"{server}.{tool}",
                                input=item.value("arguments"), output=output))
        elif item_type == "error":
            message = item.text("message") or ""
            self.note(f"error item: {limits.quote(message, limits.FAILURE_REASON)}")
        else:  # web_search, todo_list and types added later: what the agent did, as a tool call
            rest = {k: v for k, v in item.data.items() if k not in ("id", "type", "status")}
            self.emit(item.item("toolCall", self.turn, at, name=item_type,
                                input=item.capped(rest),
                                output=item.name("status")))

    def _file_change(self, item: Fields, at: str | None) -> None:
        """The patch as Codex's tool call (`apply_patch`), then a fileChange per file changed."""
        changes = item.objs("changes", limits.FILES_CHANGED)
        status = item.name("status")
        listed = [{"path": c.name("path"), "kind": c.name("kind")} for c in changes]
        self.emit(item.item("toolCall", self.turn, at, name="apply_patch",
                            input=item.capped({"changes": listed}), output=status))
        if status != "completed":
            return
        for change, entry in zip(changes, listed):
            if entry["path"]:
                kind = CHANGE_KINDS.get(entry["kind"] or "", "modify")
                self.emit(change.item("fileChange", self.turn, at, path=entry["path"], change=kind))

    def _turn_usage(self, total: Usage) -> None:
        """This turn's share of the session's running total."""
        self.result.session_usage = total
        previous = self.previous
        if previous is None:
            self.usage(total)
            return
        pairs = [(total.input, previous.input), (total.output, previous.output),
                 (total.cache_read, previous.cache_read), (total.cache_write, previous.cache_write),
                 (total.reasoning or 0, previous.reasoning or 0)]
        if any(now < before for now, before in pairs):
            # Not a running total of the same session (a new thread, or a CLI that counts per turn).
            self.note("usage is below the previous turn's total: taken as this turn's own")
            self.usage(total)
            return
        reasoning = None if total.reasoning is None else total.reasoning - (previous.reasoning or 0)
        self.usage(Usage(input=total.input - previous.input, output=total.output - previous.output,
                         cache_read=total.cache_read - previous.cache_read,
                         cache_write=total.cache_write - previous.cache_write, reasoning=reasoning))

    def flush(self) -> None:
        if self.result.finished_reason is None and self.last_error is not None:
            self.result.finished_reason = failed(self.last_error)


def _usage(usage: Fields) -> Usage:
    reasoning = usage.integer("reasoning_output_tokens")
    return Usage(input=usage.count("input_tokens"), output=usage.count("output_tokens"),
                 cache_read=usage.count("cached_input_tokens"),
                 cache_write=usage.count("cache_write_input_tokens"), reasoning=reasoning)
