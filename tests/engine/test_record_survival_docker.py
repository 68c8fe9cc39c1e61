"""Real agents in real sandboxes print hostile harness lines and floods (issue 8, items 5
and 6): the trial's record is always saved, the outcome is the agent's own (not an
engine error blamed on it), and what reaches the store stays within the caps."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import limits
from engine.events import PhaseEnded, PhaseProgress
from engine.harness.command import CommandStream, parse_line
from engine.sandbox.output import OUTPUT_KEEP, OutputCollector

HEADER = "from pathlib import Path\nfrom engine import evaluation, git\n"


def nested(depth: int) -> object:
    value: object = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


# One line each: every one of them lost the record or failed the trial on the agent's account.
HOSTILE = {
    "usage_2_63": json.dumps({"type": "usage", "input": 2**63, "output": 2**64}),
    "tool_call_260_deep": json.dumps({"type": "toolCall", "name": "edit", "input": nested(260)}),
    "tool_call_520_deep": json.dumps({"type": "toolCall", "name": "edit", "input": nested(520)}),
    "exit_code_nan": '{"type":"command","command":"ls","exitCode":NaN,"output":"x"}',
    "exit_code_1e309": '{"type":"command","command":"ls","exitCode":1e309,"output":"x"}',
    "at_1e300": '{"type":"message","role":"assistant","text":"hi","at":1e300}',
    "lone_surrogate": '{"type":"message","role":"assistant","text":"bad \\ud800 text"}',
    "surrogate_reason": '{"type":"finished","reason":"done \\udfff"}',
}


def cases_file(names: list[str], body: str) -> str:
    """One case per name; each runs `.agent/run.sh` and prints its own `.agent/lines.jsonl`."""
    source = HEADER
    for name in names:
        source += f"""
@evaluation(workspace=git(init=True),
            files={{".agent/run.sh": Path("agent.sh"), ".agent/lines.jsonl": Path("{name}.jsonl")}})
def {name}(c):
{body}
"""
    return source


PRINT_LINES = "cat .agent/lines.jsonl\n"
SEND_AND_CHECK = '    c.send("go")\n    c.exec("true").to_succeed()'


def by_case(summary, records):
    return {run.case_id: records[run.trials[0].id] for run in summary.runs}


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


@pytest.mark.slow
def test_hostile_lines_never_lose_the_record_nor_fail_the_agent(suite, run_eval, store):
    files = {"agent.sh": PRINT_LINES, **{f"{name}.jsonl": text + "\n" for name, text in HOSTILE.items()}}
    path = suite(cases_file(list(HOSTILE), SEND_AND_CHECK), files=files)
    summary, _, records = run_eval(path, concurrency=4)
    records = by_case(summary, records)
    assert set(records) == set(HOSTILE)
    for name, record in records.items():
        assert record is not None, f"{name}: the record was lost"
        assert record.outcome == "pass", f"{name}: {record.failure}"
        assert record.turns[0].status == "completed"
        json.dumps(record.to_json(), allow_nan=False).encode("utf-8")
    assert records["usage_2_63"].usage.input == limits.USAGE_MAX
    for name in ("tool_call_260_deep", "tool_call_520_deep", "exit_code_nan", "exit_code_1e309",
                 "at_1e300", "lone_surrogate"):
        [item] = records[name].trajectory
        assert item.warnings, name
    assert records["lone_surrogate"].trajectory[0].text == "bad \ufffd text"
    assert records["surrogate_reason"].turns[0].finished_reason == "done \ufffd"
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("select count(*) from trial where status != 'done'").fetchone() == (0,)


FLOODS = {
    # A 50 MB JSON line: took 32 s and put 100 MB into the store.
    "line_50mb": "import json,sys\nsys.stdout.write(json.dumps({'type':'message','role':'assistant',"
                 "'text':'x'*50_000_000})+'\\n')\n",
    # 100,000 items: made 100,030 event rows.
    "items_100k": "import sys\nw=sys.stdout.write\nfor i in range(100_000):\n"
                  "    w('{\"type\":\"command\",\"command\":\"ls %d\",\"exitCode\":0,\"output\":\"ok\"}\\n' % i)\n",
    # 60 MB of short lines: cost 1.55 GB of engine memory.
    "short_lines_60mb": "import sys\nblock=''.join('raw output line number %07d\\n' % i for i in range(2000))\n"
                        "for _ in range(1000):\n    sys.stdout.write(block)\n",
    # 78 MB of changes: made a 158 MB store (the diff kept twice, uncapped).
    "diff_78mb": "for i in range(20):\n    open('f%02d.txt' % i, 'w').write(('line %d of changed text\\n' % i) * 160_000)\n"
                 "for i in range(300):\n    open('small%03d.txt' % i, 'w').write(('small file %d\\n' % i) * 800)\n",
}


@pytest.mark.slow
def test_floods_leave_a_bounded_record_and_store(suite, run_eval, store):
    files = {"agent.sh": "python3 .agent/flood.py\n", **{f"{n}.py": s for n, s in FLOODS.items()}}
    source = HEADER + "".join(f"""
