"""The claude-code harness without Docker: its command lines, options, key and image needs, a
turn run against a stand-in Sandbox (logic only; test_claude_code_docker runs the real CLI),
and the stream parser on the real Claude Code 2.1.332 streams that test recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.harness.claude_code import MCP_FILE, SETTINGS_FILE, ClaudeCodeHarness
from engine.harness.cli import harness_packages, harness_secrets
from engine.harness.mini import MiniHarness
from engine.harness.streams.claude import ClaudeStream
from engine.sandbox.container import ExecOutput
from engine.sandbox.node_cli import VERSIONS_FILE
from engine.spec import Secret

STREAMS = Path(__file__).parent.parent / "data" / "streams"
BASE = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode",
        "acceptEdits", "--allowedTools",
        "Bash,Edit,MultiEdit,Write,NotebookEdit,Read,Glob,Grep"]


def harness(**options) -> ClaudeCodeHarness:
    return ClaudeCodeHarness(ClaudeCodeHarness.Options(**options))


class FakeSandbox:
    """Plays back a CLI's stdout lines and exit code for each exec; records what was run."""

    def __init__(self, runs: list[tuple[list[str], int, str]], versions: dict | None = None):
        self.runs, self.versions = list(runs), versions
        self.files: dict[str, bytes] = {}
        self.commands: list[tuple[str, dict]] = []

    def put_files(self, files: dict[str, bytes], base: str = "/workspace") -> None:
        self.files.update({f"{base.rstrip('/')}/{k}": v for k, v in files.items()})

    def read_file(self, path: str, limit: int = 0) -> bytes:
        if path != VERSIONS_FILE or self.versions is None:
            raise FileNotFoundError(path)
        return json.dumps(self.versions).encode()

    def exec(self, command: str, **kw) -> ExecOutput:
        self.commands.append((command, kw))
        lines, code, stderr = self.runs.pop(0)
        for line in lines:
            kw["on_stdout_line"](line)
        return ExecOutput(code, "\n".join(lines), stderr, 5)


def real(turn: int) -> list[str]:
    return (STREAMS / f"claude_real_turn{turn}.jsonl").read_text().splitlines()


def test_turn_one_prints_a_stream_and_later_turns_resume_its_session():
    h = harness()
    assert h.command(1) == BASE
    h.session_id = "c3f90f6f-db56-455d-8d83-7c123e27e19c"
    assert h.command(2) == BASE + ["--resume", "c3f90f6f-db56-455d-8d83-7c123e27e19c"]
    h.session_id = None  # turn 1 never said its session: the latest one in the folder
    assert h.command(2) == BASE + ["--continue"]


def test_options_go_on_the_command_line_and_the_settings_into_a_file():
    h = harness(model="claude-opus-4-1", max_turns=7, allowed_tools=["Read", "Bash(git:*)"],
                permission_mode="bypassPermissions", args=["--append-system-prompt", "Be brief"],
                settings={"env": {"FOO": "1"}})
    assert h.command(1) == [
        "claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode",
        "bypassPermissions", "--allowedTools", "Read,Bash(git:*)", "--model", "claude-opus-4-1",
        "--max-turns", "7", "--settings", SETTINGS_FILE, "--append-system-prompt", "Be brief"]
    assert json.loads(h.config_files()[SETTINGS_FILE]) == {"env": {"FOO": "1"}}
    assert harness().config_files() == {}


def test_mcp_servers_are_the_only_ones_the_cli_loads():
    servers = {"files": {"command": "npx", "args": ["-y", "some-mcp-server"]},
               "docs": {"type": "http", "url": "https://mcp.example.test/mcp"}}
    h = harness(mcp=servers)
    assert h.command(1)[-3:] == ["--mcp-config", MCP_FILE, "--strict-mcp-config"]
    assert json.loads(h.config_files()[MCP_FILE]) == {"mcpServers": servers}
    assert "--mcp-config" not in harness().command(1)


@pytest.mark.parametrize("options, wrong", [
    ({"version": "latest"}, "version"), ({"version": "^2.1.0"}, "version"),
    ({"permission_mode": "ask"}, "permission_mode"), ({"max_turns": 0}, "max_turns"),
    ({"api_key_env": "NOT A NAME"}, "api_key_env"), ({"modle": "x"}, "modle"),
])
def test_bad_options_are_refused(options, wrong):
    with pytest.raises(ValidationError) as refused:
        ClaudeCodeHarness.Options(**options)
    assert wrong in str(refused.value)


