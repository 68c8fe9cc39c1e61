"""The gemini-cli harness without Docker: its command lines, settings file, options, key and
image needs, a turn run against a stand-in Sandbox (logic only; test_gemini_cli_docker runs the
real CLI), and the stream parser on the real Gemini CLI 0.61.0 streams that test recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.harness.cli import harness_packages, harness_secrets
from engine.harness.gemini_cli import SETTINGS_FILE, GeminiCliHarness
from engine.harness.registry import harness_class
from engine.harness.streams.gemini import GeminiStream
from engine.spec import Secret
from tests.engine.test_claude_code import FakeSandbox

STREAMS = Path(__file__).parent.parent / "data" / "streams"
BASE = ["gemini", "--output-format", "stream-json", "--approval-mode", "yolo", "--skip-trust"]
SESSION = "a1a454d9-8314-4f2b-9304-01479f24b68e"
AUTH = {"security": {"auth": {"selectedType": "gemini-api-key"}}}


def harness(**options) -> GeminiCliHarness:
    return GeminiCliHarness(GeminiCliHarness.Options(**options))


def real(turn: int) -> list[str]:
    return (STREAMS / f"gemini_real_turn{turn}.jsonl").read_text().splitlines()


def settings(h: GeminiCliHarness) -> dict:
    return json.loads(h.config_files()[SETTINGS_FILE])


def test_it_is_registered_as_gemini_cli():
    assert harness_class("gemini-cli") is GeminiCliHarness


def test_turn_one_prints_a_stream_and_later_turns_resume_its_session():
    h = harness()
    assert h.command(1) == BASE
    h.session_id = SESSION
    assert h.command(2) == BASE + ["--resume", SESSION]
    h.session_id = None  # turn 1 never said its session: the latest one in the folder
    assert h.command(2) == BASE + ["--resume", "latest"]


def test_options_go_on_the_command_line():
    h = harness(model="gemini-2.5-flash", approval_mode="auto_edit", args=["--debug"])
    assert h.command(1) == ["gemini", "--output-format", "stream-json", "--approval-mode",
                            "auto_edit", "--skip-trust", "--model", "gemini-2.5-flash", "--debug"]


def test_the_settings_file_has_the_key_auth_and_the_variants_settings_merged_in():
    base = settings(harness())
    assert base["security"] == AUTH["security"]
    assert base["privacy"] == {"usageStatisticsEnabled": False}
    assert base["general"]["enableAutoUpdate"] is False
    servers = {"files": {"command": "npx", "args": ["-y", "some-mcp-server"]}}
    mine = settings(harness(
        max_turns=7, mcp=servers,
        settings={"security": {"folderTrust": {"enabled": False}},
                  "general": {"enableAutoUpdate": True}, "ui": {"theme": "ANSI"}}))
    # Tables merge key by key: the variant's keys win, the harness's others stay.
    assert mine["security"] == {"auth": {"selectedType": "gemini-api-key"},
                                "folderTrust": {"enabled": False}}
    assert mine["general"] == {"enableAutoUpdate": True, "enableAutoUpdateNotification": False}
    assert mine["ui"] == {"theme": "ANSI"} and mine["mcpServers"] == servers
    assert mine["model"] == {"maxSessionTurns": 7}
    # The CLI reads a system settings file only if no folder above it is writable by others.
    assert not SETTINGS_FILE.startswith("/tmp/")
    env = GeminiCliHarness.base_env
    assert env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"] == SETTINGS_FILE and env["GEMINI_SANDBOX"] == "false"


@pytest.mark.parametrize("options, wrong", [
    ({"version": "latest"}, "version"), ({"approval_mode": "ask"}, "approval_mode"),
    ({"max_turns": 0}, "max_turns"), ({"api_key_env": "NOT A NAME"}, "api_key_env"),
    ({"permission_mode": "yolo"}, "permission_mode"),
])
def test_bad_options_are_refused(options, wrong):
    with pytest.raises(ValidationError) as refused:
        GeminiCliHarness.Options(**options)
    assert wrong in str(refused.value)


def test_the_image_gets_the_pinned_cli_and_the_key_is_a_brokered_secret():
    assert harness_packages(harness()) == ["@google/gemini-cli@0.61.0"]
    assert harness_secrets(harness()) == {
        "GEMINI_API_KEY": Secret(hosts=("generativelanguage.googleapis.com",), env="GEMINI_API_KEY")}
    assert harness_secrets(harness(api_key_env="MY_KEY"))["GEMINI_API_KEY"].env == "MY_KEY"
    assert harness_secrets(harness(api_key_env=None)) == {}


def test_two_turns_on_a_stand_in_sandbox_resume_and_name_the_version():
    sandbox = FakeSandbox([(real(1), 0, ""), (real(2), 0, "")],
                          versions={"@google/gemini-cli": "0.61.0"})
    h = harness(model="gemini-2.5-pro")
    assert h.start(sandbox) == "0.61.0 · model gemini-2.5-pro"
    assert json.loads(sandbox.files[SETTINGS_FILE])["security"] == AUTH["security"]
    live: list = []
    first = h.run_turn(sandbox, "do it", 1, 60, live.append)
    second = h.run_turn(sandbox, "again", 2, 60, live.append)
    (command1, kw1), (command2, kw2) = sandbox.commands
    assert "--resume" not in command1 and command2.endswith(f"--resume {SESSION}")
    assert kw1["stdin_path"] == "/tmp/.proctor/prompt-1.txt" and kw1["user"] == "agent"
    assert kw1["env"]["GEMINI_CLI_SYSTEM_SETTINGS_PATH"] == SETTINGS_FILE
    assert [first.finished_reason, second.finished_reason] == ["done", "done"]
    assert live == first.items + second.items
    assert second.final_message == "I created second.txt."


def test_a_cli_that_exits_before_its_result_fails_the_turn_with_its_last_words():
    sandbox = FakeSandbox([([], 41, "Invalid auth method selected.\n")])
    out = harness().run_turn(sandbox, "do it", 1, 60, lambda item: None)
    assert out.finished_reason == "failed: gemini-cli exited 41: Invalid auth method selected."
    # A bad flag: yargs' complaint comes first, the help text after it.
    sandbox = FakeSandbox([([], 1, "Unknown arguments: bogus\nUsage: gemini [options]\n"
                                   "  -h, --help  Show help  [boolean]\n")])
    out = harness().run_turn(sandbox, "do it", 1, 60, lambda item: None)
    assert out.finished_reason == "failed: gemini-cli exited 1: Unknown arguments: bogus"


def test_real_gemini_cli_turns_parse_to_the_scripted_trajectory():
    one = GeminiStream(1).feed_all("\n".join(real(1)))
    two = GeminiStream(2).feed_all("\n".join(real(2)))
    assert [i.kind for i in one.items] == ["command", "toolCall", "fileChange", "message"]
    command, write, change, message = one.items
    assert (command.command, command.output) == ("echo standin-turn-1", "standin-turn-1")
    assert (write.name, change.path) == ("write_file", "/workspace/hello.txt")
    assert message.text == one.final_message == "I created hello.txt."
    assert [i.command for i in two.items if i.kind == "command"] == ["cat /workspace/hello.txt"]
    assert [i.path for i in two.items if i.kind == "fileChange"] == ["/workspace/second.txt"]
    assert two.final_message == "I created second.txt."
    for result in (one, two):
        assert (result.model, result.finished_reason) == ("gemini-2.5-pro", "done")
        # Three API calls of the stand-in's usage each, cached tokens counted in the input.
        assert result.usage.input == 6600 and result.usage.cache_read == 3000
        assert result.usage.output == 240
    assert one.session_id == two.session_id == SESSION  # turn 2 went on in turn 1's session
