"""The stand-in provider APIs (tests.standin) speak each provider's real wire format: the
official SDKs (anthropic, openai, google-genai) drive a two-turn scripted session against
them, streaming and not, in plain HTTP, in HTTPS with the stand-in's CA, and through the
egress gateway with a brokered key. No Docker; every byte stays on loopback or a Unix socket."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpcore2
import httpx
import httpx2
import openai
import pytest
from google import genai
from google.genai import types

from engine.sandbox.gateway import BrokeredSecret, GatewayHost, GatewaySpec

# Autouse: a connection off loopback or a DNS lookup fails the test instead of leaving.
from tests.engine.test_gateway import loopback_only  # noqa: F401
from tests.standin import (
    AnthropicStandIn,
    Fail,
    GeminiStandIn,
    OpenAIResponsesStandIn,
    Script,
    Seen,
    Shell,
    StandIn,
    two_turns,
)
from tests.standin.script import Say, position

PROMPTS = ["Make hello.txt", "Now make second.txt"]
KEY = "sk-standin-" + "3f9c2e71"

# The tools each CLI lists, trimmed to name and a schema.
CLAUDE_TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}}
                for n in ("Bash", "Read", "Edit", "Write")]
CODEX_TOOLS = [{"type": "function", "name": "shell_command", "description": "run",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
               {"type": "custom", "name": "apply_patch", "description": "patch"}]
GEMINI_TOOLS = [types.Tool(function_declarations=[
    types.FunctionDeclaration(name=n, description=n)
    for n in ("run_shell_command", "read_file", "replace", "write_file")])]

Step = tuple[str, Any]  # ("call", (name, arguments)) or ("say", text)


# --- three small agent loops, one per SDK: run a turn until the model stops calling tools --

def anthropic_turns(client: anthropic.Anthropic, stream: bool) -> tuple[list[list[Step]], Any]:
    messages: list[dict[str, Any]] = []
    turns, usage = [], None
    for prompt in PROMPTS:
        messages.append({"role": "user", "content": prompt})
        steps: list[Step] = []
        while True:
            args = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": messages,
                    "tools": CLAUDE_TOOLS}
            if stream:
                with client.messages.stream(**args) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(**args)
            usage = message.usage
            messages.append({"role": "assistant",
                             "content": [b.model_dump(exclude_none=True) for b in message.content]})
            calls = [b for b in message.content if b.type == "tool_use"]
            steps += [("call", (b.name, b.input)) for b in calls]
            if message.stop_reason != "tool_use":
                steps.append(("say", message.content[0].text))
                break
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "ok"} for b in calls]})
        turns.append(steps)
    return turns, usage


def openai_turns(client: openai.OpenAI, stream: bool) -> tuple[list[list[Step]], Any]:
    items: list[dict[str, Any]] = []
    turns, usage = [], None
    for prompt in PROMPTS:
        items.append({"type": "message", "role": "user", "content": prompt})
        steps: list[Step] = []
        while True:
            args = {"model": "gpt-5-codex", "input": items, "tools": CODEX_TOOLS, "store": False}
            if stream:
                with client.responses.stream(**args) as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(**args)
            usage = response.usage
            outputs = [o.model_dump(exclude_none=True) for o in response.output]
            items += outputs
            calls = [o for o in outputs if o["type"] in ("function_call", "custom_tool_call")]
            for call in calls:
                given = (json.loads(call["arguments"]) if call["type"] == "function_call"
                         else call["input"])
                steps.append(("call", (call["name"], given)))
                items.append({"type": f"{call['type']}_output", "call_id": call["call_id"],
                              "output": "ok"})
            if not calls:
                steps.append(("say", response.output_text))
                break
        turns.append(steps)
    return turns, usage


def gemini_turns(client: genai.Client, stream: bool) -> tuple[list[list[Step]], Any]:
    contents: list[types.Content] = []
    config = types.GenerateContentConfig(tools=GEMINI_TOOLS)
    turns, usage = [], None
    for prompt in PROMPTS:
        contents.append(types.Content(role="user", parts=[types.Part.from_text(text=prompt)]))
        steps: list[Step] = []
        while True:
            args = {"model": "gemini-2.5-pro", "contents": contents, "config": config}
            chunks = (list(client.models.generate_content_stream(**args)) if stream
                      else [client.models.generate_content(**args)])
            usage = chunks[-1].usage_metadata
            parts = [p for c in chunks for p in c.candidates[0].content.parts]
            calls = [p.function_call for p in parts if p.function_call]
            text = "".join(p.text for p in parts if p.text)
            # As Gemini CLI keeps it: a streamed text's pieces joined into one part.
            kept = [types.Part(function_call=c) for c in calls] or [types.Part.from_text(text=text)]
            contents.append(types.Content(role="model", parts=kept))
            steps += [("call", (c.name, c.args)) for c in calls]
            if not calls:
                steps.append(("say", text))
                break
            contents.append(types.Content(role="user", parts=[
                types.Part.from_function_response(name=c.name, response={"output": "ok"})
                for c in calls]))
        turns.append(steps)
    return turns, usage


EXPECTED = {
    "anthropic": [
        [("call", ("Bash", {"command": "echo standin-turn-1",
                            "description": "Run the scripted command"})),
         ("call", ("Write", {"file_path": "/workspace/hello.txt", "content": "hello from turn 1\n"})),
         ("say", "I created hello.txt.")],
        [("call", ("Bash", {"command": "cat /workspace/hello.txt",
                            "description": "Run the scripted command"})),
         ("call", ("Write", {"file_path": "/workspace/second.txt",
                             "content": "hello from turn 2\n"})),
         ("say", "I created second.txt.")]],
    "openai": [
        [("call", ("shell_command", {"command": "echo standin-turn-1"})),
         ("call", ("apply_patch", ("*** Begin Patch\n*** Add File: hello.txt\n"
                                   "+hello from turn 1\n*** End Patch\n"))),
         ("say", "I created hello.txt.")],
        [("call", ("shell_command", {"command": "cat hello.txt"})),
         ("call", ("apply_patch", ("*** Begin Patch\n*** Add File: second.txt\n"
                                   "+hello from turn 2\n*** End Patch\n"))),
         ("say", "I created second.txt.")]],
    "gemini": [
        [("call", ("run_shell_command", {"command": "echo standin-turn-1",
                                         "description": "Run the scripted command"})),
         ("call", ("write_file", {"file_path": "/workspace/hello.txt",
                                  "content": "hello from turn 1\n"})),
         ("say", "I created hello.txt.")],
        [("call", ("run_shell_command", {"command": "cat /workspace/hello.txt",
                                         "description": "Run the scripted command"})),
         ("call", ("write_file", {"file_path": "/workspace/second.txt",
                                  "content": "hello from turn 2\n"})),
         ("say", "I created second.txt.")]],
}


def make_standin(provider: str, **kw: Any) -> StandIn:
    if provider == "openai":  # Codex's apply_patch takes paths relative to the workspace
        return OpenAIResponsesStandIn(two_turns(relative_paths=True), **kw)
    return {"anthropic": AnthropicStandIn, "gemini": GeminiStandIn}[provider](**kw)


def make_client(provider: str, base_url: str, key: str, http: httpx2.Client | None = None):
    if provider == "anthropic":
        return anthropic.Anthropic(api_key=key, base_url=base_url, http_client=http, max_retries=0)
    if provider == "openai":
        return openai.OpenAI(api_key=key, base_url=base_url + "/v1", http_client=http,
                             max_retries=0)
    options = types.HttpOptions(base_url=base_url, httpx_client=http,
                                retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=key, http_options=options)


DRIVE: dict[str, Callable[[Any, bool], tuple[list[list[Step]], Any]]] = {
    "anthropic": anthropic_turns, "openai": openai_turns, "gemini": gemini_turns}


def assert_usage(provider: str, usage: Any) -> None:
    """The script's default Usage (1200 in, 80 out, 1000 cache read, 100 written, 20
    reasoning), as each provider counts it."""
    if provider == "anthropic":
        assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens,
                usage.cache_creation_input_tokens) == (1200, 80, 1000, 100)
    elif provider == "openai":
        assert (usage.input_tokens, usage.input_tokens_details.cached_tokens,
                usage.output_tokens, usage.output_tokens_details.reasoning_tokens) == (2200, 1000, 100, 20)
    else:
        assert (usage.prompt_token_count, usage.cached_content_token_count,
                usage.candidates_token_count, usage.thoughts_token_count) == (2200, 1000, 80, 20)


def assert_resumed(calls: list[Seen]) -> None:
    """Six scripted calls; turn 2's first one carried turn 1's prompt and final answer."""
    assert len(calls) == 6
    assert PROMPTS[0] in calls[3].text and "I created hello.txt." in calls[3].text
    assert "I created hello.txt." not in calls[2].text


PROVIDERS = ["anthropic", "openai", "gemini"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_official_sdk_runs_the_scripted_session(provider: str, stream: bool) -> None:
    with make_standin(provider) as api:
        turns, usage = DRIVE[provider](make_client(provider, api.url, KEY), stream)
        assert turns == EXPECTED[provider]
        assert_usage(provider, usage)
        calls = api.calls()
        assert_resumed(calls)
        assert api.keys() == {KEY}
        assert PROMPTS[1] not in calls[2].text and PROMPTS[1] in calls[3].text


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_scripted_failure_is_the_providers_error_that_its_sdk_raises(provider: str) -> None:
    script = Script([[Shell("echo one"), Fail(400, "scripted refusal")]])
    cls = {"anthropic": AnthropicStandIn, "openai": OpenAIResponsesStandIn,
           "gemini": GeminiStandIn}[provider]
    with cls(script) as api:
        with pytest.raises(Exception, match="scripted refusal") as raised:
            DRIVE[provider](make_client(provider, api.url, KEY), True)
        assert len(api.calls()) == 2  # the command, then the refusal
    status = getattr(raised.value, "status_code", None) or getattr(raised.value, "code", None)
    assert status == 400, repr(raised.value)


def sse(response: httpx.Response) -> list[tuple[str | None, dict[str, Any]]]:
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
            name = None
    return events


def test_the_anthropic_stream_is_the_documented_event_sequence() -> None:
    with AnthropicStandIn() as api, httpx.Client(base_url=api.url) as http:
        body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "stream": True,
                "tools": CLAUDE_TOOLS, "messages": [{"role": "user", "content": "go"}]}
        with http.stream("POST", "/v1/messages", json=body,
                         headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = sse(r)
    assert all(name == data["type"] for name, data in events)
    assert [name for name, _ in events] == [
        "message_start", "ping", "content_block_start", *["content_block_delta"] * 4,
        "content_block_stop", "message_delta", "message_stop"]
    start, block = events[0][1]["message"], events[2][1]["content_block"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert block["type"] == "tool_use" and block["name"] == "Bash" and block["input"] == {}
    assert "".join(d["delta"]["partial_json"] for _, d in events[3:7]) == json.dumps(
        {"command": "echo standin-turn-1", "description": "Run the scripted command"})
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["cache_read_input_tokens"] == 1000
    assert delta["usage"]["cache_creation_input_tokens"] == 100


def test_the_responses_stream_is_the_documented_event_sequence() -> None:
    with OpenAIResponsesStandIn() as api, httpx.Client(base_url=api.url) as http:
        body = {"model": "gpt-5-codex", "stream": True, "input": "go", "tools": CODEX_TOOLS}
        with http.stream("POST", "/v1/responses", json=body,
                         headers={"authorization": f"Bearer {KEY}"}) as r:
            events = sse(r)
    assert all(name == data["type"] for name, data in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [name for name, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    deltas = [d["delta"] for n, d in events if n == "response.function_call_arguments.delta"]
    done = events[-2][1]["item"]
    assert "".join(deltas) == done["arguments"] == json.dumps({"command": "echo standin-turn-1"})
    assert done["name"] == "shell_command" and done["call_id"].startswith("call_")
    usage = events[-1][1]["response"]["usage"]
    assert usage["input_tokens_details"] == {"cached_tokens": 1000}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 20}


def test_codex_tool_variants_are_answered_by_the_names_the_request_offers() -> None:
    """Older Codex offers `shell` (an argv) and no apply_patch tool: the edit goes through
    the shell as `apply_patch <<'EOF'`; `local_shell` is a built-in tool with its own item."""
    def first_call(api: StandIn, tools: list[dict[str, Any]], input: list[dict[str, Any]]):
        body = {"model": "m", "input": input, "tools": tools}
        return httpx.post(api.url + "/v1/responses", json=body).json()["output"][0]

    shell = {"type": "function", "name": "shell", "parameters": {}}
    prompt = {"role": "user", "content": "go"}
    result = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    call = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
    with OpenAIResponsesStandIn(two_turns(relative_paths=True)) as api:
        item = first_call(api, [shell], [prompt])
        assert json.loads(item["arguments"]) == {"command": ["bash", "-lc", "echo standin-turn-1"]}
        item = first_call(api, [shell], [prompt, call, result])
        argv = json.loads(item["arguments"])["command"]
        assert argv[:2] == ["bash", "-lc"] and argv[2].startswith("apply_patch <<'EOF'\n")
        assert "*** Add File: hello.txt\n+hello from turn 1\n" in argv[2]
        item = first_call(api, [{"type": "local_shell"}], [prompt])
        assert item["type"] == "local_shell_call"
        assert item["action"]["command"] == ["bash", "-lc", "echo standin-turn-1"]


def test_claude_code_with_only_edit_creates_the_file_with_an_empty_old_string() -> None:
    tools = [t for t in CLAUDE_TOOLS if t["name"] != "Write"]
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "text", "text": "<system-reminder>a note</system-reminder>"}]}]
    with AnthropicStandIn() as api:
        reply = httpx.post(api.url + "/v1/messages", json={
            "model": "m", "max_tokens": 10, "tools": tools, "messages": messages}).json()
    assert reply["content"][0]["name"] == "Edit"
    assert reply["content"][0]["input"] == {"file_path": "/workspace/hello.txt", "old_string": "",
                                            "new_string": "hello from turn 1\n"}


def test_side_queries_and_probes_are_answered_and_recorded_but_do_not_advance_the_script() -> None:
    with AnthropicStandIn() as api, httpx.Client(base_url=api.url) as http:
        head = {"x-api-key": KEY}
        assert http.head("/", headers=head).status_code == 200
        assert http.get("/v1/models", headers=head).json()["data"][0]["type"] == "model"
        aside = http.post("/v1/messages", headers=head, json={
            "model": "claude-haiku-4-6", "max_tokens": 1,
            "messages": [{"role": "user", "content": "quota"}]}).json()
        assert aside["content"] == [{"type": "text", "text": "ok"}]
        missing = http.get("/v1/nothing", headers=head)
        assert missing.status_code == 404 and missing.json()["type"] == "error"
        assert [s.path for s in api.requests] == ["/", "/v1/models", "/v1/messages", "/v1/nothing"]
        assert api.calls() == [] and api.keys() == {KEY}


def test_gemini_answers_a_json_side_query_from_its_schema_choosing_the_user() -> None:
    """Gemini CLI's next-speaker check asks for JSON: "user" ends the turn."""
    schema = {"type": "object", "properties": {
        "reasoning": {"type": "string"}, "next_speaker": {"type": "string", "enum": ["model", "user"]}},
        "required": ["reasoning", "next_speaker"]}
    with GeminiStandIn() as api:
        client = make_client("gemini", api.url, KEY)
        reply = client.models.generate_content(
            model="gemini-2.5-flash", contents="who speaks next?",
            config=types.GenerateContentConfig(response_mime_type="application/json",
                                               response_json_schema=schema, tools=GEMINI_TOOLS))
        assert json.loads(reply.text) == {"reasoning": "standin", "next_speaker": "user"}
        assert api.calls() == [] and api.requests[0].headers["x-goog-api-key"] == KEY