@evaluation(workspace=git(init=True), files={{".agent/run.sh": Path("agent.sh"), ".agent/flood.py": Path("{name}.py")}})
def {name}(c):
    c.send("go")
    c.exec("true").to_succeed()
""" for name in FLOODS)
    path = suite(source, files=files)
    summary, events, records = run_eval(path, concurrency=2)
    records = by_case(summary, records)
    for name, record in records.items():
        assert record is not None and record.outcome == "pass", (name, record and record.failure)
        size = len(json.dumps(record.to_json()))
        assert size < 8 * limits.DIFF_TOTAL, (name, size)

    line = records["line_50mb"].turns[0]
    assert len(line.raw_output) <= limits.RAW_OUTPUT and "truncated" in line.raw_output

    items = records["items_100k"]
    assert len(items.trajectory) == limits.ITEMS_PER_TURN + 1
    assert "98,000 items dropped" in items.trajectory[-1].text
    progress = [e for e in events if isinstance(e, PhaseProgress) and e.trial_id == items.id
                and e.phase == "turn"]
    assert len(progress) <= limits.ITEMS_PER_TURN + 1

    raw = records["short_lines_60mb"].turns[0].raw_output
    assert len(raw) <= limits.RAW_OUTPUT

    diff = records["diff_78mb"].turns[0]
    assert "diff of f00.txt too large" in diff.diff
    assert len(diff.diff) + len(diff.cumulative_diff) <= limits.DIFF_TRIAL
    assert len(diff.files_changed) == 320

    store.flush()
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute("select count(*) from event").fetchone()[0]
    assert rows < limits.ITEMS_PER_TURN + 400
    # 4 floods, 212 MB from the agent: the old engine stored 311 MB (and 100,030 event rows).
    assert store_bytes(Path(store.path)) < 12_000_000


# --- cuts made while reading: no half of a key lands inside the stored cap -------------------

CUT_KEY = "sk-CUT" + "abcdefghijklmnopqrstuvwxyz" * 4  # a cut 10 characters in keeps "sk-CUTabcd"
LONG_KEY = 3000  # each becomes "[redacted]": 300 characters to 10


def keys_then_cut(cut_at: int, total: int, start: str = "", sep: str = " ") -> str:
    """`start`, keys of LONG_KEY characters or more, then CUT_KEY from 10 characters before
    `cut_at`, the whole `total` long: a cut at `cut_at` leaves "sk-CUTabcd", too short to be a
    key; once the keys before it shrink to "[redacted]", it falls inside the stored cap."""
    room = cut_at - 10 - len(start)
    count = max(room // (LONG_KEY + 1), 1)
    sizes = [LONG_KEY + 1] * (count - 1) + [room - (count - 1) * (LONG_KEY + 1)]
    keys = "".join(f"sk-{i:06d}".ljust(size - 1, "k") + sep for i, size in enumerate(sizes))
    text = start + keys + CUT_KEY
    return text + "z" * (total - len(text))


def cut_at(read: Callable[[str], str], total: int, start: str = "") -> int:
    """Where the engine's reader `read` cuts a `total`-character text: measured on x's."""
    return len(start) + read(start + "x" * (total - len(start))).count("x")


def item_text(text: str) -> str:
    return parse_line(json.dumps({"type": "message", "text": text}), 1).text


def reason_text(text: str) -> str:
    return parse_line(json.dumps({"type": "finished", "reason": text}), 1)[1]


def raw_output(stdout: str = "", stderr: str = "") -> str:
    reader = CommandStream(1)
    for line in stdout.split("\n"):
        reader.feed(line)
    return reader.finish().turn_output(0, stderr).raw_output


def check_output(text: str) -> str:
    collector = OutputCollector(None)
    collector.feed(text.encode())
    collector.close()
    return collector.text()


def holding(value: object, text: str, where: str = "") -> list[str]:
    """Where in a record's JSON `text` occurs."""
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in holding(v, text, f"{where}.{k}")]
    if isinstance(value, list):
        return [w for i, v in enumerate(value) for w in holding(v, text, f"{where}[{i}]")]
    return [where] if isinstance(value, str) and text in value else []


