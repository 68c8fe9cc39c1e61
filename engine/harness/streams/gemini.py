"""Gemini CLI's `gemini -p … --output-format stream-json` stream.

Format followed: packages/core/src/output/types.ts and packages/cli/src/nonInteractiveCli.ts
of google-gemini/gemini-cli 0.56 (nightly 2026-08-06). Every event has `type` and
`timestamp` (RFC 3339):
- `init` {session_id, model};
- `message` {role "user"|"assistant", content, delta}: the prompt is echoed as a user message
  (left out here, the turn's record has it); the answer comes in delta pieces, joined here;
- `tool_use` {tool_name, tool_id, parameters}; `tool_result` {tool_id, status
  "success"|"error", output (the tool's display text, when it is text), error {type, message}};
- `error` {severity "warning"|"error", message} ("Maximum session turns exceeded", …);
- `result` {status "success"|"error", error {type, message}, stats {input_tokens (cached
  included), output_tokens, cached, input, duration_ms, tool_calls, models {name: {…}}}}.
Tools: `run_shell_command` {command}, `write_file` and `replace` {file_path}; the shell's
exit code shows only in its text ("Command exited with code: 1"), else it is unknown.
The stats count this process only (a `--resume`d session's earlier turns are not restored
into them outside the interactive UI), so they are the turn's own usage.
"""

from __future__ import annotations

import re

from ... import limits
from ...models import Usage
from . import (ENDED, NO_ID, Fields, StreamParser, ToolCall, checked_exit_code, failed,
               iso_time, word)

SHELL_TOOLS = {"run_shell_command"}
EDIT_TOOLS = {"write_file", "replace", "edit"}
MAX_TURNS = "Maximum session turns exceeded"
_EXIT = re.compile(r"^(?:Command exited with code|Exit Code): (-?\d{1,10})\s*$", re.MULTILINE)


class GeminiStream(StreamParser):
    def __init__(self, turn: int, on_item=None):
        super().__init__(turn, on_item)
        self.calls: dict[str, ToolCall] = {}
        self.pieces: list[str] = []  # the assistant's answer so far, in delta pieces
        self.pieces_chars = 0
        self.pieces_at: str | None = None
        self.pieces_fields = Fields({})
        self.max_turns = False
        self.last_error: str | None = None

    def event(self, fields: Fields, kind: str) -> None:
        at = self._time(fields)
        if kind != "message":
            self._answer()
        if kind == "init":
            self.session(fields.data.get("session_id"), "init.session_id")
            self.model(fields.data.get("model"), "init.model")
        elif kind == "message":
            self._message(fields, at)
        elif kind == "tool_use":
            call_id = fields.name("tool_id")
            call = ToolCall(fields, fields.name("tool_name") or "", at, "parameters")
            if call_id is not None and len(self.calls) < limits.ITEMS_PER_TURN:
                self.calls[call_id] = call
            else:
                self._call_item(call, None, NO_ID)
            return  # its warnings travel with its item
        elif kind == "tool_result":
            call_id = fields.data.get("tool_id")
            call = self.calls.pop(call_id, None) if isinstance(call_id, str) else None
            if call is None:
                self.note("a tool_result with no tool_use before it; ignored")
            else:
                self._call_item(call, fields)
                return
        elif kind == "error":
            message = fields.text("message") or ""
            if message == MAX_TURNS:
                self.max_turns = True
            if fields.data.get("severity") == "error":
                self.last_error = message
            self.note(f"{fields.name('severity') or 'error'}: "
                      f"{limits.quote(message, limits.FAILURE_REASON)}")
        elif kind == "result":
            self._result(fields)
        self.notes_from(fields)

    def _time(self, fields: Fields) -> str | None:
        stamp = fields.data.get("timestamp")
        at = iso_time(stamp)
        if at is None and stamp is not None:
            fields.warn("timestamp: not an RFC 3339 time; the line's arrival used")
        return at or self.now

    def _message(self, fields: Fields, at: str | None) -> None:
        if fields.data.get("role") != "assistant":
            return  # the prompt's echo
        content = fields.data.get("content")
        if not isinstance(content, str):
            fields.text("content")  # notes the wrong type
            return
        if not fields.data.get("delta"):
            self._answer()
        if not self.pieces:
            self.pieces_at, self.pieces_fields = at, Fields({})
        if self.pieces_chars <= limits.ITEM_READ:
            piece = content[:limits.ITEM_READ + 1]
            self.pieces.append(piece)
            self.pieces_chars += len(piece)
        else:
            self.pieces_chars += 1  # past the cap: only counted, so the cut is marked
        self.pieces_fields.warn_all(fields.warnings)
        if not fields.data.get("delta"):
            self._answer()

    def _answer(self) -> None:
        """The assistant's delta pieces so far as one message."""
        if not self.pieces:
            return
        text = "".join(self.pieces)
        reading = self.pieces_fields
        self.pieces, self.pieces_chars = [], 0
        self.message(reading, reading.cut_text(text), at=self.pieces_at)

    def _call_item(self, call: ToolCall, result: Fields | None, missing: str = ENDED) -> None:
        reading = call.fields
        output: str | None = None
        status = None
        if result is None:
            reading.warn(missing)
        else:
            reading.warn_all(result.warnings)
            status = result.name("status")
            output = result.text("output")
            error = result.obj("error")
            if error is not None and output is None:
                output = error.text("message")
            reading.cut[0] = reading.cut[0] or result.cut[0]
        if call.name in SHELL_TOOLS and call.command is not None:
            match = _EXIT.search(output or "")
            code = checked_exit_code(int(match.group(1)), reading) if match else None
            self.emit(reading.item("command", self.turn, call.at, command=call.command,
                                   exit_code=code, output=output or ""))
            return
        self.emit(reading.item("toolCall", self.turn, call.at, name=call.name, input=call.input,
                               output=output))
        if call.name in EDIT_TOOLS and call.path and status == "success":
            self.emit(reading.item("fileChange", self.turn, call.at,
                                   path=call.path, change="modify"))

    def _result(self, fields: Fields) -> None:
        stats = fields.obj("stats")
        if stats is not None:
            self.usage(Usage(input=stats.count("input_tokens"), output=stats.count("output_tokens"),
                             cache_read=stats.count("cached")))
            self._served_by(stats)
        status = fields.name("status")
        if status == "success":
            self.result.finished_reason = "max_turns" if self.max_turns else "done"
            return
        error = fields.obj("error")
        message = error.text("message") if error is not None else None
        kind = error.name("type") if error is not None else None
        why = message or self.last_error or f"status {status!r}"
        self.result.finished_reason = failed(f"{kind}: {why}" if kind else why)

    def _served_by(self, stats: Fields) -> None:
        """The model that did the most of the turn (a router or summarizer may take a little)."""
        models = stats.obj("models")
        if models is None:
            return
        best, most = None, -1
        for name in list(models.data)[:limits.EVIDENCE_ENTRIES]:
            entry = models.obj(name)
            tokens = entry.count("total_tokens") if entry is not None else 0
            if word(name) and tokens > most:
                best, most = name, tokens
        if best is not None:
            self.result.model = best

    def flush(self) -> None:
        self._answer()
        for call in self.calls.values():
            self._call_item(call, None)
        self.calls.clear()