def test_the_image_gets_the_pinned_cli_and_the_key_is_a_brokered_secret():
    assert harness_packages(harness()) == ["@anthropic-ai/claude-code@2.1.332"]
    assert harness_packages(harness(version="2.1.197")) == ["@anthropic-ai/claude-code@2.1.197"]
    assert harness_secrets(harness(api_key_env="MY_KEY")) == {
        "ANTHROPIC_API_KEY": Secret(hosts=("api.anthropic.com",), env="MY_KEY")}
    assert harness_secrets(harness(api_key_env=None)) == {}
    # Harnesses that need neither say nothing.
    mini = MiniHarness(MiniHarness.Options(model="m", base_url="http://127.0.0.1:1/v1"))
    assert harness_packages(mini) == [] and harness_secrets(mini) == {}


def test_two_turns_on_a_stand_in_sandbox_resume_and_name_the_version():
    sandbox = FakeSandbox([(real(1), 0, ""), (real(2), 0, "")],
                          versions={"@anthropic-ai/claude-code": "2.1.332 (Claude Code)"})
    h = harness(model="claude-sonnet-4-6", settings={"x": 1})
    assert h.start(sandbox) == "2.1.332 · model claude-sonnet-4-6"
    assert SETTINGS_FILE in sandbox.files
    live: list = []
    first = h.run_turn(sandbox, "do it", 1, 60, live.append)
    second = h.run_turn(sandbox, "again", 2, 60, live.append)
    assert sandbox.files["/tmp/.proctor/prompt-1.txt"] == b"do it"
    (command1, kw1), (command2, kw2) = sandbox.commands
    assert "--resume" not in command1 and command2.endswith(
        "--settings /tmp/.proctor/claude-settings.json --resume c3f90f6f-db56-455d-8d83-7c123e27e19c")
    assert kw1["stdin_path"] == "/tmp/.proctor/prompt-1.txt" and kw1["user"] == "agent"
    assert kw1["timeout"] == 60 and kw1["env"]["DISABLE_AUTOUPDATER"] == "1"
    assert [first.finished_reason, second.finished_reason] == ["done", "done"]
    assert live == first.items + second.items  # every item went out live, in order
    assert second.final_message == "I created second.txt."


def test_a_cli_that_crashes_before_its_result_fails_the_turn_with_its_last_words():
    sandbox = FakeSandbox([(real(1)[:2], 1, "node: something\nError: the CLI fell over\n"),
                           ([], 127, "sh: 1: claude: not found\n")])
    h = harness()
    out = h.run_turn(sandbox, "do it", 1, 60, lambda item: None)
    assert out.finished_reason == "failed: claude-code exited 1: Error: the CLI fell over"
    assert out.exit_code == 1 and "the CLI fell over" in out.raw_output
    assert h.session_id == "c3f90f6f-db56-455d-8d83-7c123e27e19c"  # from the init line it did print
    out = h.run_turn(sandbox, "again", 2, 60, lambda item: None)
    assert out.finished_reason == "failed: claude-code exited 127: sh: 1: claude: not found"


def test_real_claude_code_turns_parse_to_the_scripted_trajectory():
    one = ClaudeStream(1).feed_all("\n".join(real(1)))
    two = ClaudeStream(2).feed_all("\n".join(real(2)))
    assert [i.kind for i in one.items] == ["command", "toolCall", "fileChange", "message"]
    command, write, change, message = one.items
    assert (command.command, command.exit_code, command.output) == (
        "echo standin-turn-1", 0, "standin-turn-1")
    assert (write.name, change.path, change.change) == ("Write", "/workspace/hello.txt", "add")
    assert message.text == one.final_message == "I created hello.txt."
    assert [i.command for i in two.items if i.kind == "command"] == ["cat /workspace/hello.txt"]
    assert [(i.path, i.change) for i in two.items if i.kind == "fileChange"] == [
        ("/workspace/second.txt", "add")]
    for result in (one, two):
        assert (result.model, result.version, result.finished_reason) == (
            "claude-sonnet-4-6", "2.1.332", "done")
        # Three API messages of the stand-in's usage each: 1200 + 1000 read + 100 written in.
        assert result.usage.input == 3 * 2300 and result.usage.cache_read == 3000
        assert result.usage.cache_write == 300 and result.usage.output > 0
    assert one.session_id == two.session_id == "c3f90f6f-db56-455d-8d83-7c123e27e19c"