def test_a_key_cut_while_reading_leaves_no_fragment_in_the_store(suite, run_eval, store):
    # Each reader's cut falls 10 characters into CUT_KEY: an item's text, raw output lines,
    # stderr, a check's output, a finished reason (and so the failure reason and an event).
    text = keys_then_cut(cut_at(item_text, 40_000), 40_000)
    stdout = "".join([
        json.dumps({"type": "message", "role": "assistant", "text": text}) + "\n",
        keys_then_cut(cut_at(raw_output, 70_000), 70_000, sep="\n") + "\n",
    ])
    files = {
        "agent.sh": "cat .agent/stdout.txt; cat .agent/stderr.txt >&2\n",
        "fails.sh": "cat .agent/reason.jsonl\n",
    }
    path = suite(HEADER + """
@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh"),
            ".agent/stdout.txt": Path("stdout.txt"), ".agent/stderr.txt": Path("stderr.txt"),
            ".agent/big.txt": Path("big.txt")})
def outputs(c):
    c.send("go")
    c.exec("cat .agent/big.txt").to_succeed()


@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("fails.sh"),
            ".agent/reason.jsonl": Path("reason.jsonl")})
def reason(c):
    c.send("go")
""", files=files)
    folder = path.parent
    (folder / "stdout.txt").write_text(stdout)
    stderr_at = cut_at(lambda text: raw_output(stderr=text), 100_000)
    (folder / "stderr.txt").write_text(keys_then_cut(stderr_at, 100_000))
    big = OUTPUT_KEEP + 1000
    (folder / "big.txt").write_text(keys_then_cut(cut_at(check_output, big), big))
    reason = keys_then_cut(cut_at(reason_text, 40_000, "failed: "), 40_000, start="failed: ")
    (folder / "reason.jsonl").write_text(json.dumps({"type": "finished", "reason": reason}) + "\n")

    summary, events, records = run_eval(path, concurrency=2)
    records = by_case(summary, records)
    outputs, failed = records["outputs"], records["reason"]
    assert outputs.outcome == "pass", outputs.failure
    assert failed.outcome == "infra_error"
    assert "the harness reported failed: [redacted]" in failed.failure.reason
    # The reason is also quoted in an event, as the trial ends.
    [teardown] = [e.summary for e in events if isinstance(e, PhaseEnded) and e.phase == "teardown"
                  and e.trial_id == failed.id]
    assert "reported failed: [redacted]" in teardown and "sk-CUT" not in teardown
    # The keys before each cut were redacted, so each cut fell well inside its stored cap.
    assert outputs.turns[0].raw_output.count("[redacted]") > 20
    assert outputs.trajectory[0].text.count("[redacted]") >= 4
    assert outputs.validations[0].evidence["stdout"].count("[redacted]") > 600
    for record in (outputs, failed):
        assert holding(record.to_json(), "sk-CUT") == []
    store.flush()
    for name in os.listdir(folder.parent):
        if name.startswith(Path(store.path).name):
            assert b"sk-CUT" not in (folder.parent / name).read_bytes(), name


# --- fuzzing: hypothesis-made harness lines through a real trial ------------------------------

SECRET = "fz-" + "Q7vX2mK9pL4wR8tN3bJ6"  # a host variable named *_KEY: its value is redacted
PATTERN_KEY = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
TEXT = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=30)
SECRETLY = st.sampled_from([SECRET, PATTERN_KEY, "Bearer " + SECRET, f"https://u:{SECRET}@db"])


