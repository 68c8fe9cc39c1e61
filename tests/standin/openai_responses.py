"""A stand-in for the OpenAI Responses API (`POST /v1/responses`), as Codex CLI calls it.

Streaming answers are the documented SSE sequence: response.created, response.in_progress,
then per output item response.output_item.added, its deltas (output_text or
function_call_arguments or custom_tool_call_input) and response.output_item.done (which
Codex builds its items from), then response.completed with the usage. Codex's shell tool is
one of `shell_command`, `shell`, `exec_command` or the built-in `local_shell`, by model and
version; its edit tool is `apply_patch`, a function or a freeform (custom) tool.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

from tests.standin.script import Edit, Fail, Say, Shell, Step, Token, pick, position
from tests.standin.server import Handler, Seen, StandIn, bearer, chunks

Item = dict[str, Any]
SHELLS = ["shell_command", "shell", "exec_command", "local_shell"]
CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
RESULTS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}


def tokens(items: str | list[dict[str, Any]]) -> list[Token]:
    if isinstance(items, str):
        return ["prompt"]
    out: list[Token] = []
    for item in items:
        kind = item.get("type", "message")
        if kind in CALLS:
            out.append("call")
        elif kind in RESULTS:
            out.append("result")
        elif kind == "message" and item.get("role") == "user":
            out.append("prompt")
        elif kind == "message" and item.get("role") == "assistant":
            out.append("text")
    return out  # developer and system messages, reasoning: neither side's turn


def offered_tools(body: dict[str, Any]) -> dict[str, str] | None:
    """Tool name -> its type (function, custom, local_shell), or None if none are listed."""
    if "tools" not in body:
        return None
    return {t.get("name") or t.get("type"): t.get("type") for t in body["tools"]}


def patch(edit: Edit) -> str:
    lines = "".join(f"+{line}\n" for line in edit.content.splitlines())
    return f"*** Begin Patch\n*** Add File: {edit.path}\n{lines}*** End Patch\n"


class OpenAIResponsesStandIn(StandIn):
    HOST = "api.openai.com"

    def key_of(self, headers: dict[str, str], query: dict[str, str]) -> str | None:
        return bearer(headers)

    def is_scripted(self, seen: Seen) -> bool:
        return (seen.method == "POST" and seen.path == "/v1/responses"
                and bool((seen.body or {}).get("tools")))

    def answer(self, handler: Handler, seen: Seen) -> None:
        body = seen.body if isinstance(seen.body, dict) else {}
        if seen.method == "POST" and seen.path == "/v1/responses":
            return self._respond(handler, body, self.is_scripted(seen))
        if seen.path == "/v1/models":
            return handler.send_json({"object": "list", "data": [
                {"id": self.model_for(None), "object": "model", "created": 0, "owned_by": "standin"}]})
        if seen.path == "/" and seen.method in ("GET", "HEAD"):
            return handler.send_json({})
        handler.send_json({"error": {"message": f"{seen.method} {seen.path} is not served",
                                     "type": "invalid_request_error", "param": None,
                                     "code": "not_found"}}, 404)

    def _respond(self, handler: Handler, body: dict[str, Any], scripted: bool) -> None:
        if scripted:
            step = self.script.step(*position(tokens(body.get("input", []))))
            if isinstance(step, Fail):
                kind = "server_error" if step.status >= 500 else "invalid_request_error"
                return handler.send_json({"error": {"message": step.message, "type": kind,
                                                    "param": None, "code": None}}, step.status)
            output = self.items(step, offered_tools(body))
        else:
            output = [self._message(self.script.aside)]
        u = self.script.usage
        usage = {"input_tokens": u.input + u.cache_read,
                 "input_tokens_details": {"cached_tokens": u.cache_read},
                 "output_tokens": u.output + u.reasoning,
                 "output_tokens_details": {"reasoning_tokens": u.reasoning},
                 "total_tokens": u.input + u.cache_read + u.output + u.reasoning}
        response = {"id": self.next_id("resp"), "object": "response",
                    "created_at": int(time.time()), "status": "completed", "error": None,
                    "incomplete_details": None, "instructions": body.get("instructions"),
                    "metadata": {}, "model": self.model_for(body.get("model")),
                    "output": output, "parallel_tool_calls": True, "temperature": 1.0,
                    "tool_choice": "auto", "tools": body.get("tools", []), "top_p": 1.0,
                    "text": {"format": {"type": "text"}}, "usage": usage,
                    "store": body.get("store", True)}
        if body.get("stream"):
            handler.send_sse(self._events(response))
        else:
            handler.send_json(response)

    def items(self, step: Step, offered: dict[str, str] | None) -> list[Item]:
        names = None if offered is None else list(offered)
        if isinstance(step, Edit) and pick(names, ["apply_patch"]):
            if (offered or {}).get("apply_patch") == "custom":
                return [{"id": self.next_id("ctc"), "type": "custom_tool_call",
                         "status": "completed", "call_id": self.next_id("call"),
                         "name": "apply_patch", "input": patch(step)}]
            return [self._call("apply_patch", {"input": patch(step)})]
        if isinstance(step, Shell | Edit) and (name := pick(names, SHELLS)):
            # Without an apply_patch tool Codex still applies a patch given to its shell.
            script = (step.command if isinstance(step, Shell)
                      else f"apply_patch <<'EOF'\n{patch(step)}EOF\n")
            argv = ["bash", "-lc", script]
            if name == "local_shell":
                return [{"id": self.next_id("lsh"), "type": "local_shell_call",
                         "status": "completed", "call_id": self.next_id("call"),
                         "action": {"type": "exec", "command": argv, "env": {},
                                    "timeout_ms": None, "user": None,
                                    "working_directory": None}}]
            arguments = {"shell_command": {"command": script}, "shell": {"command": argv},
                         "exec_command": {"cmd": script}}[name]
            return [self._call(name, arguments)]
        text = step.text if isinstance(step, Say) else f"(no tool offered for {step})"
        return [self._message(text)]

    def _call(self, name: str, arguments: dict[str, Any]) -> Item:
        return {"id": self.next_id("fc"), "type": "function_call", "status": "completed",
                "arguments": json.dumps(arguments), "call_id": self.next_id("call"), "name": name}

    def _message(self, text: str) -> Item:
        return {"id": self.next_id("msg"), "type": "message", "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [],
                             "logprobs": []}]}

    @staticmethod
    def _events(response: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        numbers = itertools.count()

        def event(kind: str, **fields: Any) -> tuple[str, Any]:
            return kind, {"type": kind, "sequence_number": next(numbers), **fields}

        begun = {**response, "status": "in_progress", "output": [], "usage": None}
        yield event("response.created", response=begun)
        yield event("response.in_progress", response=begun)
        for index, item in enumerate(response["output"]):
            at = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                yield event("response.output_item.added", output_index=index,
                            item={**item, "status": "in_progress", "content": []})
                text = item["content"][0]["text"]
                part = {"type": "output_text", "text": "", "annotations": []}
                yield event("response.content_part.added", **at, content_index=0, part=part)
                for piece in chunks(text):
                    yield event("response.output_text.delta", **at, content_index=0,
                                delta=piece, logprobs=[])
                yield event("response.output_text.done", **at, content_index=0, text=text,
                            logprobs=[])
                yield event("response.content_part.done", **at, content_index=0,
                            part={**part, "text": text})
            elif item["type"] == "function_call":
                yield event("response.output_item.added", output_index=index,
                            item={**item, "status": "in_progress", "arguments": ""})
                for piece in chunks(item["arguments"]):
                    yield event("response.function_call_arguments.delta", **at, delta=piece)
                yield event("response.function_call_arguments.done", **at,
                            name=item["name"], arguments=item["arguments"])
            elif item["type"] == "custom_tool_call":
                yield event("response.output_item.added", output_index=index,
                            item={**item, "status": "in_progress", "input": ""})
                for piece in chunks(item["input"]):
                    yield event("response.custom_tool_call_input.delta", **at, delta=piece)
                yield event("response.custom_tool_call_input.done", **at, input=item["input"])
            else:
                yield event("response.output_item.added", output_index=index, item=item)
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed", response=response)
