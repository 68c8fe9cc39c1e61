"""An agent's stdout as the command harness reads it (SPEC.md "The command harness
protocol"): every line, however hostile, gives a storable item, a usage report, a
finished reason or raw output; never an exception. Sizes stay within the caps of
engine/limits.py and reading stays linear in time and flat in memory."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import limits
from engine.harness.command import CommandHarness, CommandStream, parse_line
from engine.models import TrajectoryItem, TrialRecord, Usage
from engine.recorder import Recorder
from engine.redact import MARK, Redactor
from engine.sandbox.container import ExecOutput
from engine.sandbox.output import OutputCollector

KEY = "sk-proj-Zq8mR2vL9xW4tY7uP3nK6bH1"


def nested(depth: int, leaf: object = "x") -> object:
    value = leaf
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


def depth_of(value: object) -> int:
    depth = 0
    while isinstance(value, (dict, list)) and value:
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
        depth += 1
    return depth


def storable(item: TrajectoryItem) -> str:
    """What the store does with an item, in an event and in the record; returns the record's JSON."""
    item.model_dump_json()
    record = TrialRecord(id="t", batch_id="b", run_id="r", case_id="c", variant="v", trial=1,
                         trigger="api", trajectory=[item])
    text = json.dumps(record.to_json(), ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")  # no lone surrogate
    Redactor().value(item)
    return text


def line(obj: dict) -> str:
    return json.dumps(obj)


# --- each attack from issue 8 ----------------------------------------------------------------


@pytest.mark.parametrize("field", ["input", "output", "cacheRead", "cacheWrite", "reasoning"])
@pytest.mark.parametrize("number", [2**63, 2**64 + 5, 10**40])
def test_a_usage_number_too_large_for_the_store_is_clamped(field, number):
    usage = parse_line(line({"type": "usage", field: number}), 1)
    assert isinstance(usage, Usage)
    values = [usage.input, usage.output, usage.cache_read, usage.cache_write, usage.reasoning or 0]
    assert max(values) == limits.USAGE_MAX < 2**63
    # Summed over many turns it stays in range too: the store keeps input + output in one column.
    total = Usage()
    for _ in range(50_000):
        total = total.add(usage)
    assert total.input + total.output < 2**63


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e309", "-5"])
def test_a_usage_number_that_is_no_count_never_raises(value):
    usage = parse_line('{"type":"usage","input":%s,"output":%s,"reasoning":%s}' % (value, value, value), 1)
    assert isinstance(usage, Usage)
    assert 0 <= usage.input <= limits.USAGE_MAX and 0 <= usage.output <= limits.USAGE_MAX


@pytest.mark.parametrize("depth", [40, 260, 520, 900])
def test_a_tool_call_nested_deep_is_cut_and_marked(depth):
    item = parse_line(line({"type": "toolCall", "name": "edit", "input": nested(depth)}), 1)
    assert isinstance(item, TrajectoryItem)
    storable(item)
    assert depth_of(item.input) <= limits.ITEM_DEPTH + 1
    assert any("nested deeper" in w for w in item.warnings)


def test_a_line_nested_deeper_than_json_can_parse_stays_raw_output():
    assert parse_line("[" * 100_000 + "]" * 100_000, 1) is None
    assert parse_line('{"type":"toolCall","input":' + "[" * 100_000 + "]" * 100_000 + "}", 1) is None


@pytest.mark.parametrize("field,value", [
    ("exitCode", "NaN"), ("exitCode", "1e309"), ("exitCode", "-Infinity"), ("exitCode", "1e30"),
    ("at", "1e300"), ("at", "NaN"), ("at", "-1e20"), ("at", "1e309"),
    ("at", '"\\ud800"'), ("exitCode", '"\\ud800"'), ("exitCode", "[1]"),
])
def test_a_number_out_of_range_is_dropped_with_a_warning(field, value):
    item = parse_line('{"type":"command","command":"ls","%s":%s,"output":"ok"}' % (field, value), 1)
    assert isinstance(item, TrajectoryItem)
    storable(item)
    assert item.exit_code is None and item.at is None
    assert [w for w in item.warnings if w.startswith(field)]


@pytest.mark.parametrize("kind,field", [
    ("message", "text"), ("message", "role"), ("command", "command"), ("command", "output"),
    ("toolCall", "name"), ("toolCall", "output"), ("fileChange", "path"), ("fileChange", "change"),
])
def test_a_lone_surrogate_is_repaired_with_a_warning(kind, field):
    item = parse_line('{"type":"%s","%s":"a\\ud800b\\udfff"}' % (kind, field), 1)
    assert isinstance(item, TrajectoryItem)
    storable(item)
    assert getattr(item, field) == "a\ufffdb\ufffd"
    assert [w for w in item.warnings if w.startswith(field)]


def test_a_surrogate_pair_split_in_two_escapes_stays_one_character():
    item = parse_line('{"type":"message","text":"\\ud83d\\ude00"}', 1)
    assert item.text == "\U0001F600" and item.warnings == []


def test_surrogates_in_tool_input_keys_and_values_are_repaired():
    item = parse_line('{"type":"toolCall","name":"x","input":{"\\udc00k":["\\ud800",1.5]}}', 1)
    storable(item)
    assert item.input == {"\ufffdk": ["\ufffd", 1.5]}


def test_nan_and_infinity_inside_tool_input_become_null():
    item = parse_line('{"type":"toolCall","name":"x","input":{"a":NaN,"b":[Infinity,1e309,2]}}', 1)
    storable(item)
    assert item.input == {"a": None, "b": [None, None, 2]}
    assert item.warnings


def test_a_type_that_is_not_a_string_stays_raw_output():
    assert parse_line('{"type":["message"],"text":"hi"}', 1) is None
    assert parse_line('{"type":{"a":1}}', 1) is None


def test_a_finished_reason_is_text_repaired_and_cut():
    kind, reason = parse_line(line({"type": "finished", "reason": "failed: \ud800" + "x" * 100_000}), 1)
    assert kind == "finished" and reason.startswith("failed: \ufffd")
    assert len(reason) <= limits.ITEM_READ + 100
    kind, reason = parse_line('{"type":"finished","reason":{"deep":%s}}' % json.dumps(nested(300)), 1)
    assert json.dumps(reason).encode()


def test_plain_items_parse_as_before_and_carry_no_warnings():
    item = parse_line('{"type":"command","command":"pytest -q","exitCode":0,"output":"1 passed","at":1700000000000}', 3)
    assert (item.kind, item.turn, item.command, item.exit_code, item.output) == (
        "command", 3, "pytest -q", 0, "1 passed")
    assert item.at == "2023-11-14T22:13:20.000Z" and item.warnings == []
    assert "warnings" not in item.to_json()  # the record's shape is SPEC.md's when nothing was changed
    tool = parse_line('{"type":"toolCall","name":"edit","input":{"path":"greet.py"},"output":"ok"}', 1)
    assert tool.input == {"path": "greet.py"} and tool.warnings == []


def test_oversized_fields_are_cut_while_reading_and_marked():
    item = parse_line(line({"type": "toolCall", "name": "n" * 50_000, "input": {"a": "y" * 200_000},
                            "output": "z" * 200_000}), 1)
    storable(item)
    assert item.truncated
    assert len(item.output) <= limits.ITEM_READ + 100
    assert isinstance(item.input, str) and len(item.input) <= limits.TOOL_INPUT_READ + 100
    assert len(item.name) <= limits.NAME_READ + 100


# --- hypothesis: arbitrary JSON-ish lines ----------------------------------------------------

ALPHABET = st.one_of(st.characters(), st.characters(categories=["Cs"]), st.sampled_from("\n\"\\{}"))
TEXT = st.text(ALPHABET, max_size=40)
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(2**62, 2**80).map(lambda n: -n if n % 2 else n)
           | st.floats() | TEXT | st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00", "NaN", ""]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(TEXT, inner, max_size=4), max_leaves=24)
TYPES = st.sampled_from(["message", "command", "toolCall", "fileChange", "usage", "finished", "other"])
FIELDS = st.sampled_from(["role", "text", "command", "exitCode", "output", "name", "input", "path",
                          "change", "at", "cacheRead", "cacheWrite", "reasoning", "reason"])


@st.composite
def hostile_lines(draw) -> str:
    shape = draw(st.sampled_from(["object", "deep", "long", "text"]))
    if shape == "text":
        return draw(TEXT)
    obj = {"type": draw(TYPES | VALUES)}
    obj.update(draw(st.dictionaries(FIELDS, VALUES, max_size=6)))
    if shape == "deep":
        obj[draw(FIELDS)] = nested(draw(st.integers(30, 700)), draw(SCALARS))
    elif shape == "long":
        obj[draw(FIELDS)] = draw(TEXT) * draw(st.integers(1, 4000)) + draw(TEXT)
    try:
        return json.dumps(obj, ensure_ascii=draw(st.booleans()))
    except RecursionError:
        return "{" * 10


# An item as read: every text within ITEM_READ, names within ITEM_NAME, input within
# TOOL_INPUT_READ (each plus its mark); JSON may escape a character into six.
READ_BOUND = 6 * (3 * limits.ITEM_READ + limits.TOOL_INPUT_READ + 4 * limits.ITEM_NAME + 2000)
STORED_BOUND = 6 * (3 * limits.ITEM_TEXT + limits.TOOL_INPUT + 4 * limits.ITEM_NAME + 2000)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile_lines())
def test_no_line_raises_and_every_result_can_be_stored(text):
    parsed = parse_line(text, 1)
    if isinstance(parsed, TrajectoryItem):
        assert len(storable(parsed)) <= READ_BOUND
        capped = limits.cap_item(Redactor().value(parsed))
        assert len(storable(capped)) <= STORED_BOUND
        for name in ("text", "output", "command"):
            assert len(getattr(capped, name) or "") <= limits.ITEM_TEXT
        assert len(json.dumps(capped.input, ensure_ascii=False)) <= limits.TOOL_INPUT + 2
    elif isinstance(parsed, Usage):
        parsed.model_dump_json()
        for value in (parsed.input, parsed.output, parsed.cache_read, parsed.cache_write, parsed.reasoning or 0):
            assert 0 <= value <= limits.USAGE_MAX
    elif isinstance(parsed, tuple):
        kind, reason = parsed
        assert kind == "finished" and len(reason) <= limits.ITEM_READ + 100
        reason.encode("utf-8")
    else:
        assert parsed is None