@st.composite
def fuzz_line(draw) -> str:
    """A harness line: random fields, some holding a secret placed where a cap would cut it."""
    kind = draw(st.sampled_from(["message", "command", "toolCall", "fileChange", "usage", "finished", "junk"]))
    if kind == "junk":  # a key-shaped token counts only as a word of its own ("task-sk-…" is none)
        return draw(TEXT) + " " + draw(SECRETLY)
    scalar = st.none() | st.booleans() | st.integers() | st.floats() | TEXT | SECRETLY
    value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(TEXT | SECRETLY, inner, max_size=3), max_leaves=10)
    obj: dict = {"type": kind}
    for field in draw(st.lists(st.sampled_from(
            ["text", "role", "command", "output", "exitCode", "name", "input", "path", "change",
             "at", "input", "cacheRead", "reason"]), max_size=5, unique=True)):
        obj[field] = draw(value)
    # A secret straddling a cap: the item text cap, the read cap, the raw output cap.
    cut = draw(st.sampled_from([limits.ITEM_TEXT, limits.ITEM_READ, limits.ITEM_NAME, 50]))
    obj[draw(st.sampled_from(["text", "output", "command", "path", "name"]))] = (
        "x" * (cut - draw(st.integers(1, 12))) + " " + draw(SECRETLY) + " " + "y" * draw(st.integers(0, 100)))
    if kind == "finished" and str(obj.get("reason", "")).startswith("failed:"):
        obj["reason"] = "done"
    if draw(st.integers(0, 5)) == 0:
        obj["input"] = nested(draw(st.integers(30, 600)))
    return json.dumps(obj, ensure_ascii=draw(st.booleans()))


@pytest.mark.slow
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(turns=st.lists(st.lists(fuzz_line(), min_size=1, max_size=12), min_size=3, max_size=3))
def test_fuzzed_harness_lines_through_a_real_trial(suite, run_eval, store, monkeypatch, turns):
    monkeypatch.setenv("PROCTOR_FUZZ_API_KEY", SECRET)
    path = suite(HEADER + """
@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh"),
            **{f".agent/turn-{i}.jsonl": Path(f"turn-{i}.jsonl") for i in (1, 2, 3)}})
def fuzzed(c):
    for i in (1, 2, 3):
        c.send(f"turn {i}")
    c.exec("true").to_succeed()
""", files={"agent.sh": 'cat ".agent/turn-$PROCTOR_TURN.jsonl"\n'})
    for i, lines in enumerate(turns, 1):
        text = "".join(line.replace("\n", " ") + "\n" for line in lines)
        # A lone surrogate printed raw is bytes no UTF-8 decoder accepts: the agent may print those too.
        (path.parent / f"turn-{i}.jsonl").write_bytes(text.encode("utf-8", "surrogatepass"))
    summary, events, records = run_eval(path)
    [record] = by_case(summary, records).values()
    assert record is not None and record.outcome == "pass", record and record.failure
    assert [t.status for t in record.turns] == ["completed"] * 3
    assert "Traceback" not in json.dumps(record.to_json())
    store.flush()
    for name in os.listdir(Path(store.path).parent):
        if name.startswith(Path(store.path).name):
            data = (Path(store.path).parent / name).read_bytes()
            for secret in (SECRET, PATTERN_KEY, SECRET[:12], PATTERN_KEY[:14]):
                assert secret.encode() not in data, f"{secret[:6]}… in {name}"


# --- the last resort: a record that cannot be written is saved minimal ------------------------


@pytest.fixture
def finishing_trial(suite, store):
    """A trial at its record phase (no sandbox needed), saving into a real store as a batch does."""
    from engine.config import find_config, load_config
    from engine.spec import load_cases
    from engine.trial import Trial, TrialPlan

    path = suite(HEADER + "\n@evaluation()\ndef finishes(c):\n    pass\n")
    config = load_config(find_config(path))
    [case] = load_cases([path])
    plan = TrialPlan(case=case, variant=config.select_variants(None)[0], config=config,
                     batch_id="b_last", run_id="r_last", trial_id="t_last", trial=1,
                     trigger="api", owner="test")
    events: list = []
    trial = Trial(plan, None, None, events.append, lambda r: store.save_trial(r).result(), None)
    trial.record.outcome = "pass"
    return trial, events


