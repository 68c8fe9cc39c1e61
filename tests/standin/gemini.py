"""A stand-in for the Gemini API (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`), as Gemini CLI calls it.

A response is a candidate whose content parts are text or a functionCall, with
usageMetadata; streamed, it is the same response cut into `data:` chunks, the last one
carrying finishReason and usage. Gemini CLI's tools are `run_shell_command` and
`write_file` (or `replace` with an empty old_string, which creates a file). Its side
queries ask for JSON against a schema (the next-speaker check, the model router): those
get an object filled from the schema, choosing "user" where it is offered, so the CLI
stops after a final message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tests.standin.script import Edit, Fail, Say, Shell, Step, Token, pick, position
from tests.standin.server import Handler, Seen, StandIn, chunks

Part = dict[str, Any]
STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
ROUTE = re.compile(r"^/(v1beta|v1alpha|v1)/models/([^:/]+):(\w+)$")


def tokens(contents: list[dict[str, Any]]) -> list[Token]:
    out: list[Token] = []
    for content in contents:
        parts = content.get("parts", [])
        if content.get("role") == "model":
            for part in parts:
                if "functionCall" in part:
                    out.append("call")
                elif "text" in part and not part.get("thought"):
                    out.append("text")
        elif results := [p for p in parts if "functionResponse" in p]:
            out += ["result"] * len(results)
        else:
            out.append("prompt")
    return out


def offered_tools(body: dict[str, Any]) -> list[str] | None:
    if "tools" not in body:
        return None
    return [d.get("name") for tool in body["tools"]
            for d in tool.get("functionDeclarations", tool.get("function_declarations", []))]


def json_mode(body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema a request asks its answer to follow, if it asks for JSON."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") != "application/json":
        return None
    return config.get("responseJsonSchema") or config.get("responseSchema") or {}


def fill(schema: dict[str, Any]) -> Any:
    """A small value that follows `schema` (JSON Schema, or Gemini's upper-case Schema)."""
    if enum := schema.get("enum"):
        return "user" if "user" in enum else enum[0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        return {name: fill(sub) for name, sub in (schema.get("properties") or {}).items()}
    return {"array": [], "string": "standin", "integer": 0, "number": 0,
            "boolean": False}.get(kind)


class GeminiStandIn(StandIn):
    HOST = "generativelanguage.googleapis.com"

    def key_of(self, headers: dict[str, str], query: dict[str, str]) -> str | None:
        return headers.get("x-goog-api-key") or query.get("key")

    def is_scripted(self, seen: Seen) -> bool:
        body = seen.body if isinstance(seen.body, dict) else {}
        route = ROUTE.match(seen.path)
        return (seen.method == "POST" and route is not None
                and route[3] in ("generateContent", "streamGenerateContent")
                and bool(body.get("tools")) and json_mode(body) is None)

    def answer(self, handler: Handler, seen: Seen) -> None:
        body = seen.body if isinstance(seen.body, dict) else {}
        route = ROUTE.match(seen.path)
        if seen.method == "POST" and route and route[3] in ("generateContent",
                                                            "streamGenerateContent"):
            return self._generate(handler, seen, body, route[2], route[3] == "streamGenerateContent")
        if seen.method == "POST" and route and route[3] == "countTokens":
            return handler.send_json({"totalTokens": self.script.usage.input})
        if re.fullmatch(r"/(v1beta|v1alpha|v1)/models", seen.path):
            model = self.model_for(None)
            return handler.send_json({"models": [{"name": f"models/{model}", "displayName": model,
                                                  "supportedGenerationMethods": [
                                                      "generateContent", "countTokens"]}]})
        handler.send_json({"error": {"code": 404, "status": "NOT_FOUND",
                                     "message": f"{seen.method} {seen.path} is not served"}}, 404)

    def _generate(self, handler: Handler, seen: Seen, body: dict[str, Any], model: str,
                  stream: bool) -> None:
        if self.is_scripted(seen):
            step = self.script.step(*position(tokens(body.get("contents", []))))
            if isinstance(step, Fail):
                return handler.send_json({"error": {
                    "code": step.status, "message": step.message,
                    "status": STATUSES.get(step.status, "INTERNAL")}}, step.status)
            parts = self.parts(step, offered_tools(body))
        elif (schema := json_mode(body)) is not None:
            parts = [{"text": json.dumps(fill(schema))}]
        else:
            parts = [{"text": self.script.aside}]
        u = self.script.usage
        usage = {"promptTokenCount": u.input + u.cache_read, "candidatesTokenCount": u.output,
                 "cachedContentTokenCount": u.cache_read, "thoughtsTokenCount": u.reasoning,
                 "totalTokenCount": u.input + u.cache_read + u.output + u.reasoning}
        head = {"modelVersion": self.model_for(model), "responseId": self.next_id("resp")}
        if not stream:
            return handler.send_json({"candidates": [self._candidate(parts, True)],
                                      "usageMetadata": usage, **head})
        handler.send_sse((None, chunk) for chunk in self._chunks(parts, usage, head))

    def parts(self, step: Step, offered: list[str] | None) -> list[Part]:
        if isinstance(step, Shell) and (name := pick(offered, ["run_shell_command"])):
            return [{"functionCall": {"name": name, "args": {
                "command": step.command, "description": "Run the scripted command"}}}]
        if isinstance(step, Edit) and (name := pick(offered, ["write_file", "replace"])):
            if name == "write_file":
                args = {"file_path": step.path, "content": step.content}
            else:
                args = {"file_path": step.path, "old_string": "", "new_string": step.content,
                        "instruction": "Create the file."}
            return [{"functionCall": {"name": name, "args": args}}]
        text = step.text if isinstance(step, Say) else f"(no tool offered for {step})"
        return [{"text": text}]

    @staticmethod
    def _candidate(parts: list[Part], last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if last:
            candidate["finishReason"] = "STOP"
        return candidate

    def _chunks(self, parts: list[Part], usage: dict[str, int],
                head: dict[str, str]) -> Iterator[dict[str, Any]]:
        # Text arrives in pieces; a functionCall arrives whole, as the API sends it.
        pieces = [{"text": t} for p in parts for t in chunks(p["text"])] if all(
            "text" in p for p in parts) else parts
        for n, piece in enumerate(pieces):
            last = n == len(pieces) - 1
            chunk = {"candidates": [self._candidate([piece], last)], **head}
            if last:
                chunk["usageMetadata"] = usage
            yield chunk