# --- the line reader: linear time, a line cut while it is read -------------------------------

CHUNK = 64 * 1024


def read_one_line(size: int) -> tuple[float, list[str]]:
    lines: list[str] = []
    collector = OutputCollector(lines.append)
    block = b"x" * CHUNK
    started = time.perf_counter()
    for _ in range(size // CHUNK):
        collector.feed(block)
    collector.feed(b"\nnext\n")
    collector.close()
    return time.perf_counter() - started, lines


def test_a_long_line_is_read_in_linear_time():
    small = min(read_one_line(5 << 20)[0] for _ in range(3))
    large = min(read_one_line(20 << 20)[0] for _ in range(3))
    # Linear: four times the bytes, about four times the time; the old reader took sixteen.
    assert large <= 8 * small + 0.05, (small, large)


def test_a_line_longer_than_the_cap_is_cut_while_read_and_the_next_line_is_whole():
    _, lines = read_one_line(20 << 20)
    assert lines[1:] == ["next"]
    assert len(lines[0]) <= limits.LINE_READ + 100
    assert lines[0].startswith("xxx") and "cut" in lines[0]


def test_lines_split_across_chunks_and_multibyte_characters_survive():
    lines: list[str] = []
    collector = OutputCollector(lines.append)
    data = "héllo wörld €\nsecond line ✓\nthird".encode()
    for i in range(len(data)):
        collector.feed(data[i:i + 1])
    collector.close()
    assert lines == ["héllo wörld €", "second line ✓", "third"]
    assert collector.text() == data.decode()


# --- the harness over a whole turn: bounded raw output, items, memory --------------------------


class StreamingSandbox:
    """Only what CommandHarness.run_turn touches: `exec` streams `chunks` as the command's stdout
    through the real OutputCollector, as Sandbox.exec does with docker's stream."""

    def __init__(self, chunks, stderr: str = ""):
        self.chunks, self.stderr = chunks, stderr

    def put_files(self, files, base="/workspace", **kwargs) -> None:
        pass

    def exec(self, command, *, timeout, on_stdout_line=None, **kwargs) -> ExecOutput:
        stdout = OutputCollector(on_stdout_line)
        for chunk in self.chunks():
            stdout.feed(chunk)
        stdout.close()
        return ExecOutput(0, stdout.text(), self.stderr, 1)


def harness() -> CommandHarness:
    return CommandHarness(CommandHarness.Options(command="sh run.sh"))


SHORT_LINES = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from test_harness_output import CHUNK, StreamingSandbox, harness
block = b"".join(b"raw output line number %07d\\n" % i for i in range(CHUNK // 30))
chunks = lambda: (block for _ in range((60 << 20) // len(block)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = harness().run_turn(StreamingSandbox(chunks), "go", 1, 60, lambda item: None)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grown * 1024, len(out.raw_output), out.raw_output.splitlines()[-1])
"""


def test_sixty_megabytes_of_short_lines_keep_memory_flat():
    # Its own process, so the peak resident size it reports is this turn's alone.
    run = subprocess.run([sys.executable, "-c", SHORT_LINES, str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    grown, raw_length, last_line = run.stdout.split(" ", 2)
    # 2 million lines: the old list of raw lines grew by 240 MB here (1.5 GB for shorter lines).
    assert int(grown) < 40 << 20, f"peak grew by {int(grown) / 1e6:.0f} MB"
    assert int(raw_length) <= limits.RAW_READ + 200
    assert "more lines of raw output dropped" in last_line


def test_a_flood_of_items_keeps_the_turn_output_bounded_and_the_last_message():
    count = 30_000
    block = "".join(line({"type": "command", "command": f"ls {i}", "exitCode": 0}) + "\n"
                    for i in range(count)) + line({"type": "message", "text": "the end"}) + "\n"
    seen: list[TrajectoryItem] = []
    out = harness().run_turn(StreamingSandbox(lambda: [block.encode()]), "go", 1, 60, seen.append)
    assert len(out.items) <= limits.ITEMS_PER_TURN + 1
    assert out.final_message == "the end"
    assert len(seen) == count + 1  # the recorder decides what to keep and counts what it drops


def test_stderr_and_usage_warnings_join_the_raw_output_bounded():
    lines = line({"type": "usage", "input": 2**70}) + "\nplain\n"
    out = harness().run_turn(StreamingSandbox(lambda: [lines.encode()], stderr="e" * 3_000_000),
                             "go", 1, 60, lambda item: None)
    assert out.usage.input == limits.USAGE_MAX
    assert "usage" in out.raw_output and "clamped" in out.raw_output
    assert len(out.raw_output) <= 2 * limits.RAW_READ + 200


# --- the recorder: items per turn and per trial, redacted before they are cut ------------------


def recorder() -> tuple[Recorder, list]:
    record = TrialRecord(id="t_1", batch_id="b_1", run_id="r_1", case_id="c", variant="v",
                         trial=1, trigger="api")
    events: list = []
    return Recorder(record, events.append, Redactor()), events


def test_items_past_the_turn_cap_are_dropped_counted_and_marked():
    rec, events = recorder()
    kept = [rec.add_item(TrajectoryItem(kind="command", turn=1, command=f"ls {i}")) for i in range(5000)]
    assert sum(k is not None for k in kept) == limits.ITEMS_PER_TURN
    marker = rec.end_items(1)
    assert marker is not None and f"{5000 - limits.ITEMS_PER_TURN:,} items dropped" in marker.text
    assert rec.record.trajectory[-1] is marker and len(rec.record.trajectory) == limits.ITEMS_PER_TURN + 1
    assert rec.end_items(2) is None


def test_items_past_the_trial_cap_are_dropped_in_every_later_turn():
    rec, _ = recorder()
    turns = limits.ITEMS_PER_TRIAL // limits.ITEMS_PER_TURN + 2
    for turn in range(1, turns + 1):
        for i in range(limits.ITEMS_PER_TURN):
            rec.add_item(TrajectoryItem(kind="message", turn=turn, role="assistant", text=f"{i}"))
        rec.end_items(turn)
    items = [i for i in rec.record.trajectory if i.role != "proctor"]
    assert len(items) == limits.ITEMS_PER_TRIAL
    assert sum(i.role == "proctor" for i in rec.record.trajectory) == 2


def test_a_stored_item_is_redacted_before_it_is_cut():
    rec, _ = recorder()
    # The key starts just before the cap: cut first, its first half would be stored readable.
    text = "x" * (limits.ITEM_TEXT - 60) + " Bearer " + KEY + " " + "y" * 20_000
    stored = rec.add_item(TrajectoryItem(kind="message", turn=1, role="assistant", text=text))
    assert KEY[:8] not in stored.text and len(stored.text) <= limits.ITEM_TEXT
    assert stored.truncated and MARK in stored.text


def test_the_item_in_a_progress_event_is_capped():
    rec, events = recorder()
    item = TrajectoryItem(kind="toolCall", turn=1, name="edit", input={"blob": "z" * 100_000},
                          output="o" * 100_000)
    stored = rec.add_item(item)
    rec.progress("turn", "tool edit", index=1, item=stored)
    [event] = events
    assert len(json.dumps(event.item.to_json())) <= 2 * limits.ITEM_TEXT + limits.TOOL_INPUT + 500
    assert event.item.truncated


def test_an_item_cut_while_reading_keeps_no_half_of_a_key_once_the_keys_before_it_shrink():
    at = parse_line(line({"type": "message", "text": "x" * 40_000}), 1).text.count("x")
    # Long keys shrink to "[redacted]" and bring the read cut inside the stored cap, where it
    # leaves "sk-CUTabcd": too short to be a key, yet the start of one.
    keys = "".join(f"sk-{i:06d}".ljust(999, "k") + " " for i in range((at - 11) // 1000))
    text = keys.ljust(at - 11, "x") + " sk-CUT" + "abcdefghij" * 3000
    item = parse_line(line({"type": "message", "text": text}), 1)
    rec, events = recorder()
    stored = rec.add_item(item)
    rec.progress("turn", "message", index=1, item=stored)
    assert stored.text.count(MARK) > 5 and "truncated" in stored.text
    assert "sk-CUT" not in stored.text and "sk-CUT" not in events[0].model_dump_json()
    assert "while reading" not in stored.text  # the reader's mark becomes the record's own
    assert "sk-CUTabcd" in item.text  # what the eval body and its checks read is left as read


def test_output_cut_while_reading_is_marked_for_redaction():
    collector = OutputCollector(None)
    for _ in range(3):
        collector.feed(b"x" * 1_000_000)
    collector.close()
    text = collector.text()
    assert text.count("x") == 2_000_000
    assert text.endswith("[truncated 1,000,000 bytes while reading]")
    reader = CommandStream(1)
    reader.feed("y" * 100_000)
    out = reader.finish().turn_output(0, "q" * 100_000).raw_output
    assert out.count("y") == out.count("q") == limits.RAW_READ
    assert out.count("chars while reading]") == 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(hostile_lines(), max_size=25))
def test_hostile_lines_through_the_recorder_always_store(lines):
    rec, events = recorder()
    for text in lines:
        parsed = parse_line(text, 1)
        if isinstance(parsed, TrajectoryItem):
            stored = rec.add_item(parsed)
            rec.progress("turn", "item", index=1, item=stored)
    rec.end_items(1)
    json.dumps(rec.record.to_json(), allow_nan=False).encode("utf-8")
    for event in events:
        event.model_dump_json()
