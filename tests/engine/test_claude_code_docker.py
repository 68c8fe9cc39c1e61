"""The `claude-code` harness end to end: the real Claude Code CLI, installed offline into the
case's image, runs two turns in a sandbox with no network but the gateway, against a stand-in
Anthropic API on loopback (HTTPS as api.anthropic.com, through `[gateway] resolve`/`trust`).
Its key is brokered: the sandbox holds a placeholder, the stand-in receives the real key."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from engine.harness.claude_code import ClaudeCodeHarness
from tests.conftest import BASE_IMAGE
from tests.cli_harness import (
    check_key_not_stored, check_resumed, check_two_turns, record_streams, save_streams,
)
from tests.standin import AnthropicStandIn, Say, Script, Shell

REAL_KEY = "sk-ant-proctor-test-9f3c1e7a5b2d4c6e8f0a1b3c5d7e9f1a"
MODEL = "claude-sonnet-4-6"
STREAMS = Path(__file__).parent.parent / "data" / "streams"

EVAL = f"""
from engine import evaluation

@evaluation()
def claude_two_turns(c):
    c.send("Run the command, then create hello.txt.")
    c.send("Now create second.txt.")
    c.exec("cat /proc/*/environ 2>/dev/null | tr '\\\\0' '\\\\n'").stdout.to_contain(
        "ANTHROPIC_API_KEY=proctor-placeholder-ANTHROPIC_API_KEY")
    c.exec("grep -rl {REAL_KEY} /proc/*/environ /home /root /tmp /workspace 2>/dev/null; true"
           ).stdout.to_equal("")
"""


def toml(api: AnthropicStandIn) -> str:
    return f"""
[defaults]
image = "{BASE_IMAGE}"
timeout = "5m"

[[variants]]
name = "claude"
harness = "claude-code"
model = "{MODEL}"
max_turns = 10
api_key_env = "PROCTOR_TEST_ANTHROPIC_KEY"

""" + api.gateway_toml()


@pytest.mark.docker
@pytest.mark.slow
def test_claude_code_runs_two_turns_through_the_gateway(suite, run_eval, store, monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_ANTHROPIC_KEY", REAL_KEY)
    streams = record_streams(monkeypatch, ClaudeCodeHarness)  # each turn's real stdout, kept as a sample
    with AnthropicStandIn(tls=tmp_path / "tls") as api:
        path = suite(EVAL, toml=toml(api))
        summary, events, records = run_eval(path)
    [run] = summary.runs
    record = records[run.trials[0].id]
    if os.environ.get("PROCTOR_SAVE_STREAMS"):
        save_streams(streams, "claude")
    assert record.outcome == "pass", (record.failure, record.validations,
                                      [t.raw_output for t in record.turns])

    # The image and the harness phase name the CLI and its version.
    spans = {p.phase: p for p in record.phases}
    assert "@anthropic-ai/claude-code@2.1.332" in spans["image"].detail
    assert record.image.startswith("proctor-image:cli-")
    assert spans["harness"].detail == f"claude-code harness · 2.1.332 · model {MODEL}"

    first, second = record.turns
    check_two_turns(record, MODEL)

    # Turn 2 resumed turn 1's session: its requests carried turn 1's conversation.
    check_resumed(api)

    # The real key reached the stand-in (from the gateway), never the sandbox or the store.
    assert api.keys() == {REAL_KEY}
    brokered = [e for e in record.egress if e.host == "api.anthropic.com"]
    assert brokered and all(e.brokered == ["ANTHROPIC_API_KEY"] for e in brokered if e.path.startswith("/v1/"))
    check_key_not_stored(store, REAL_KEY)
    print(f"image {spans['image'].detail}; turns {first.ms} ms, {second.ms} ms; egress "
          + ", ".join(f"{e.method} {e.host}{e.path} {e.status}" for e in record.egress))


@pytest.mark.docker
def test_a_cli_that_refuses_to_start_or_a_missing_key_is_infra_error(suite, run_eval, monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_ANTHROPIC_KEY", REAL_KEY)
    monkeypatch.delenv("PROCTOR_TEST_NO_SUCH_KEY", raising=False)
    with AnthropicStandIn(tls=tmp_path / "tls") as api:
        path = suite("""
from engine import evaluation

@evaluation()
def one_turn(c):
    c.send("hello")
""", toml=toml(api) + """
[[variants]]
name = "bad-flag"
harness = "claude-code"
args = ["--no-such-flag-for-proctor"]
api_key_env = "PROCTOR_TEST_ANTHROPIC_KEY"

[[variants]]
name = "no-key"
harness = "claude-code"
api_key_env = "PROCTOR_TEST_NO_SUCH_KEY"
""")
        summary, _, records = run_eval(path, variants=["bad-flag", "no-key"])
    by_variant = {r.variant: r for r in records.values()}
    crashed, keyless = by_variant["bad-flag"], by_variant["no-key"]
    assert crashed.outcome == keyless.outcome == "infra_error"
    assert crashed.failure.where == "harness"
    assert crashed.failure.reason.startswith("the harness reported failed: claude-code exited 1: "), \
        crashed.failure.reason
    assert "no-such-flag-for-proctor" in crashed.failure.reason
    assert (keyless.failure.where, keyless.failure.reason) == (
        "env", "secret ANTHROPIC_API_KEY is not set: export PROCTOR_TEST_NO_SUCH_KEY on the host, "
               "or save it in the system keyring (the studio's Settings) before running")
    assert api.calls() == []


@pytest.mark.docker
def test_a_cli_that_cannot_be_installed_is_infra_error_in_one_sentence(suite, run_eval, monkeypatch):
    # npm's registry is a closed port on loopback: this version's packages cannot be fetched.
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("PROCTOR_TEST_ANTHROPIC_KEY", REAL_KEY)
    path = suite("""
from engine import evaluation

@evaluation()
def one_turn(c):
    c.send("hello")
""", toml=f"""
[defaults]
image = "{BASE_IMAGE}"

[[variants]]
name = "claude"
harness = "claude-code"
version = "2.1.1"
api_key_env = "PROCTOR_TEST_ANTHROPIC_KEY"
""")
    summary, _, records = run_eval(path)
    [record] = records.values()
    assert (record.outcome, record.failure.where) == ("infra_error", "image")
    reason = record.failure.reason
    # The CLI's packages; or Node.js itself, on a machine that never fetched it.
    assert re.match(r"npm could not fetch (@anthropic-ai/claude-code@2\.1\.1|node-linux-\w+@\S+): ",
                    reason), reason
    assert "\n" not in reason and "Traceback" not in reason


@pytest.mark.docker
@pytest.mark.slow
def test_a_cli_that_hangs_is_stopped_at_the_timeout(suite, run_eval, monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_ANTHROPIC_KEY", REAL_KEY)
    hangs = Script(turns=[[Shell("python3 -c 'import time; time.sleep(600)'"), Say("never")]])
    with AnthropicStandIn(script=hangs, tls=tmp_path / "tls") as api:
        path = suite("""
from engine import evaluation

@evaluation(timeout="8s")
def hangs(c):
    c.send("wait")
""", toml=toml(api))
        start = time.monotonic()
        summary, _, records = run_eval(path)
        took = time.monotonic() - start
    [record] = records.values()
    assert record.outcome == "fail" and record.failure.kind == "timeout", record.failure
    assert [t.status for t in record.turns] == ["aborted"]
    assert took < 40, f"the hung CLI held the trial {took:.0f} s"
