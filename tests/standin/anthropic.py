"""A stand-in for the Anthropic Messages API (`POST /v1/messages`), as Claude Code calls it.

Streaming answers are the documented SSE sequence: message_start, then per content block
content_block_start / content_block_delta (text_delta or input_json_delta) /
content_block_stop, then message_delta (stop_reason, usage) and message_stop. Claude Code's
tools are `Bash` for a command and `Write` (or `Edit` with an empty old_string, which
creates a file) for an edit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.standin.script import Edit, Fail, Say, Shell, Step, Token, pick, position
from tests.standin.server import Handler, Seen, StandIn, bearer, chunks

Block = dict[str, Any]
ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}


def tokens(messages: list[dict[str, Any]]) -> list[Token]:
    out: list[Token] = []
    for message in messages:
        content = message.get("content")
        blocks = [{"type": "text"}] if isinstance(content, str) else content or []
        if message.get("role") == "assistant":
            out += ["call" if b.get("type") == "tool_use" else "text" for b in blocks
                    if b.get("type") in ("tool_use", "text")]
        elif results := [b for b in blocks if b.get("type") == "tool_result"]:
            out += ["result"] * len(results)
        else:
            out.append("prompt")
    return out


class AnthropicStandIn(StandIn):
    HOST = "api.anthropic.com"

    def key_of(self, headers: dict[str, str], query: dict[str, str]) -> str | None:
        return headers.get("x-api-key") or bearer(headers)

    def is_scripted(self, seen: Seen) -> bool:
        return (seen.method == "POST" and seen.path == "/v1/messages"
                and bool((seen.body or {}).get("tools")))

    def answer(self, handler: Handler, seen: Seen) -> None:
        body = seen.body if isinstance(seen.body, dict) else {}
        if seen.method == "POST" and seen.path == "/v1/messages":
            return self._message(handler, body, self.is_scripted(seen))
        if seen.method == "POST" and seen.path == "/v1/messages/count_tokens":
            return handler.send_json({"input_tokens": self.script.usage.input})
        if seen.path == "/v1/models":
            model = self.model_for(None)
            return handler.send_json({"data": [{"type": "model", "id": model, "display_name": model,
                                                "created_at": "2025-01-01T00:00:00Z"}],
                                      "has_more": False, "first_id": model, "last_id": model})
        if seen.path == "/" and seen.method in ("GET", "HEAD"):
            return handler.send_json({})
        handler.send_json({"type": "error", "error": {
            "type": "not_found_error", "message": f"{seen.method} {seen.path} is not served"}}, 404)

    def _message(self, handler: Handler, body: dict[str, Any], scripted: bool) -> None:
        if scripted:
            step = self.script.step(*position(tokens(body.get("messages", []))))
            if isinstance(step, Fail):
                return handler.send_json({"type": "error", "error": {
                    "type": ERRORS.get(step.status, "api_error"), "message": step.message}},
                    step.status)
            blocks = self.blocks(step, [t.get("name") for t in body.get("tools", [])])
        else:
            blocks = [{"type": "text", "text": self.script.aside}]
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        u = self.script.usage
        usage = {"input_tokens": u.input, "cache_creation_input_tokens": u.cache_write,
                 "cache_read_input_tokens": u.cache_read, "output_tokens": u.output}
        message = {"id": self.next_id("msg"), "type": "message", "role": "assistant",
                   "model": self.model_for(body.get("model")), "content": blocks,
                   "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if body.get("stream"):
            handler.send_sse(self._events(message))
        else:
            handler.send_json(message)

    def blocks(self, step: Step, offered: list[str]) -> list[Block]:
        if isinstance(step, Shell) and (name := pick(offered, ["Bash"])):
            return [self._tool(name, {"command": step.command,
                                      "description": "Run the scripted command"})]
        if isinstance(step, Edit) and (name := pick(offered, ["Write", "Edit"])):
            if name == "Write":
                return [self._tool(name, {"file_path": step.path, "content": step.content})]
            return [self._tool(name, {"file_path": step.path, "old_string": "",
                                      "new_string": step.content})]
        text = step.text if isinstance(step, Say) else f"(no tool offered for {step})"
        return [{"type": "text", "text": text}]

    def _tool(self, name: str, arguments: dict[str, Any]) -> Block:
        return {"type": "tool_use", "id": self.next_id("toolu"), "name": name, "input": arguments}

    @staticmethod
    def _events(message: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**usage, "output_tokens": 1}}
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                yield "content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": {"type": "text", "text": ""}}
                deltas = [{"type": "text_delta", "text": t} for t in chunks(block["text"])]
            else:
                yield "content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": {**block, "input": {}}}
                # As the API does: an empty partial first, then the JSON in pieces.
                deltas = [{"type": "input_json_delta", "partial_json": p}
                          for p in ["", *chunks(json.dumps(block["input"]))]]
            for delta in deltas:
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": message["stop_reason"],
                                          "stop_sequence": None},
                                "usage": usage}
        yield "message_stop", {"type": "message_stop"}
