"""The `gemini-cli` harness end to end: the real Gemini CLI, installed offline into the case's
image, runs two turns in a sandbox with no network but the gateway, against a stand-in Gemini
API on loopback (HTTPS as generativelanguage.googleapis.com, through `[gateway] resolve`/`trust`).
Its key is brokered: the sandbox holds a placeholder, the stand-in receives the real key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.harness.gemini_cli import GeminiCliHarness
from tests.conftest import BASE_IMAGE
from tests.cli_harness import (
    check_key_not_stored, check_resumed, check_two_turns, record_streams, save_streams,
)
from tests.standin import GeminiStandIn, two_turns

REAL_KEY = "AIzaProctorTest-3b7e1c9a5d2f4e6a8c0b1d3f5a7c9e1b"
MODEL = "gemini-2.5-pro"
HOST = "generativelanguage.googleapis.com"
STREAMS = Path(__file__).parent.parent / "data" / "streams"
RULE = "Proctor rule 7: keep every file short."

EVAL = f"""
from engine import evaluation

@evaluation(rules="{RULE}")
def gemini_two_turns(c):
    c.send("Run the command, then create hello.txt.")
    c.send("Now create second.txt.")
    c.exec("cat /proc/*/environ 2>/dev/null | tr '\\\\0' '\\\\n'").stdout.to_contain(
        "GEMINI_API_KEY=proctor-placeholder-GEMINI_API_KEY")
    c.exec("grep -rl {REAL_KEY} /proc/*/environ /home /root /tmp /workspace 2>/dev/null; true"
           ).stdout.to_equal("")
"""


def toml(api: GeminiStandIn) -> str:
    return f"""
[defaults]
image = "{BASE_IMAGE}"
timeout = "5m"

[[variants]]
name = "gemini"
harness = "gemini-cli"
model = "{MODEL}"
max_turns = 10
api_key_env = "PROCTOR_TEST_GEMINI_KEY"

""" + api.gateway_toml()


@pytest.mark.docker
@pytest.mark.slow
def test_gemini_cli_runs_two_turns_through_the_gateway(suite, run_eval, store, monkeypatch, tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_GEMINI_KEY", REAL_KEY)
    streams = record_streams(monkeypatch, GeminiCliHarness)  # each turn's real stdout, kept as a sample
    with GeminiStandIn(two_turns(), tls=tmp_path / "tls") as api:
        path = suite(EVAL, toml=toml(api))
        summary, events, records = run_eval(path)
    [run] = summary.runs
    record = records[run.trials[0].id]
    if os.environ.get("PROCTOR_SAVE_STREAMS"):
        save_streams(streams, "gemini")
    assert record.outcome == "pass", (record.failure, record.validations,
                                      [t.raw_output for t in record.turns])

    # The image and the harness phase name the CLI and its version.
    spans = {p.phase: p for p in record.phases}
    assert "@google/gemini-cli@0.61.0" in spans["image"].detail
    assert record.image.startswith("proctor-image:cli-")
    assert spans["harness"].detail == f"gemini-cli harness · 0.61.0 · model {MODEL}"

    first, second = record.turns
    check_two_turns(record, MODEL, exact=False)
    assert all("Security Warning" not in t.raw_output for t in record.turns)  # it read the harness's settings

    # Turn 2 resumed turn 1's session: its requests carried turn 1's conversation.
    calls = check_resumed(api)

    # The eval's rules went to GEMINI.md, which the CLI gave the model as context.
    assert all(RULE in c.text for c in calls if api.is_scripted(c))

    # The real key reached the stand-in (from the gateway), never the sandbox or the store.
    assert api.keys() == {REAL_KEY}
    assert {e.host for e in record.egress} == {HOST}  # no usage statistics to play.googleapis.com
    brokered = [e for e in record.egress if e.host == HOST]
    assert brokered and all(e.brokered == ["GEMINI_API_KEY"] for e in brokered
                            if e.path.startswith("/v1"))
    check_key_not_stored(store, REAL_KEY)
    print(f"image {spans['image'].detail}; turns {first.ms} ms, {second.ms} ms; egress "
          + ", ".join(f"{e.method} {e.host}{e.path} {e.status}" for e in record.egress))


@pytest.mark.docker
def test_a_cli_that_refuses_to_start_is_infra_error_with_its_last_words(suite, run_eval, monkeypatch,
                                                                         tmp_path):
    monkeypatch.setenv("PROCTOR_TEST_GEMINI_KEY", REAL_KEY)
    with GeminiStandIn(two_turns(), tls=tmp_path / "tls") as api:
        path = suite("""
from engine import evaluation

@evaluation()
def one_turn(c):
    c.send("hello")
""", toml=toml(api) + """
[[variants]]
name = "bad-flag"
harness = "gemini-cli"
args = ["--no-such-flag-for-proctor"]
api_key_env = "PROCTOR_TEST_GEMINI_KEY"
""")
        summary, _, records = run_eval(path, variants=["bad-flag"])
    [record] = records.values()
    assert (record.outcome, record.failure.where) == ("infra_error", "harness")
    assert record.failure.reason.startswith("the harness reported failed: gemini-cli exited "), \
        record.failure.reason
    # yargs takes "--no-x" for "x" negated, and prints its complaint above the help text.
    assert record.failure.reason.endswith("exited 1: Unknown arguments: such-flag-for-proctor, "
                                          "suchFlagForProctor"), record.failure.reason
    assert api.calls() == []
