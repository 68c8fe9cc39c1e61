"""The `claude-code` harness: Anthropic's Claude Code CLI, run in the sandbox for each turn.

Turn 1 is `claude -p --output-format stream-json --verbose …` with the prompt on standard
input; later turns add `--resume <session id>` (the id turn 1's stream gave), so the agent
keeps its conversation. No one is there to approve a tool, so the permission mode and the
allowed tools are set up front. The key is ANTHROPIC_API_KEY, a placeholder in the sandbox
that the gateway swaps for the host's value on the way to api.anthropic.com.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from ..options import EnvName, Filled
from ..sandbox.container import ENGINE_DIR
from . import OnItem
from .cli import CliHarness, CliOptions
from .streams import StreamParser
from .streams.claude import ClaudeStream

VERSION = "2.1.332"
SETTINGS_FILE = f"{ENGINE_DIR}/claude-settings.json"
MCP_FILE = f"{ENGINE_DIR}/claude-mcp.json"
# What it may do without asking: read, search, edit and run commands in its sandbox.
DEFAULT_TOOLS = ["Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "Read", "Glob", "Grep"]


class ClaudeCodeHarness(CliHarness):
    name = "claude-code"
    package = "@anthropic-ai/claude-code"
    rules_file = "CLAUDE.md"
    key_variable = "ANTHROPIC_API_KEY"
    key_hosts = ("api.anthropic.com",)
    # No update checks, telemetry or error reports: the sandbox reaches only the API.
    base_env = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    class Options(CliOptions):
        version: str = VERSION
        api_key_env: EnvName | None = "ANTHROPIC_API_KEY"
        allowed_tools: list[Filled] = Field(default_factory=lambda: list(DEFAULT_TOOLS))
        # The modes of 2.1.x, old and new ("default" became "manual"); the CLI refuses the others.
        permission_mode: Literal["acceptEdits", "auto", "bypassPermissions", "default", "dontAsk",
                                 "manual", "plan"] = "acceptEdits"

    options: Options

    def command(self, turn: int) -> list[str]:
        o = self.options
        argv = ["claude", "-p", "--output-format", "stream-json", "--verbose",
                "--permission-mode", o.permission_mode]
        if o.allowed_tools:  # one comma-joined value: the flag takes several, and would eat more
            argv += ["--allowedTools", ",".join(o.allowed_tools)]
        if o.model:
            argv += ["--model", o.model]
        if o.max_turns is not None:
            argv += ["--max-turns", str(o.max_turns)]
        if o.settings:
            argv += ["--settings", SETTINGS_FILE]
        if o.mcp:  # only these: none from the workspace's .mcp.json or the user's config
            argv += ["--mcp-config", MCP_FILE, "--strict-mcp-config"]
        if turn > 1:
            # Its own session when turn 1 said it; else the latest in this folder.
            argv += ["--resume", self.session_id] if self.session_id else ["--continue"]
        return argv + list(o.args)

    def parser(self, turn: int, on_item: OnItem) -> StreamParser:
        return ClaudeStream(turn, on_item)

    def config_files(self) -> dict[str, bytes]:
        files = {SETTINGS_FILE: self.settings_json()} if self.options.settings else {}
        if self.options.mcp:
            files[MCP_FILE] = json.dumps({"mcpServers": self.options.mcp}, indent=2).encode()
        return files
