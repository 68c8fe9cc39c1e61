"""The `gemini-cli` harness: Google's Gemini CLI, run in the sandbox for each turn.

Each turn is `gemini --output-format stream-json --approval-mode yolo --skip-trust …` with the
prompt on standard input (stdout is not a terminal, so the CLI runs headless and reads it);
later turns add `--resume <session id>` (the id turn 1's `init` event gave). The settings are
the system settings file (the API-key auth type, no update checks or usage statistics, the
variant's `settings` and MCP servers merged in), root's and read-only to the agent, so they
override any user or workspace settings. The key is GEMINI_API_KEY, a placeholder in the
sandbox that the gateway swaps for the host's value on the way to the Gemini API.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from ..options import EnvName
from . import OnItem
from .cli import CliHarness, CliOptions
from .streams import StreamParser
from .streams.gemini import GeminiStream

VERSION = "0.61.0"
# The system settings path: the CLI reads it only if it and every folder above it are root's and
# writable by no one else (so not under /tmp); they override the user's and the workspace's.
SETTINGS_FILE = "/etc/gemini-cli/settings.json"
# Without the auth type a headless CLI exits 41; the rest keeps it off the network but the API.
BASE_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
}


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it, tables merged key by key, any other value replaced."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


class GeminiCliHarness(CliHarness):
    name = "gemini-cli"
    package = "@google/gemini-cli"
    rules_file = "GEMINI.md"
    key_variable = "GEMINI_API_KEY"
    key_hosts = ("generativelanguage.googleapis.com",)
    # The settings file; and never its own Docker sandbox, which --yolo would otherwise ask for.
    base_env = {"GEMINI_CLI_SYSTEM_SETTINGS_PATH": SETTINGS_FILE, "GEMINI_SANDBOX": "false"}

    class Options(CliOptions):
        version: str = VERSION
        api_key_env: EnvName | None = "GEMINI_API_KEY"
        # No one is there to approve a tool: yolo runs them all; auto_edit only the edits.
        approval_mode: Literal["yolo", "auto_edit", "default", "plan"] = "yolo"

    options: Options

    def command(self, turn: int) -> list[str]:
        o = self.options
        argv = ["gemini", "--output-format", "stream-json", "--approval-mode", o.approval_mode,
                "--skip-trust"]
        if o.model:
            argv += ["--model", o.model]
        if turn > 1:
            # Its own session when turn 1 said it; else the latest in this folder.
            argv += ["--resume", self.session_id or "latest"]
        return argv + list(o.args)

    def parser(self, turn: int, on_item: OnItem) -> StreamParser:
        return GeminiStream(turn, on_item)

    def settings(self) -> dict[str, Any]:
        """The settings file's content: the harness's own, then the variant's over them."""
        o = self.options
        own = dict(BASE_SETTINGS)
        if o.max_turns is not None:
            own = merged(own, {"model": {"maxSessionTurns": o.max_turns}})
        if o.mcp:
            own["mcpServers"] = dict(o.mcp)
        return merged(own, o.settings)

    def config_files(self) -> dict[str, bytes]:
        return {SETTINGS_FILE: json.dumps(self.settings(), indent=2).encode()}

    def last_words(self, stderr: str, stdout: str) -> str | None:
        # A bad flag prints yargs' complaint first, then the whole help text.
        for line in stderr.splitlines():
            if line.startswith(("Unknown argument", "Not enough arguments", "Invalid values")):
                return line
        return super().last_words(stderr, stdout)
