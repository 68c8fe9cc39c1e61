"""The agent CLIs' streams (Claude Code, Codex, Gemini CLI) turned into trajectories, usage,
model, session and finished reason: recorded-style samples in tests/data/streams/, then garbage,
truncated streams and huge lines, which must never raise nor grow without bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import limits
from engine.harness import TurnOutput
from engine.harness.streams import NOTES_KEPT, StreamParser, StreamResult
from engine.harness.streams.claude import ClaudeStream
from engine.harness.streams.codex import CodexStream, shell_script
from engine.harness.streams.gemini import GeminiStream
from engine.models import TrajectoryItem, TrialRecord, Usage
from engine.recorder import Recorder
from engine.redact import Redactor

DATA = Path(__file__).parent.parent / "data" / "streams"


def parse(parser: type[StreamParser], name: str, turn: int = 1) -> StreamResult:
    return parser(turn).feed_all((DATA / name).read_text())


def kinds(result: StreamResult) -> list[str]:
    return [i.kind for i in result.items]


def storable(result: StreamResult) -> None:
    """What the recorder will do with each item must work: cap it and write it as JSON."""
    for item in result.items:
        json.dumps(limits.cap_item(item).to_json(), allow_nan=False)


# --- Claude Code -------------------------------------------------------------------------------


def test_claude_two_tool_turn():
    result = parse(ClaudeStream, "claude_two_tools.jsonl")
    assert kinds(result) == ["message", "command", "toolCall", "fileChange", "message"]
    command = result.items[1]
    assert command.command == "python3 -m pytest -q"
    assert command.exit_code == 1
    assert command.output.startswith("F.") and "1 failed, 1 passed" in command.output
    edit, change = result.items[2], result.items[3]
    assert edit.name == "Edit" and edit.input["file_path"] == "/workspace/greet.py"
    assert "has been updated" in edit.output
    assert (change.path, change.change) == ("/workspace/greet.py", "modify")
    assert all(i.at for i in result.items)
    assert result.final_message.startswith("Fixed `greet`")
    assert result.finished_reason == "done" and result.status == "completed"
    assert result.session_id == "5f0c2a8e-1b7d-4e8a-9c3f-2d6b8e1a4f70"
    assert result.model == "claude-sonnet-4-5-20250929"
    assert result.version == "2.1.278"
    assert result.cost_usd == pytest.approx(0.0213414)
    assert result.raw_output == ""
    storable(result)


def test_claude_usage_counts_cache_reads_and_writes_in_input():
    result = parse(ClaudeStream, "claude_two_tools.jsonl")
    # From the result event, not the sum of the per-block assistant events (which repeat it).
    assert result.usage == Usage(input=16 + 40702 + 2540, output=267, cache_read=40702,
                                 cache_write=2540, reasoning=None)
    assert result.usage_reported


def test_claude_resumed_session_keeps_its_id_and_bills_only_its_own_messages():
    first = parse(ClaudeStream, "claude_two_tools.jsonl", turn=1)
    second = parse(ClaudeStream, "claude_resumed.jsonl", turn=2)
    assert second.session_id == first.session_id
    assert {i.turn for i in second.items} == {2}
    assert kinds(second) == ["message", "toolCall", "fileChange", "command", "message"]
    reasoning, write, created, run = second.items[:4]
    assert reasoning.role == "reasoning"
    assert write.name == "Write" and (created.path, created.change) == ("/workspace/farewell.py", "add")
    assert (run.exit_code, run.output) == (0, "Goodbye, Ada!")
    # Since 2.1.277 a resumed process's result holds the session's running totals; the turn's
    # own usage is its messages', so the first turn is not billed twice.
    assert second.session_usage.cache_read == 40702 + 45480
    assert second.usage == Usage(input=15 + 45480 + 425, output=189, cache_read=45480,
                                 cache_write=425)


def test_claude_api_error_is_a_failed_turn():
    result = parse(ClaudeStream, "claude_api_error.jsonl")
    assert result.finished_reason == "failed: Invalid API key · Fix external API key"
    assert result.status == "failed"
    # The CLI's own "<synthetic>" message names no model: the init event's stays.
    assert result.model == "claude-sonnet-4-5-20250929"
    output = result.turn_output(exit_code=1, stderr="Error: 401 from the API")
    assert isinstance(output, TurnOutput) and output.finished_reason.startswith("failed:")
    assert output.exit_code == 1 and output.model == "claude-sonnet-4-5-20250929"
    assert output.raw_output.endswith("Error: 401 from the API")


@pytest.mark.parametrize("subtype, errors, reason", [
    ("error_max_turns", ["Reached maximum number of turns (3)"], "max_turns"),
    ("error_during_execution", ["ENOSPC: no space left on device"],
     "failed: error_during_execution: ENOSPC: no space left on device"),
    ("success", [], "failed: API Error: 529 overloaded"),
])
def test_claude_error_results(subtype, errors, reason):
    line = json.dumps({"type": "result", "subtype": subtype, "is_error": True, "errors": errors,
                       "result": "API Error: 529 overloaded" if subtype == "success" else None,
                       "session_id": "s-1", "usage": {"input_tokens": 3, "output_tokens": 1}})
    result = ClaudeStream(1).feed_all(line)
    assert result.finished_reason == reason
    assert result.status == ("completed" if reason == "max_turns" else "failed")


def test_claude_truncated_stream_has_no_final_event_and_is_still_read():
    result = parse(ClaudeStream, "claude_truncated.jsonl")
    assert result.finished_reason is None and result.status == "completed"
    assert kinds(result) == ["message", "command"]
    pending = result.items[1]
    assert pending.command == "python3 -m pytest -q tests/slow" and pending.exit_code is None
    assert "the stream ended before this tool's result" in pending.warnings
    # The half-written last line stays raw output; usage comes from the message events, once
    # each, at the last event of each message (its output count grows block by block).
    assert '"role":"ass' in result.raw_output
    assert result.usage == Usage(input=3 + 12000 + 900, output=74, cache_read=12000, cache_write=900)
    assert result.session_id == "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"


def test_claude_garbage_never_raises_and_is_kept_or_noted():
    result = parse(ClaudeStream, "claude_garbage.jsonl")
    raw = result.raw_output
    for line in ("npm WARN config", "not json {", "[1, 2, 3]", '{"type": 42', '{"no_type": true}',
                 "Traceback (most recent call last)"):
        assert line in raw
    # A session id with shell in it never reaches the next turn's command line.
    assert result.session_id == "7c6b5a49-3827-4165-8a9b-0c1d2e3f4a5b"
    assert "system.session_id: not a session id; ignored" in raw
    assert "system.model: not a model name; ignored" in raw
    assert "a tool_result with no tool_use before it; ignored" in raw
    text = next(i for i in result.items if i.kind == "message")
    assert text.text == "half a pair: \ufffd ends here" and text.warnings
    command = next(i for i in result.items if i.kind == "toolCall" and i.name == "Bash")
    assert command.input == "echo input as a string"  # no dict: kept as a tool call, not a command
    assert any("is_error: expected true or false" in w for w in command.warnings)
    read = next(i for i in result.items if i.kind == "toolCall" and i.name == "Read")
    assert "a tool call without an id: its result cannot be matched" in read.warnings
    # The message's counts were a string and a NaN: skipped and noted, so this turn counts none;
    # the result's out-of-range counts are clamped.
    assert result.usage == Usage() and result.usage_reported
    assert "message.usage.input_tokens: expected a number, got a str; skipped" in raw
    assert "message.usage.output_tokens: expected a finite number, got a float; skipped" in raw
    assert result.session_usage.input == 3 and result.session_usage.output == limits.USAGE_MAX
    # The result's text was a list: skipped and noted; the last assistant text stands instead.
    assert result.final_message == "half a pair: \ufffd ends here"
    assert "result: expected a string, got a list; skipped" in raw
    storable(result)


# --- Codex ---------------------------------------------------------------------------------------


def test_codex_two_tool_turn():
    result = parse(CodexStream, "codex_two_tools.jsonl")
    assert kinds(result) == ["message", "command", "message", "toolCall", "fileChange", "message"]
    command = result.items[1]
    assert command.command == "python3 -m pytest -q"
    assert command.exit_code == 1 and "1 failed, 1 passed" in command.output
    patch, change = result.items[3], result.items[4]
    assert patch.name == "apply_patch" and patch.output == "completed"
    assert (change.path, change.change) == ("/workspace/greet.py", "modify")
    assert result.items[0].role == "reasoning"
    assert result.final_message.startswith("Fixed `greet`")
    assert result.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    assert result.finished_reason == "done"
    assert result.model is None  # the stream does not name it: the harness does
    assert result.usage == Usage(input=24763, output=612, cache_read=22784, reasoning=256)
    storable(result)


def test_codex_resumed_thread_and_reasoning_tokens():
    first = parse(CodexStream, "codex_two_tools.jsonl", turn=1)
    text = (DATA / "codex_resumed.jsonl").read_text()
    second = CodexStream(2, previous=first.session_usage).feed_all(text)
    assert second.session_id == first.session_id
    changes = [(i.path, i.change) for i in second.items if i.kind == "fileChange"]
    assert changes == [("/workspace/farewell.py", "add"), ("/workspace/old_greeting.py", "delete")]
    run = next(i for i in second.items if i.kind == "command")
    assert run.command == """python3 -c 'import farewell; print(farewell.farewell("Ada"))'"""
    assert (run.exit_code, run.output) == (0, "Goodbye, Ada!\n")
    mcp = next(i for i in second.items if i.kind == "toolCall" and i.name == "docs.search")
    assert mcp.input == {"query": "farewell"} and mcp.output == "no results"
    todo = next(i for i in second.items if i.kind == "toolCall" and i.name == "todo_list")
    assert todo.input["items"][0]["text"] == "Add farewell.py"
    # The resumed thread reports the session's running total: the turn's own is the difference.
    assert second.usage == Usage(input=31020, output=401, cache_read=29440, reasoning=192)
    assert second.session_usage.input == 55783
    # Without the previous total (or with a smaller count) the total is taken as it is.
    assert CodexStream(2).feed_all(text).usage.input == 55783
    bigger = Usage(input=60000, output=1, cache_read=1)
    assert CodexStream(2, previous=bigger).feed_all(text).usage.input == 55783


def test_codex_failed_turn_after_retries():
    result = parse(CodexStream, "codex_failed.jsonl")
    assert result.finished_reason.startswith("failed: unexpected status 401 Unauthorized")
    assert result.status == "failed"
    assert "Reconnecting... 1/5" in result.raw_output


def test_codex_error_as_last_event_fails_the_turn_but_a_retried_one_does_not():
    lines = ['{"type":"thread.started","thread_id":"t-1"}',
             '{"type":"error","message":"Reconnecting... 1/5"}',
             '{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"ok"}}']
    assert CodexStream(1).feed_all("\n".join(lines)).finished_reason is None
    fatal = CodexStream(1).feed_all("\n".join(lines + ['{"type":"error","message":"quota exceeded"}']))
    assert fatal.finished_reason == "failed: quota exceeded"


def test_codex_shell_script_unwraps_only_a_login_shell():
    assert shell_script("bash -lc 'ls -la'") == "ls -la"
    assert shell_script("/bin/sh -c 'echo hi'") == "echo hi"
    assert shell_script("python3 -m pytest") == "python3 -m pytest"
    assert shell_script("bash -lc 'unbalanced") == "bash -lc 'unbalanced"


def test_codex_exit_codes_past_a_process_range_are_dropped_with_a_warning():
    line = json.dumps({"type": "item.completed", "item": {
        "id": "i", "type": "command_execution", "command": "true", "aggregated_output": "",
        "exit_code": 10**30, "status": "completed"}})
    command = CodexStream(1).feed_all(line).items[0]
    assert command.exit_code is None
    assert "exit_code: out of range; dropped" in command.warnings


# --- Gemini CLI ----------------------------------------------------------------------------------


def test_gemini_two_tool_turn():
    result = parse(GeminiStream, "gemini_two_tools.jsonl")
    assert kinds(result) == ["message", "command", "toolCall", "fileChange", "command", "message"]
    first, command, edit, change, failing, last = result.items
    assert first.text == "I'll run the tests to see what fails."  # deltas joined
    assert first.at == "2026-11-30T21:14:04.602Z"
    assert command.command == "python3 -m pytest -q" and command.exit_code is None
    assert "1 failed, 1 passed" in command.output and command.at == "2026-11-30T21:14:04.870Z"
    assert edit.name == "replace" and edit.input["file_path"] == "/workspace/greet.py"
    assert (change.path, change.change) == ("/workspace/greet.py", "modify")
    assert failing.exit_code == 4
    assert last.text == result.final_message == 'Fixed `greet` to return "Hello, Ada!".'
    assert result.finished_reason == "done"
    assert result.session_id == "c6f1d2e3-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
    assert result.model == "gemini-2.5-pro"  # the model that did most, not the router
    assert result.usage == Usage(input=31210, output=412, cache_read=24576)
    storable(result)


def test_gemini_error_result_is_a_failed_turn():
    result = parse(GeminiStream, "gemini_error.jsonl")
    assert result.finished_reason == "failed: Error: [API Error: API key not valid. Please pass a valid API key.]"
    assert result.status == "failed" and result.items == []


def test_gemini_max_turns_is_scored():
    lines = ['{"type":"init","timestamp":"2026-11-30T21:14:02.118Z","session_id":"s-2","model":"gemini-2.5-pro"}',
             '{"type":"error","timestamp":"2026-11-30T21:14:03Z","severity":"error","message":"Maximum session turns exceeded"}',
             '{"type":"result","timestamp":"2026-11-30T21:14:03Z","status":"success","stats":{"input_tokens":10}}']
    result = GeminiStream(1).feed_all("\n".join(lines))
    assert result.finished_reason == "max_turns" and result.status == "completed"


def test_gemini_truncated_stream_flushes_answer_and_pending_tool():
    lines = (DATA / "gemini_two_tools.jsonl").read_text().splitlines()[:5]
    result = GeminiStream(1).feed_all("\n".join(lines))
    assert kinds(result) == ["message", "command"] and result.finished_reason is None
    assert "the stream ended before this tool's result" in result.items[1].warnings


def test_gemini_bad_timestamp_uses_arrival_time_with_a_warning():
    parser = GeminiStream(1)
    parser.feed('{"type":"message","timestamp":"yesterday","role":"assistant","content":"hi"}', at_ms=0)
    result = parser.finish()
    assert result.items[0].at == "1970-01-01T00:00:00.000Z"
    assert any("timestamp" in w for w in result.items[0].warnings)


# --- bounds: huge lines, floods, garbage, for every CLI ---------------------------------------


PARSERS = [ClaudeStream, CodexStream, GeminiStream]


@pytest.mark.parametrize("parser", PARSERS)
def test_huge_and_garbage_lines_stay_bounded(parser):
    p = parser(1)
    p.feed("{" + "x" * (limits.LINE_READ + 10))  # past what the reader hands over: raw, cut
    p.feed('{"type":"' + "t" * 3_000_000 + '"}')  # long, unknown type: nothing kept
    for n in range(20_000):
        p.feed(f"garbage line {n} " + "g" * 50)
    result = p.finish()
    assert len(result.raw_output) <= limits.RAW_READ + 200
    assert "more lines of raw output dropped" in result.raw_output
    assert result.items == [] and result.finished_reason is None


def _huge(parser: type[StreamParser]) -> list[str]:
    big = "y" * 400_000  # two in a line stay under LINE_READ, as the reader hands them
    if parser is ClaudeStream:
        return [json.dumps({"type": "assistant", "parent_tool_use_id": None, "message": {
                    "id": "m1", "content": [{"type": "text", "text": big},
                                            {"type": "tool_use", "id": "t1", "name": "Bash",
                                             "input": {"command": big}}]}}),
                json.dumps({"type": "user", "message": {"content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": big}]}})]
    if parser is CodexStream:
        return [json.dumps({"type": "item.completed", "item": {"id": "i1", "type": "agent_message",
                                                               "text": big}}),
                json.dumps({"type": "item.completed", "item": {
                    "id": "i2", "type": "command_execution", "command": big,
                    "aggregated_output": big, "exit_code": 0, "status": "completed"}})]
    return [json.dumps({"type": "message", "role": "assistant", "content": big}),
            json.dumps({"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "t1",
                        "parameters": {"command": big}}),
            json.dumps({"type": "tool_result", "tool_id": "t1", "status": "success", "output": big})]


@pytest.mark.parametrize("parser", PARSERS)
def test_huge_texts_are_cut_while_reading_and_marked(parser):
    result = parser(1).feed_all("\n".join(_huge(parser)))
    assert kinds(result) == ["message", "command"]
    message, command = result.items
    for text in (message.text, command.command, command.output, result.final_message):
        assert len(text) <= limits.ITEM_READ + 100 and "while reading" in text
    assert message.truncated and command.truncated
    storable(result)


@pytest.mark.parametrize("parser", PARSERS)
def test_item_flood_is_capped_and_every_item_still_reaches_on_item(parser):
    seen: list[TrajectoryItem] = []
    p = parser(1, seen.append)
    count = limits.ITEMS_PER_TURN + 500
    for n in range(count):
        if parser is ClaudeStream:
            line = {"type": "assistant", "parent_tool_use_id": None,
                    "message": {"id": f"m{n}", "content": [{"type": "text", "text": f"step {n}"}]}}
        elif parser is CodexStream:
            line = {"type": "item.completed", "item": {"id": f"i{n}", "type": "agent_message",
                                                       "text": f"step {n}"}}
        else:
            line = {"type": "message", "role": "assistant", "content": f"step {n}"}
        p.feed(json.dumps(line))
    result = p.finish()
    assert len(seen) == count
    assert len(result.items) == limits.ITEMS_PER_TURN + 1  # and the last message, kept
    assert result.items[-1].text == result.final_message == f"step {count - 1}"
    assert result.items_dropped == 500


@pytest.mark.parametrize("parser", PARSERS)
def test_a_key_cut_while_reading_never_reaches_the_record_in_part(parser):
    """Cuts made while parsing are marked, so the recorder's redaction drops the half of a key a
    cut ends in; a plain cut would leave its first half readable in the store."""
    key = "pelican-" + "quartz" * 7  # a secret the redactor knows by value, not by a pattern
    # Keys before the cut shrink to the redaction mark, which brings the cut one inside the cap.
    many = (key + " ") * (limits.ITEM_READ // (len(key) + 1))
    text = many + key + " and more output after it"
    assert len(many) < limits.ITEM_READ < len(many) + len(key)
    lines = _huge(parser)
    lines = [line.replace("y" * 400_000, text) for line in lines]
    result = parser(1).feed_all("\n".join(lines))
    rec = Recorder(TrialRecord(id="t_1", batch_id="b_1", run_id="r_1", case_id="c", variant="v",
                               trial=1, trigger="api"), lambda event: None, Redactor(secrets=[key]))
    stored = [rec.add_item(item) for item in result.items]
    assert result.items and all(stored)
    dumped = json.dumps([item.to_json() for item in stored])
    assert key[:9] not in dumped and "truncated" in dumped


def test_gemini_delta_flood_is_one_bounded_message():
    p = GeminiStream(1)
    for _ in range(50_000):
        p.feed('{"type":"message","role":"assistant","content":"0123456789","delta":true}')
    result = p.finish()
    assert len(result.items) == 1
    assert len(result.items[0].text) <= limits.ITEM_READ + 100 and result.items[0].truncated


@pytest.mark.parametrize("parser", PARSERS)
def test_deep_nesting_and_wrong_shapes_never_raise(parser):
    deep = "[" * 100_000 + "]" * 100_000
    shapes = [
        '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"a","name":"Bash","input":' + "[" * 50 + "]" * 50 + "}]}}",
        '{"type":"item.completed","item":{"id":"x","type":"file_change","changes":"all of them","status":"completed"}}',
        '{"type":"item.completed","item":null}',
        '{"type":"turn.completed","usage":[1,2]}',
        '{"type":"tool_use","tool_name":"replace","tool_id":"r","parameters":{"file_path":7}}',
        '{"type":"tool_result","tool_id":"r","status":"success","error":"flat"}',
        '{"type":"result","status":"error","error":{"type":9,"message":null},"stats":{"models":{"m":"x"}}}',
        '{"type":"result","subtype":{"a":1},"is_error":true,"errors":[1,null]}',
        '{"type":"init","session_id":"' + "s" * 500 + '"}',
        '{"type":"result","status":"success","stats":{"models":{"' + "k" * 200_000 + '":[]}}}',
        '{"type":"thread.started","thread_id":12}',
        '{"type":"' + ("\\ud800" * 3) + '"}',
        '{"type":"message","role":"assistant","content":{"not":"text"}}',
        '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"},{"type":"text","text":"ok"},5]}]}}',
        "{" + deep + "}",
    ]
    result = parser(1).feed_all("\n".join(shapes))
    assert result.session_id is None or len(result.session_id) <= 200
    # Notes name wrong-typed fields, some by a key the stream chose (200,000 characters): quoted short.
    assert len(result.raw_output) <= limits.RAW_READ + NOTES_KEPT * (limits.FAILURE_REASON + 20)
    assert all(len(w) <= 300 for item in result.items for w in item.warnings)
    storable(result)
