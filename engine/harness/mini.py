"""The mini harness: a built-in agent loop against an OpenAI-compatible endpoint
(SPEC.md "The judge and the mini harness").

The engine, on the host, talks to the model; the model's only reach into the
sandbox is the one tool offered, `bash`, run there with `Sandbox.exec`. The
conversation lasts the whole trial: each `c.send` adds a user message, and a
turn ends when the model answers without a tool call, or after `max_steps`
model calls.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import Field

from .. import keys, limits
from ..config import HttpUrl
from ..errors import Void
from ..options import EnvName, Filled
from ..text import utc_now
from ..models import TrajectoryItem, Usage
from ..sandbox.container import WORKSPACE, Sandbox, SandboxGone
from . import OnItem, TurnOutput
from .registry import HarnessOptions

RULES_FILE = "AGENTS.md"
TOOL_TIMEOUT_S = 300  # one bash call; a hung command should not eat the whole trial
TOOL_OUTPUT_MAX = 16_000  # what goes back to the model: big outputs cost tokens, not insight
RULES_MAX = 32_000
MAX_ATTEMPTS = 5  # per model call: pauses of 0.5, 1, 2, 4 s between them
RETRY_AFTER_MAX_S = 20  # a longer Retry-After is not worth waiting for within one trial
CONNECT_TIMEOUT_S = 30

SYSTEM = (
    f"You are a coding agent working in a Linux sandbox. The project is in {WORKSPACE}, the working "
    "directory of every command. Use the bash tool to read files, edit them and run commands; each call "
    "runs in a fresh shell, so `cd` and exported variables do not carry over. Work until the task is "
    "done, then answer with a short summary and no tool call."
)

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (f"Run a shell command with sh in {WORKSPACE}. Returns its combined stdout and "
                        "stderr and its exit code."),
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]},
    },
}


class _ApiFailed(Exception):
    """The model API gave no usable answer: the trial is void, not the agent's fault."""


class MiniHarness:
    rules_file = RULES_FILE

    class Options(HarnessOptions):
        model: Filled
        base_url: HttpUrl  # OpenAI-compatible: `/chat/completions` is added
        api_key_env: EnvName | None = None  # the host variable holding the key; none for a local server
        max_steps: int = Field(default=30, ge=1, le=10_000)  # model calls per turn

    def __init__(self, options: Options):
        self.options = options
        self.max_steps = options.max_steps
        self.url = options.base_url.rstrip("/") + "/chat/completions"
        self.headers: dict[str, str] = {}
        self.messages: list[dict[str, Any]] = []

    def start(self, sandbox: Sandbox) -> str:
        o = self.options
        # Void here, before the first turn: without its key the agent never had a try.
        if o.api_key_env:
            key = keys.get(o.api_key_env)
            if not key:
                raise Void(f"the mini harness's key variable {o.api_key_env} is not set: "
                           "export it on the host or save it in the studio's Settings", "harness")
            self.headers = {"Authorization": f"Bearer {key}"}
        self.messages = [{"role": "system", "content": SYSTEM + _rules(sandbox)}]
        return f"{o.model} at {urlsplit(o.base_url).netloc or o.base_url}"

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput:
        deadline = time.monotonic() + timeout
        out = TurnOutput()

        def emit(item: TrajectoryItem) -> None:
            out.items.append(item)
            on_item(item)

        self.messages.append({"role": "user", "content": prompt})
        with httpx.Client() as client:
            for _ in range(self.max_steps):
                if time.monotonic() >= deadline:
                    out.finished_reason = "timeout"  # the trial's own timer takes it from here
                    return out
                try:
                    body = self._complete(client, sandbox, deadline)
                except _ApiFailed as e:
                    out.finished_reason = f"failed: model API {e}"
                    return out
                out.usage = out.usage.add(_usage(body.get("usage")))
                # The model the API says served it (a dated snapshot, or another model entirely).
                out.model = _model(body.get("model")) or out.model
                message = body["choices"][0]["message"]
                text = _text(message.get("content"))
                calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
                # Only the standard fields go back: providers add their own that others reject.
                self.messages.append({"role": "assistant", "content": message.get("content"),
                                      **({"tool_calls": calls} if calls else {})})
                if text:
                    emit(TrajectoryItem(kind="message", turn=turn, at=_now(), role="assistant",
                                        text=text))
                if not calls:
                    out.finished_reason = "done"
                    return out
                for call in calls:
                    reply = self._tool(sandbox, call, turn, deadline, emit)
                    self.messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                          "content": reply})
        out.finished_reason = "max_steps"
        return out

    def _tool(self, sandbox: Sandbox, call: dict[str, Any], turn: int, deadline: float,
              emit: OnItem) -> str:
        """Run one tool call; what the model is told about it."""
        function = call.get("function") or {}
        name, raw = function.get("name", ""), function.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = None
        command = args.get("command") if isinstance(args, dict) else None
        if name != "bash" or not isinstance(command, str):
            # Told to the model so it can correct itself; kept as a toolCall item so it shows.
            problem = (f"unknown tool {name!r}: the only tool is bash" if name != "bash"
                       else 'bash needs arguments {"command": "<shell command>"}')
            emit(TrajectoryItem(kind="toolCall", turn=turn, at=_now(), name=name, input=raw,
                                output=problem))
            return f"error: {problem}"
        limit = min(max(deadline - time.monotonic(), 0.1), TOOL_TIMEOUT_S)
        result = sandbox.exec(command, timeout=limit, user="agent")
        output = _cap(result.output)
        # The record's copy is cut with a read mark, so redaction never keeps half a key.
        emit(TrajectoryItem(kind="command", turn=turn, at=_now(), command=command,
                            exit_code=result.exit_code,
                            output=limits.read_cut(result.output, limits.ITEM_READ)[0]))
        status = f"timed out after {limit:.0f}s" if result.timed_out else f"exit code {result.exit_code}"
        return f"{output or '(no output)'}\n[{status}]"

    def _complete(self, client: httpx.Client, sandbox: Sandbox, deadline: float) -> dict[str, Any]:
        """One chat completion. 429, 5xx, a lost connection or a malformed body are asked
        again with backoff, within the turn's budget; anything else raises _ApiFailed."""
        request = {"model": self.options.model, "messages": self.messages, "tools": [BASH_TOOL]}
        problem, pause, attempts = "", 0.5, 0
        while attempts < MAX_ATTEMPTS:
            if attempts:
                if time.monotonic() + pause >= deadline:
                    break
                _sleep(pause, sandbox)
            pause_next = min(0.5 * 2 ** attempts, 8)
            attempts += 1
            _check_alive(sandbox)
            # A request never outlives the turn's budget, so a timed-out trial's thread ends too.
            left = max(deadline - time.monotonic(), 0.1)
            try:
                response = client.post(self.url, json=request, headers=self.headers,
                                       timeout=httpx.Timeout(left, connect=min(left, CONNECT_TIMEOUT_S)))
            except httpx.TransportError as e:
                problem, pause = f"unreachable ({type(e).__name__}: {e})", pause_next
                continue
            _check_alive(sandbox)
            status = response.status_code
            if status == 429 or status >= 500:
                problem = f"answered {status}: {_snippet(response.text)}"
                # The server's own pause, when it names a short one, but never less than the backoff.
                pause = max(_retry_after(response) or 0, pause_next)
                continue
            if status >= 400:  # 401, 404, 400…: asking again will not change the answer
                raise _ApiFailed(f"answered {status}: {_snippet(response.text)}")
            try:
                body = response.json()
                if isinstance(body["choices"][0]["message"], dict):
                    return body
            except (ValueError, KeyError, IndexError, TypeError):
                pass
            problem, pause = f"answered without a message: {_snippet(response.text)}", pause_next
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        raise _ApiFailed(f"{problem or 'not asked: the turn had no time left'} (after {tries})")


