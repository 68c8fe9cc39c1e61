"""SPEC.md's rules that need no Docker, pinned where they are decided: the command harness
protocol (one line, one item), the exit status of `proctor run`, and a key printed just after a
terminal colour code."""

from __future__ import annotations

import pytest

from engine import cli
from engine.harness.command import parse_line
from engine.models import BatchSummary, Distribution, Failure, RunSummary, TrialSummary, Usage
from engine.redact import Redactor
from engine.sandbox.client import DockerUnavailable
from engine.spec import EvalFileError

# --- the command harness protocol: SPEC.md's example lines, each as the record keeps it ---------

PROTOCOL = [
    ('{"type":"message","role":"assistant","text":"I created greet.py"}',
     {"kind": "message", "role": "assistant", "text": "I created greet.py"}),
    ('{"type":"command","command":"pytest -q","exitCode":0,"output":"1 passed"}',
     {"kind": "command", "command": "pytest -q", "exit_code": 0, "output": "1 passed"}),
    ('{"type":"toolCall","name":"edit","input":{"path":"greet.py"},"output":"ok"}',
     {"kind": "toolCall", "name": "edit", "input": {"path": "greet.py"}, "output": "ok"}),
    ('{"type":"fileChange","path":"greet.py","change":"add"}',
     {"kind": "fileChange", "path": "greet.py", "change": "add"}),
]


@pytest.mark.parametrize(("line", "fields"), PROTOCOL, ids=[f["kind"] for _, f in PROTOCOL])
def test_each_item_line_becomes_the_trajectory_item_spec_shows(line, fields):
    item = parse_line(line, 2)
    assert item.to_json() == {"turn": 2, "at": None, "truncated": False, **fields}


def test_at_is_optional_epoch_ms_and_written_as_the_record_writes_times():
    item = parse_line('{"type":"message","role":"assistant","text":"hi","at":1700000000000}', 1)
    assert item.at == "2023-11-14T22:13:20.000Z"
    assert parse_line('{"type":"message","role":"assistant","text":"hi"}', 1).at is None


def test_a_usage_line_adds_to_usage_with_specs_names():
    usage = parse_line('{"type":"usage","input":1200,"output":300,"cacheRead":1000,"cacheWrite":0,'
                       '"reasoning":null}', 1)
    assert usage == Usage(input=1200, output=300, cache_read=1000, cache_write=0, reasoning=None)


@pytest.mark.parametrize("reason", ["done", "failed: no API key"])
def test_a_finished_line_says_why_the_turn_ended(reason):
    assert parse_line('{"type":"finished","reason":"%s"}' % reason, 1) == ("finished", reason)


@pytest.mark.parametrize("line", [
    "Collecting pytest",            # plain text
    "",
    '["message"]',                  # JSON, not an object
    '{"type":"message"',            # not JSON
    '{"role":"assistant","text":"no type"}',
    '{"type":"thought","text":"an unknown type"}',
    '{"type":42}',
])
def test_any_other_line_is_raw_output(line):
    assert parse_line(line, 1) is None


def test_an_item_missing_its_fields_still_is_one():
    assert parse_line('  {"type":"message"}  ', 3).to_json() == {
        "kind": "message", "turn": 3, "at": None, "truncated": False, "role": "assistant",
        "text": ""}


# --- the exit status of `proctor run` ------------------------------------------------------------

NO_RESULT = Distribution(trials=0, scored=0, passed=0, failed=0, voided=0, pass_rate=None,
                         deterministic=False, command_min=None, command_median=None,
                         command_max=None)


def batch(*runs: tuple[str, ...]) -> BatchSummary:
    """A finished batch whose runs hold trials with these outcomes."""
    def trial(n: int, outcome: str) -> TrialSummary:
        failure = {"fail": Failure(kind="assertion", reason="exit 1"),
                   "infra_error": Failure(kind="infra", reason="image build failed")}.get(outcome)
        return TrialSummary(id=f"t_{n}", trial=n, outcome=outcome, failure=failure)

    return BatchSummary(batch_id="b_1", trigger="cli", status="finished", runs=[
        RunSummary(run_id=f"r_{i}", case_id=f"case_{i}", variant="scripted", distribution=NO_RESULT,
                   trials=[trial(n, o) for n, o in enumerate(outcomes, 1)])
        for i, outcomes in enumerate(runs)])


@pytest.mark.parametrize(("runs", "code"), [
    ([("pass", "pass"), ("pass",)], 0),                     # every scored trial passed
    ([("pass", "skipped")], 0),                             # skipped trials never count
    ([("pass", "fail")], 1),                                # a trial failed
    ([("infra_error",), ("fail",)], 1),                     # a failure outranks infra errors
    ([("pass", "infra_error")], 3),                         # infra errors and no failures
    ([("infra_error", "skipped")], 3),
])
def test_the_exit_status_of_a_finished_batch(runs, code):
    assert cli._exit_code(batch(*runs)) == code


@pytest.mark.parametrize(("error", "code"), [
    (EvalFileError("name 'x' is not defined", "suite.eval.py", 3), 2),  # an eval-file error
    (cli.UserError("--config: no such config file"), 2),                 # a usage error
    (DockerUnavailable("Docker is not running"), 3),
    (KeyboardInterrupt(), 130),                                          # interrupted
])
def test_main_ends_each_kind_of_stop_with_its_exit_status(error, code, monkeypatch, tmp_path,
                                                          capsys):
    def stops(args):
        raise error

    monkeypatch.setattr(cli, "cmd_ls", stops)
    assert cli.main(["ls", "--store", str(tmp_path / "proctor.db")]) == code
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err


# --- redaction: a key just after a terminal colour code -----------------------------------------


@pytest.mark.parametrize("key", ["sk-proj-A1b2C3d4E5f6G7h8", "AKIAIOSFODNN7EXAMPLE",
                                 "ghp_16C7e42F292c6912E7710c838347Ae178B4a"])
@pytest.mark.parametrize("colour", ["\x1b[32m", "\x1b[1;31m", "\x1b[0m"])
def test_a_key_printed_in_colour_is_redacted(key, colour):
    # Coloured tool output: the "m" that ends the code is a letter, yet the key starts after it.
    text = f"token: {colour}{key}\x1b[0m done"
    assert Redactor().text(text) == f"token: {colour}[redacted]\x1b[0m done"


def test_a_key_prefix_inside_a_word_is_no_key():
    # The other side of the same rule: "task-…" and "disk-…" are words, not keys.
    assert Redactor().text("task-0123456789abcdef disk-0123456789abcdef") == (
        "task-0123456789abcdef disk-0123456789abcdef")

