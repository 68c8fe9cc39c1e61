"""The codex harness without Docker: its command lines, options, key and image needs, a turn
run against a stand-in Sandbox (logic only; test_codex_docker runs the real CLI), and the
stream parser on the real Codex 0.171.0 streams that test recorded."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine.harness.cli import harness_packages, harness_secrets
from engine.harness.codex import CodexHarness, toml_value
from engine.harness.registry import harness_class
from engine.harness.streams.codex import CodexStream
from engine.models import Usage
from engine.spec import Secret
from tests.engine.test_claude_code import FakeSandbox

STREAMS = Path(__file__).parent.parent / "data" / "streams"
THREAD = "01a22f38-c800-7a50-9421-c981f04f11a1"
PROVIDER = ('model_providers.proctor={name = "OpenAI via Proctor", base_url = '
            '"https://api.openai.com/v1", wire_api = "responses", env_key = "OPENAI_API_KEY", '
            'supports_websockets = false}')
QUIET = ["-c", "analytics={enabled = false}", "-c", "check_for_update_on_startup=false",
         "-c", "features={plugins = false, apps = false}"]
BASE = ["codex", "exec", "--json", "--skip-git-repo-check", "--color", "never",
        "--dangerously-bypass-approvals-and-sandbox", "-c", 'model_provider="proctor"',
        "-c", PROVIDER, *QUIET]


def harness(**options) -> CodexHarness:
    return CodexHarness(CodexHarness.Options(**options))


def real(turn: int) -> list[str]:
    return (STREAMS / f"codex_real_turn{turn}.jsonl").read_text().splitlines()


def test_it_is_registered_as_codex():
    assert harness_class("codex") is CodexHarness


def test_turn_one_reads_the_prompt_from_stdin_and_later_turns_resume_its_thread():
    h = harness()
    assert h.command(1) == BASE + ["-"]
    h.session_id = THREAD
    assert h.command(2) == BASE + ["resume", THREAD, "-"]
    h.session_id = None  # turn 1 never said its thread: the latest one
    assert h.command(2) == BASE + ["resume", "--last", "-"]


def test_options_go_on_the_command_line_as_config_overrides():
    h = harness(model="gpt-5-codex", args=["--enable", "web_search"], codex_sandbox=True,
                base_url="https://llm.example.test/v1",
                settings={"model_reasoning_effort": "low", "features": {"apps": True},
                          "shell_environment_policy": {"inherit": "all"}})
    argv = h.command(1)
    assert argv[:8] == ["codex", "exec", "--json", "--skip-git-repo-check", "--color", "never",
                        "-s", "workspace-write"]
    assert "--dangerously-bypass-approvals-and-sandbox" not in argv
    assert argv[8:10] == ["-m", "gpt-5-codex"] and argv[-3:] == ["--enable", "web_search", "-"]
    # Every -c value is TOML, as Codex parses it; the user's settings win over the defaults.
    config = {}
    for flag, pair in zip(argv, argv[1:]):
        if flag == "-c":
            key, value = pair.split("=", 1)
            config[key] = tomllib.loads(f"v = {value}")["v"]
    assert config["model_providers.proctor"]["base_url"] == "https://llm.example.test/v1"
    assert config["features"] == {"plugins": False, "apps": True}
    assert config["model_reasoning_effort"] == "low"
    assert config["shell_environment_policy"] == {"inherit": "all"}


def test_mcp_servers_are_config_tables():
    servers = {"files": {"command": "npx", "args": ["-y", "some-mcp-server"],
                         "env": {"A B": "1"}},
               "docs": {"url": "https://mcp.example.test/mcp"}}
    argv = harness(mcp=servers).command(1)
    pairs = [p for f, p in zip(argv, argv[1:]) if f == "-c" and p.startswith("mcp_servers.")]
    assert {p.split("=", 1)[0]: tomllib.loads("v = " + p.split("=", 1)[1])["v"]
            for p in pairs} == {f"mcp_servers.{k}": v for k, v in servers.items()}


def test_toml_values_parse_back():
    value = {"s": 'a "quoted"\nline ☃', "n": 3, "f": 1.5, "b": True, "l": [1, "x"],
             "t": {"odd key": {"x": False}}}
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value
    with pytest.raises(ValueError):
        toml_value(None)


@pytest.mark.parametrize("options, wrong", [
    ({"version": "latest"}, "version"), ({"max_turns": 5}, "max_turns"),
    ({"api_key_env": "NOT A NAME"}, "api_key_env"), ({"modle": "x"}, "modle"),
    ({"codex_sandbox": "yes"}, "codex_sandbox"), ({"base_url": ""}, "base_url"),
])
def test_bad_options_are_refused(options, wrong):
    with pytest.raises(ValidationError) as refused:
        CodexHarness.Options(**options)
    assert wrong in str(refused.value)


def test_the_image_gets_the_pinned_cli_and_the_key_is_a_brokered_secret():
    assert harness_packages(harness()) == ["@openai/codex@0.171.0"]
    assert harness_packages(harness(version="0.170.0")) == ["@openai/codex@0.170.0"]
    assert harness_secrets(harness()) == {
        "OPENAI_API_KEY": Secret(hosts=("api.openai.com",), env="OPENAI_API_KEY")}
    assert harness_secrets(harness(api_key_env=None)) == {}
    assert CodexHarness.rules_file == "AGENTS.md"


def test_two_turns_on_a_stand_in_sandbox_resume_and_count_each_turns_own_usage():
    sandbox = FakeSandbox([(real(1), 0, ""), (real(2), 0, "")],
                          versions={"@openai/codex": "codex-cli 0.171.0"})
    h = harness(model="gpt-5-codex")
    assert h.start(sandbox) == "0.171.0 · model gpt-5-codex"
    live: list = []
    first = h.run_turn(sandbox, "do it", 1, 60, live.append)
    second = h.run_turn(sandbox, "again", 2, 60, live.append)
    (command1, kw1), (command2, kw2) = sandbox.commands
    assert " resume " not in command1 and command2.endswith(f" resume {THREAD} -")
    assert kw1["stdin_path"] == "/tmp/.proctor/prompt-1.txt" and kw1["user"] == "agent"
    assert kw1["env"] == {} and kw1["timeout"] == 60
    assert [first.finished_reason, second.finished_reason] == ["done", "done"]
    assert first.model == second.model == "gpt-5-codex"  # the stream never names it
    # Turn 2's stream reports the thread's total (13200 in); the turn's own share is recorded.
    assert first.usage == second.usage == Usage(input=6600, output=300, cache_read=3000,
                                                cache_write=0, reasoning=60)
    assert live == first.items + second.items


def test_a_cli_that_crashes_before_its_result_fails_the_turn_with_its_last_words():
    clap = ("error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, "
            "use '-- --bogus'\n\nUsage: codex exec [OPTIONS] [PROMPT]\n\n"
            "For more information, try '--help'.\n")
    sandbox = FakeSandbox([(real(1)[:3], 2, clap), ([], 1, "thread panicked\nBoom\n")])
    h = harness()
    out = h.run_turn(sandbox, "do it", 1, 60, lambda item: None)
    assert out.finished_reason == "failed: codex exited 2: error: unexpected argument '--bogus' found"
    assert h.session_id == THREAD and out.model is None
    out = h.run_turn(sandbox, "again", 2, 60, lambda item: None)  # no `error:` line: the last one
    assert out.finished_reason == "failed: codex exited 1: Boom"


def test_real_codex_turns_parse_to_the_scripted_trajectory():
    one = CodexStream(1).feed_all("\n".join(real(1)))
    two = CodexStream(2, previous=one.session_usage).feed_all("\n".join(real(2)))
    assert [i.kind for i in one.items] == ["command", "toolCall", "fileChange", "message"]
    command, patch, change, message = one.items
    assert (command.command, command.exit_code, command.output.strip()) == (
        "echo standin-turn-1", 0, "standin-turn-1")
    assert (patch.name, change.path, change.change) == ("apply_patch", "/workspace/hello.txt", "add")
    assert message.text == one.final_message == "I created hello.txt."
    assert [i.command for i in two.items if i.kind == "command"] == ["cat /workspace/hello.txt"]
    assert [(i.path, i.change) for i in two.items if i.kind == "fileChange"] == [
        ("/workspace/second.txt", "add")]
    assert two.final_message == "I created second.txt."
    assert one.session_id == two.session_id == THREAD
    assert one.finished_reason == two.finished_reason == "done"
    assert two.session_usage.input == 13200 and two.usage.input == one.usage.input == 6600