def _rules(sandbox: Sandbox) -> str:
    """The workspace's AGENTS.md (the eval's `rules` land there) joins the system message,
    as agents that honour AGENTS.md do; the model need not think of reading it."""
    try:
        text = sandbox.read_file(RULES_FILE).decode("utf-8", "replace").strip()
    except (FileNotFoundError, IsADirectoryError):
        return ""
    return f"\n\nProject rules, from {WORKSPACE}/{RULES_FILE}:\n{text[:RULES_MAX]}" if text else ""


def _usage(data: Any) -> Usage:
    if not isinstance(data, dict):
        return Usage()
    prompt = data.get("prompt_tokens_details") or {}
    completion = data.get("completion_tokens_details") or {}
    return Usage(input=_int(data.get("prompt_tokens")) or 0, output=_int(data.get("completion_tokens")) or 0,
                 cache_read=_int(prompt.get("cached_tokens")) or 0,
                 reasoning=_int(completion.get("reasoning_tokens")))


def _model(value: Any) -> str | None:
    """A response's `model`: a short printable name, else none."""
    if isinstance(value, str) and 0 < len(value.strip()) <= 200 and value.isprintable():
        return value.strip()
    return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(content: Any) -> str:
    """A message's content: a string, or (some providers) a list of typed parts."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict)).strip()
    return content.strip() if isinstance(content, str) else ""


def _cap(text: str) -> str:
    """Head and tail: a failing test run says why at its end, a listing at its start."""
    if len(text) <= TOOL_OUTPUT_MAX:
        return text
    half = TOOL_OUTPUT_MAX // 2
    return f"{text[:half]}\n… [{len(text) - 2 * half:,} chars cut] …\n{text[-half:]}"


def _retry_after(response: httpx.Response) -> float | None:
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None  # absent, or an HTTP date: use the backoff
    return seconds if 0 <= seconds <= RETRY_AFTER_MAX_S else None


def _snippet(text: str) -> str:
    return " ".join(text.split())[:200] or "(empty body)"


def _check_alive(sandbox: Sandbox) -> None:
    """A cancelled or timed-out trial destroys the sandbox; stop asking the model then."""
    if sandbox.destroyed:
        raise SandboxGone("the sandbox was destroyed while the agent worked")


def _sleep(seconds: float, sandbox: Sandbox) -> None:
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > 0:
        _check_alive(sandbox)
        time.sleep(min(left, 0.1))


def _now() -> str | None:
    return utc_now()
