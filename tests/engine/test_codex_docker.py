"""The `codex` harness end to end: the real Codex CLI, installed offline into the
case's image, runs two turns in a sandbox with no network but the gateway, against a stand-in
OpenAI Responses API on loopback (HTTPS as api.openai.com, through `[gateway] resolve`/`trust`).
Its key is brokered: the sandbox holds a placeholder, the stand-in receives the real key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.harness.codex import CodexHarness
from tests.conftest import BASE_IMAGE
from tests.cli_harness import (
    check_key_not_stored, check_resumed, check_two_turns, record_streams, save_streams,
)
from tests.standin import OpenAIResponsesStandIn

REAL_KEY = "sk-proj-proctor-test-4b6d8f0a2c4e6a8b0d2f4a6c8e0b2d4f"
MODEL = "gpt-5-codex"
STREAMS = Path(__file__).parent.parent / "data" / "streams"

EVAL = f"""
from engine import evaluation

@evaluation()
def codex_two_turns(c):
    c.send("Run the command, then create hello.txt.")
    c.send("Now create second.txt.")
    c.exec("cat /proc/*/environ 2>/dev/null | tr '\\\\0' '\\\\n'").stdout.to_contain(
        "OPENAI_API_KEY=proctor-placeholder-OPENAI_API_KEY")
    c.exec("grep -rl {REAL_KEY} /proc/*/environ /home /root /tmp /workspace 2>/dev/null; true"
           ).stdout.to_equal("")
"""


def toml(api: OpenAIResponsesStandIn) -> str:
    return f"""
[defaults]
image = "{BASE_IMAGE}"
timeout = "5m"

[[variants]]
name = "codex"
harness = "codex"
model = "{MODEL}"
api_key_env = "PROCTOR_TEST_OPENAI_KEY"

""" + api.gateway_toml()


@pytest.mark.docker
@pytest.mark.slow
def test_codex_runs_two_turns_through_the_gateway(suite, run_eval, store, monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_OPENAI_KEY", REAL_KEY)
    streams = record_streams(monkeypatch, CodexHarness)  # each turn's real stdout, kept as a sample
    with OpenAIResponsesStandIn(tls=tmp_path / "tls") as api:
        path = suite(EVAL, toml=toml(api))
        summary, events, records = run_eval(path)
    [run] = summary.runs
    record = records[run.trials[0].id]
    if os.environ.get("PROCTOR_SAVE_STREAMS"):
        save_streams(streams, "codex")
    assert record.outcome == "pass", (record.failure, record.validations,
                                      [t.raw_output for t in record.turns])

    # The image and the harness phase name the CLI and its version.
    spans = {p.phase: p for p in record.phases}
    assert "@openai/codex@0.171.0" in spans["image"].detail
    assert record.image.startswith("proctor-image:cli-")
    assert spans["harness"].detail == f"codex harness · 0.171.0 · model {MODEL}"

    first, second = record.turns
    check_two_turns(record, MODEL)

    # Turn 2 resumed turn 1's session: its requests carried turn 1's conversation.
    check_resumed(api)

    # The real key reached the stand-in (from the gateway), never the sandbox or the store.
    assert api.keys() == {REAL_KEY}
    brokered = [e for e in record.egress if e.host == "api.openai.com"]
    assert brokered and all(e.brokered == ["OPENAI_API_KEY"] for e in brokered if e.path.startswith("/v1/"))
    # With its analytics, update check and plugins off, Codex reaches only the API.
    assert {e.host for e in record.egress} == {"api.openai.com"}, record.egress
    # Turn 2's usage is its own, not the thread's running total that its stream reports.
    assert second.usage == first.usage and first.usage.input == 6600, (first.usage, second.usage)
    check_key_not_stored(store, REAL_KEY)
    print(f"image {spans['image'].detail}; turns {first.ms} ms, {second.ms} ms; egress "
          + ", ".join(f"{e.method} {e.host}{e.path} {e.status}" for e in record.egress))


@pytest.mark.docker
def test_a_codex_that_refuses_its_arguments_is_infra_error_in_one_sentence(suite, run_eval,
                                                                          monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_OPENAI_KEY", REAL_KEY)
    with OpenAIResponsesStandIn(tls=tmp_path / "tls") as api:
        path = suite("""
from engine import evaluation

@evaluation()
def one_turn(c):
    c.send("hello")
""", toml=toml(api).replace('api_key_env = "PROCTOR_TEST_OPENAI_KEY"',
                            'api_key_env = "PROCTOR_TEST_OPENAI_KEY"\nargs = ["--no-such-flag-for-proctor"]'))
        summary, _, records = run_eval(path)
    [record] = records.values()
    assert (record.outcome, record.failure.where) == ("infra_error", "harness"), record.failure
    assert record.failure.reason.startswith("the harness reported failed: codex exited 2: "), \
        record.failure.reason
    assert "no-such-flag-for-proctor" in record.failure.reason and "\n" not in record.failure.reason
    assert api.calls() == []