def test_a_session_that_lost_its_history_gets_turn_one_again() -> None:
    """What makes "the stand-in sees the earlier messages" a real check of resumption."""
    assert position(["prompt"]) == (0, 0)
    assert position(["prompt", "call", "result", "call", "result", "text", "prompt"]) == (1, 0)
    assert position(["prompt", "text", "call", "result"]) == (0, 1)  # text beside a call
    script = Script([[Shell("a"), Say("one")], [Say("two")]])
    assert script.step(1, 0) == Say("two") and script.step(5, 0) == Say("two")


# --- HTTPS: the stand-in as the provider's host, and behind the gateway --------------------

@pytest.mark.parametrize("provider", PROVIDERS)
def test_over_https_the_standin_presents_the_providers_host_signed_by_its_ca(
        provider: str, tmp_path: Path) -> None:
    with make_standin(provider, tls=tmp_path) as api:
        assert api.ca_path is not None and api.url.startswith("https://")
        trusting = ssl.create_default_context(cafile=str(api.ca_path))
        with httpx.Client(verify=trusting) as http:
            r = http.post(api.url + "/nothing", extensions={"sni_hostname": api.HOST})
            assert r.status_code == 404
        for verify, name in [(trusting, "evil.example.test"), (True, api.HOST)]:
            with httpx.Client(verify=verify) as http, pytest.raises(
                    httpx.ConnectError, match="(?i)hostname|certificate"):
                http.post(api.url + "/nothing", extensions={"sni_hostname": name})
        assert f'"{api.HOST}" = "127.0.0.1:{api.port}"' in api.gateway_toml()