def test_a_record_that_cannot_be_serialized_is_saved_minimal_as_infra_error(finishing_trial, store):
    from engine.models import Validation

    trial, events = finishing_trial
    trial.record.validations.append(Validation(kind="check", name="x", status="passed",
                                               evidence={"value": object()}))
    final = trial._finish()
    stored = store.get_trial("t_last")
    assert stored is not None and stored.outcome == "infra_error" == final.outcome
    assert stored.failure.kind == "infra" and stored.failure.where == "record"
    assert stored.failure.reason.startswith("the record could not be saved: PydanticSerializationError")
    assert events[-1].outcome == "infra_error"


def test_values_no_serializer_can_write_are_repaired_and_the_full_record_saved(finishing_trial, store):
    from engine.models import Failure, Usage, Validation

    trial, _ = finishing_trial
    trial.record.outcome = "fail"
    trial.record.failure = Failure(kind="assertion", reason="AssertionError at x: bad \ud800 text")
    trial.record.usage = Usage(input=2**64, output=2**63)  # a provider's report, through the mini harness
    trial.record.validations.append(Validation(kind="check", name="x", status="failed", evidence={
        "message": "bad \udfff", "deep": nested(300), "nan": float("nan")}))
    trial._finish()
    stored = store.get_trial("t_last")
    assert stored is not None and stored.outcome == "fail"
    assert stored.failure.reason == "AssertionError at x: bad \ufffd text"
    assert stored.usage.input == limits.USAGE_MAX
    assert stored.validations[0].evidence["message"] == "bad \ufffd"
    assert stored.validations[0].evidence["nan"] is None


# --- the cumulative diff, stored once -----------------------------------------------------------


def section(path: str, lines: int) -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{lines} @@\n" + "".join(f"+{path} line {i}\n" for i in range(lines)))


@pytest.mark.parametrize("turn_diffs,cumulative,stored", [
    # One turn: its own diff is the whole change, and is stored once.
    (["A"], "A", [""]),
    # Only the second of two turns changed anything: the same.
    (["", "A"], "A", ["", ""]),
    # Two turns changed files: the cumulative diff is the one thing that shows both; kept once.
    (["A", "B"], "AB", ["", "AB"]),
    # Two turns whose changes undo each other: nothing to keep.
    (["A", "A"], "", ["", ""]),
])
def test_the_cumulative_diff_is_stored_only_where_the_turns_do_not_hold_it(
        finishing_trial, store, turn_diffs, cumulative, stored):
    from engine.models import TurnRecord

    trial, _ = finishing_trial
    diff = {"": "", "A": section("a.txt", 50), "B": section("b.txt", 50)}
    diff["AB"] = diff["A"] + diff["B"]
    for i, own in enumerate(turn_diffs, 1):
        trial.record.turns.append(TurnRecord(index=i, prompt="p", status="completed", ms=1,
                                             diff=diff[own], cumulative_diff=diff[cumulative]))
    trial._finish()
    record = store.get_trial("t_last")
    assert [t.cumulative_diff for t in record.turns] == [diff[name] for name in stored]
    assert [t.diff for t in record.turns] == [diff[name] for name in turn_diffs]


def test_a_one_turn_trial_stores_its_diff_once(suite, run_eval, store):
    # 0.81 MB of diff in one turn, kept as the turn's diff and again as the cumulative one, made
    # a 1.71 MB record and a 2.28 MB store; once, 0.86 MB and 1.44 MB.
    agent = ("python3 -c \"[open(f'f{i}.txt', 'w').write(''.join(f'file {i} line {j}\\n'"
             " for j in range(3000))) for i in range(15)]\"\n")
    path = suite(HEADER + """
@evaluation(workspace=git(init=True), files={".agent/run.sh": Path("agent.sh")})
def writes(c):
    turn = c.send("go")
    assert len(turn.files_changed) == 15
""", files={"agent.sh": agent})
    summary, _, records = run_eval(path)
    [record] = by_case(summary, records).values()
    assert record.outcome == "pass", record.failure
    [turn] = record.turns
    assert turn.diff.count("diff --git") == 15 and turn.cumulative_diff == ""
    stored = json.dumps(record.to_json())
    assert stored.count("file 7 line 2999") == 1
    store.flush()
    size = store_bytes(Path(store.path))
    assert len(stored) < 1.2 * len(turn.diff) and size < 2.2 * len(turn.diff), (len(stored), size)
