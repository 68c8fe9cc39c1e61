"""The `codex` harness: OpenAI's Codex CLI, run in the sandbox for each turn.

Turn 1 is `codex exec --json … -` with the prompt on standard input; later turns are
`codex exec --json … resume <thread id> -` (the id turn 1's `thread.started` gave), so the
agent keeps its conversation. Our sandbox is the sandbox: Codex's own (Landlock/seccomp)
and its approvals are off. Codex is pointed at a provider of its own for api.openai.com
over plain HTTP streaming (the built-in one tries a WebSocket first); its key is
OPENAI_API_KEY, a placeholder in the sandbox that the gateway swaps for the host's value.
Settings and MCP servers go on the command line as `-c key=value` (the value is TOML), on
top of defaults that keep it from calling home (analytics, update check, plugin catalogue).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import field_validator

from ..models import Usage
from ..options import EnvName, Filled
from ..sandbox.container import Sandbox
from . import OnItem, TurnOutput
from .cli import CliHarness, CliOptions
from .streams import StreamParser
from .streams.codex import CodexStream

VERSION = "0.171.0"
PROVIDER = "proctor"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# Off unless `settings` turns them on: analytics (ab.chatgpt.com), the update check and the
# plugin/app catalogues (github.com, chatgpt.com); the gateway would deny them anyway.
QUIET: dict[str, Any] = {"analytics": {"enabled": False}, "check_for_update_on_startup": False,
                         "features": {"plugins": False, "apps": False}}


def toml_value(value: Any) -> str:
    """One TOML value, inline (what `-c key=value` parses); JSON strings are TOML strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {type(value).__name__} as TOML")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, table by table."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


class CodexHarness(CliHarness):
    name = "codex"
    package = "@openai/codex"
    rules_file = "AGENTS.md"
    key_variable = "OPENAI_API_KEY"
    key_hosts = ("api.openai.com",)

    class Options(CliOptions):
        version: str = VERSION
        api_key_env: EnvName | None = "OPENAI_API_KEY"
        # The Responses API Codex talks to; the gateway brokers the key for its host.
        base_url: Filled = "https://api.openai.com/v1"
        # True: Codex's own approvals and Landlock sandbox, off by default (ours is outside it).
        codex_sandbox: bool = False

        @field_validator("max_turns")
        @classmethod
        def _no_step_limit(cls, value: int | None) -> int | None:
            if value is not None:
                raise ValueError("Codex has no limit on its steps per turn: leave max_turns out")
            return value

    options: Options

    def __init__(self, options: CliOptions):
        super().__init__(options)
        self.session_usage: Usage | None = None  # the thread's running total after the last turn
        self._stream: CodexStream | None = None

    def command(self, turn: int) -> list[str]:
        o = self.options
        argv = ["codex", "exec", "--json", "--skip-git-repo-check", "--color", "never"]
        if o.codex_sandbox:
            argv += ["-s", "workspace-write"]
        else:
            argv += ["--dangerously-bypass-approvals-and-sandbox"]
        if o.model:
            argv += ["-m", o.model]
        provider = {"name": "OpenAI via Proctor", "base_url": o.base_url, "wire_api": "responses",
                    "env_key": self.key_variable, "supports_websockets": False}
        config: dict[str, Any] = {"model_provider": PROVIDER,
                                  f"model_providers.{PROVIDER}": provider}
        config |= {toml_key(k): v for k, v in merged(QUIET, o.settings).items()}
        config |= {f"mcp_servers.{toml_key(k)}": v for k, v in o.mcp.items()}
        for key, value in config.items():
            argv += ["-c", f"{key}={toml_value(value)}"]
        argv += list(o.args)
        if turn > 1:  # its own thread when turn 1 said it; else the latest one
            argv += ["resume", self.session_id] if self.session_id else ["resume", "--last"]
        return argv + ["-"]  # the prompt from standard input

    def parser(self, turn: int, on_item: OnItem) -> StreamParser:
        self._stream = CodexStream(turn, on_item, previous=self.session_usage)
        self._stream.result.model = self.options.model  # the stream never names it: ours
        return self._stream

    @staticmethod
    def version_in(said: str) -> str | None:
        """`codex --version` says "codex-cli 0.171.0": the first word that starts with a digit."""
        return next((w for w in said.split() if w[:1].isdigit()), None)

    def last_words(self, stderr: str, stdout: str) -> str | None:
        """Its argument parser's `error: …` line, not the "try '--help'" after it."""
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        return errors[-1] if errors else super().last_words(stderr, stdout)

    def run_turn(self, sandbox: Sandbox, prompt: str, turn: int, timeout: float,
                 on_item: OnItem) -> TurnOutput:
        out = super().run_turn(sandbox, prompt, turn, timeout, on_item)
        if self._stream is not None and self._stream.result.session_usage is not None:
            self.session_usage = self._stream.result.session_usage
        return out