class _ToGateway(httpcore2.SyncBackend):
    """Every TCP connection goes to the gateway's Unix socket instead."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = str(socket_path)

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]
        return self.connect_unix_socket(self.socket_path, timeout)


def through_gateway(socket_path: Path, gateway_ca: bytes) -> httpx2.Client:
    """A client (httpx2: what the SDKs take) whose proxy is the gateway's Unix socket, as
    HTTPS_PROXY is in the sandbox, trusting only the gateway's per-trial CA."""
    transport = httpx2.HTTPTransport()
    # httpx2 has no proxy over a Unix socket; its pool is httpcore2's, which takes a backend.
    transport._pool = httpcore2.HTTPProxy(
        proxy_url="http://gateway:80", network_backend=_ToGateway(socket_path),
        ssl_context=ssl.create_default_context(cadata=gateway_ca.decode()))
    return httpx2.Client(transport=transport, trust_env=False)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_through_the_gateway_the_sdk_streams_with_a_placeholder_and_the_standin_gets_the_key(
        provider: str, tmp_path: Path) -> None:
    placeholder, real = "proctor-placeholder-KEY-1a2b", KEY
    with make_standin(provider, tls=tmp_path / "ca") as api:
        host = GatewayHost()
        try:
            gateway = host.start(GatewaySpec(
                socket_path=tmp_path / "gw.sock", resolve=api.resolve, trust=[api.ca_path],
                secrets=[BrokeredSecret(name="KEY", placeholder=placeholder, value=real,
                                        hosts=[api.HOST])]))
            with through_gateway(gateway.spec.socket_path, gateway.ca_pem) as http:
                client = make_client(provider, f"https://{api.HOST}", placeholder, http)
                turns, usage = DRIVE[provider](client, True)
            # The gateway logs a request once it has passed the answer's last byte on, which
            # the client may have read a moment before: wait for the sixth (one full run
            # failed with 5).
            deadline = time.monotonic() + 5
            while len(gateway.entries()) < 6 and time.monotonic() < deadline:
                time.sleep(0.02)
            entries = gateway.entries()
        finally:
            host.close()
        assert turns == EXPECTED[provider]
        assert_usage(provider, usage)
        assert_resumed(api.calls())
        assert api.keys() == {real}
        assert {e.host for e in entries} == {api.HOST} and len(entries) == 6
