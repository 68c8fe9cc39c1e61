"""Compare's engine side: trajectories built to part at a known step, and two engine-made records."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from engine.compare import align, checks, deltas, mask, normalise, turn_files
from engine.limits import USAGE_MAX
from engine.models import PhaseSpan, Timings, TrajectoryItem, TrialRecord, TurnRecord, Usage, Validation
from engine.store import Store, StoreError
from tests.trajectories import cmd, record, steps

RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded.db"


def first(a: list[TrajectoryItem], b: list[TrajectoryItem]) -> int | None:
    return align(record(a), record(b, id="t_b")).first_divergence


def test_an_inserted_step_diverges_where_it_was_inserted():
    a = steps()
    b = a[:5] + [cmd("rm -rf build")] + a[5:]
    comparison = align(record(a), record(b, id="t_b"))
    assert comparison.first_divergence == 5
    assert comparison.rows[5].kind == "only_b" and comparison.rows[5].b == 5
    assert comparison.divergences == [5]
    # Everything after the insertion matches again, shifted by one on B's side.
    assert all(row.kind == "same" and row.b == row.a + 1 for row in comparison.rows[6:])


def test_a_deleted_step_diverges_where_it_was_deleted():
    a = steps()
    comparison = align(record(a), record(a[:7] + a[8:], id="t_b"))
    assert comparison.first_divergence == 7
    assert comparison.rows[7].kind == "only_a" and comparison.rows[7].a == 7
    assert len(comparison.rows) == len(a)


def test_a_changed_command_diverges_at_that_command():
    a = steps()
    b = list(a)
    b[8] = cmd("pytest -q tests/test_8.py -x")
    comparison = align(record(a), record(b, id="t_b"))
    assert comparison.first_divergence == 8
    assert comparison.rows[8].model_dump() == {"kind": "changed", "a": 8, "b": 8}
    assert [row.kind for row in comparison.rows].count("same") == len(a) - 1


def test_identical_trajectories_have_no_divergence():
    comparison = align(record(steps()), record(steps(), id="t_b"))
    assert comparison.first_divergence is None and comparison.divergences == []
    assert {row.kind for row in comparison.rows} == {"same"}


@pytest.mark.parametrize("a, b", [
    ("ls /tmp/tmp.Xa81Qz/out", "ls /tmp/tmp.9bLmQ2/out"),
    ("proctor show t_67ba13072b", "proctor show t_9f5c621d61"),
    ("proctor show t_cc9debeaec", "proctor show t_bdbaefd4ec"),  # ids with one digit, or none
    ("git show dbbfcaefbfaa", "git show 1fabacbdba12"),
    ("echo 2026-11-30T21:17:16.251Z", "echo 2026-12-01T08:02:59.003Z"),
    ("date; echo 21:17:16", "date; echo 08:02:59"),
    ("git checkout 4f2a9c1e7b", "git checkout 0d1e2f3a4b"),
    ("curl -H 'x-request-id: 123e4567-e89b-12d3-a456-426614174000'",
     "curl -H 'x-request-id: 00000000-1111-2222-3333-444444444444'"),
    ("kill 48213", "kill 50117"),
    ("sleep 250ms", "sleep 1.5s"),
])
def test_volatile_parts_do_not_count_as_a_divergence(a, b):
    assert mask(a) == mask(b)
    before, after = steps(), steps()
    before[4], after[4] = cmd(a), cmd(b)
    tool_a = TrajectoryItem(kind="toolCall", turn=1, name="run", input={"cmd": a, "n": 1})
    tool_b = TrajectoryItem(kind="toolCall", turn=1, name="run", input={"n": 1, "cmd": b})
    assert first(before + [tool_a], after + [tool_b]) is None


def test_what_a_key_keeps():
    # The step itself still counts: small numbers, names, paths, the role (never a message's text).
    assert mask("head -n 20 test_greet1.py") == "head -n 20 test_greet1.py"
    assert normalise(cmd("head -n 20 x")) != normalise(cmd("head -n 30 x"))
    tool = TrajectoryItem(kind="toolCall", turn=1, name="edit", input={"path": "a.py"})
    assert normalise(tool) != normalise(tool.model_copy(update={"name": "write"}))
    change = TrajectoryItem(kind="fileChange", turn=1, path="a.py", change="add")
    assert normalise(change) != normalise(change.model_copy(update={"change": "delete"}))
    message = TrajectoryItem(kind="message", turn=1, role="assistant", text="one")
    assert normalise(message) == normalise(message.model_copy(update={"text": "two"}))
    assert normalise(message) != normalise(message.model_copy(update={"role": "user"}))


def test_divergences_step_forward_and_back():
    a = steps(40)
    b = list(a)
    b[3] = cmd("make")  # a changed step
    del b[20]  # a deleted step
    b.insert(30, cmd("make again"))  # an inserted step
    comparison = align(record(a), record(b, id="t_b"))
    assert comparison.divergences == [3, 20, 31]
    assert comparison.next_divergence(comparison.first_divergence) == 20
    assert comparison.next_divergence(20) == 31 and comparison.next_divergence(31) is None
    assert comparison.previous_divergence(31) == 20 and comparison.previous_divergence(3) is None
    assert comparison.previous_divergence(25) == 20 and comparison.next_divergence(0) == 3


def diff(path: str, body: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n{body}\n"


def test_turn_files_sort_files_into_only_a_only_b_and_different():
    a = record([], turns=[
        TurnRecord(index=1, prompt="p", status="completed", ms=1,
                   diff=diff("same.py", "+x") + diff("a.py", "+a") + diff("both.py", "+1"),
                   files_changed=["same.py", "a.py", "both.py"]),
        TurnRecord(index=2, prompt="p", status="completed", ms=1, diff=diff("late.py", "+l"),
                   files_changed=["late.py"]),
    ])
    b = record([], id="t_b", turns=[
        TurnRecord(index=1, prompt="p", status="completed", ms=1,
                   diff=diff("both.py", "+2") + diff("same.py", "+x") + diff("my file.py", "+b"),
                   files_changed=["both.py", "same.py", "my file.py", "cut.bin"]),
    ])
    one, two = turn_files(a, b)
    assert one.turn == 1 and two.turn == 2
    assert one.paths("only_a") == ["a.py"]
    assert one.paths("only_b") == ["cut.bin", "my file.py"]
    assert one.paths("different") == ["both.py"]
    both = next(f for f in one.files if f.path == "both.py")
    assert both.a_diff == diff("both.py", "+1") and both.b_diff == diff("both.py", "+2")
    assert next(f for f in one.files if f.path == "my file.py").b_diff == diff("my file.py", "+b")
    assert two.paths("only_a") == ["late.py"] and two.files[0].a_diff == diff("late.py", "+l")


def check(name: str, status: str, kind: str = "command") -> Validation:
    return Validation(kind=kind, name=name, status=status)


def test_the_first_check_whose_status_differs_is_marked():
    a = record([], validations=[check("lint", "passed"), check("tests", "passed"), check("types", "failed"),
                                check("idiomatic", "passed", "judge")])
    b = record([], id="t_b", validations=[check("lint", "passed"), check("tests", "failed"),
                                          check("types", "passed"), check("idiomatic", "failed", "judge")])
    result = checks(a, b)
    assert result.first_difference == 1
    assert result.pairs[1].a.name == result.pairs[1].b.name == "tests"
    assert [pair.differs for pair in result.pairs] == [False, True, True, True]
    # A check one side never ran differs too, and the others stay paired by name.
    shorter = record([], id="t_c", validations=[check("lint", "passed"), check("types", "failed")])
    result = checks(a, shorter)
    assert result.first_difference == 1 and result.pairs[1].b is None
    assert result.pairs[2].a.name == result.pairs[2].b.name == "types"


def test_deltas_are_b_minus_a():
    a = record([], command_count=3, usage=Usage(input=100, output=10),
               started_at="2026-11-30T21:17:16.000Z", finished_at="2026-11-30T21:17:18.500Z")
    b = record([], id="t_b", command_count=1, usage=Usage(input=25, output=40, reasoning=7),
               started_at="2026-11-30T21:17:16.000Z", finished_at="2026-11-30T21:17:17.000Z")
    result = deltas(a, b)
    assert result.duration_ms == -1500 and result.command_count == -2
    assert result.tokens == {"input": -75, "output": 30, "cache_read": 0, "cache_write": 0, "reasoning": None}


def test_a_real_pass_and_fail_compare(tmp_path):
    # Two trials the engine recorded in Docker (tests/data/recorded.db): a pass and a fail.
    shutil.copy(RECORDED, tmp_path / "recorded.db")
    with Store(tmp_path / "recorded.db") as store:
        batch = store.list_batches()[0]
        ids = {run.case_id: run.trials[0].id for run in batch.runs}
        passed, failed = store.get_trial(ids["writes_greet"]), store.get_trial(ids["adds_numbers"])
    comparison = align(passed, failed)
    # The pass begins by adding greet.py; the fail's one step is a different command.
    assert comparison.first_divergence == 0
    assert len(comparison.rows) >= len(passed.trajectory)
    assert {row.a for row in comparison.rows if row.a is not None} == set(range(len(passed.trajectory)))
    assert {row.b for row in comparison.rows if row.b is not None} == set(range(len(failed.trajectory)))
    assert align(passed, passed).first_divergence is None
    (turn_one, turn_two) = turn_files(passed, failed)
    assert turn_one.paths("only_a") == ["greet.py"] and turn_one.paths("only_b") == ["calc.py"]
    assert "def add(a, b)" in turn_one.files[0].b_diff
    assert turn_two.paths("only_a") == ["greet.py", "logo.bin", "test_greet.py"]
    result = checks(passed, failed)
    marked = result.pairs[result.first_difference]
    assert (marked.a.status, marked.b.status) == ("passed", "failed")
    assert result.first_difference == 0
    figures = deltas(passed, failed)
    assert figures.command_count == failed.command_count - passed.command_count
    assert figures.tokens["input"] == failed.usage.input - passed.usage.input
    assert figures.phases["judge"] < 0  # the fail never reached its judge


# --- hostile records: every byte the agent controls is bounded before compare keys it -----------

def timed(fn, *args):
    """`fn(*args)` and the seconds it took."""
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def tool(value, name: str = "write") -> TrajectoryItem:
    return TrajectoryItem(kind="toolCall", turn=1, name=name, input=value)


def nested(depth: int, leaf) -> list:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deepest_stored(tmp_path: Path) -> tuple[int, TrialRecord]:
    """The deepest toolCall input the store writes and reads back (json caps it near the
    interpreter's recursion limit), and the record as read."""
    with Store(tmp_path / "deep.db") as store:
        for depth in range(1000, 0, -10):
            stored = record([*steps(4), tool(nested(depth, "/tmp/tmp.Xa81Qz/out"))], id=f"t_{depth}")
            try:
                store.save_trial(stored).result(timeout=30)
                back = store.get_trial(stored.id)
            except (RecursionError, StoreError):
                continue
            if back is not None:
                return depth, back
    raise AssertionError("the store holds no nested input at all")


def test_an_input_nested_as_deep_as_the_store_holds_compares(tmp_path):
    depth, deep = deepest_stored(tmp_path)
    assert depth >= 500
    other = deep.model_copy(update={"id": "t_b", "trajectory": [
        *deep.trajectory[:4], tool(nested(depth, "/tmp/tmp.9bLmQ2/out"))]})
    comparison, took = timed(align, deep, other)
    assert comparison.first_divergence is None and took < 1  # its temp folder is volatile
    # Deeper than any store holds, built in memory: still a key, and the shallow input differs.
    deeper = tool(nested(100_000, "x"))
    assert len(normalise(deeper)) < 20_000
    comparison = align(record([deeper]), record([tool(["x"])], id="t_b"))
    assert comparison.first_divergence == 0 and comparison.rows[0].kind == "changed"


def test_a_megabyte_input_or_command_is_keyed_by_a_bounded_part():
    big = {"path": "/tmp/tmp.Xa81Qz/out", "data": "x" * 1_000_000}
    moved = {"path": "/tmp/tmp.9bLmQ2/out", "data": "x" * 1_000_000}
    keys = {f"k{i}": i for i in range(100_000)}  # about 1.3 MB of JSON in many small parts
    assert len(normalise(tool(big))) < 20_000 and len(normalise(tool(keys))) < 20_000
    huge = TrajectoryItem(kind="command", turn=1, command="echo " + "y" * 1_000_000)
    assert len(normalise(huge)) < 20_000
    # Ten of each a side (the same objects: no more memory): about as fast as small ones.
    a = record([tool(big), tool(keys), huge] * 10)
    b = record([tool(moved), tool(keys), huge] * 10, id="t_b")
    comparison, took = timed(align, a, b)
    assert comparison.first_divergence is None, "the temp folder's name is volatile"
    assert took < 1.0, f"{took:.2f}s"
    # What is kept still tells steps apart: a different path after the megabyte of data is one.
    other = record([tool({**big, "path": "src/other.py"}), tool(keys), huge] * 10, id="t_c")
    assert align(a, other).first_divergence == 0


def test_nul_lone_surrogates_and_binary_text_compare_without_error():
    odd = "cat \x00\x01\x7f\ufffd \ud800 \udfff" + bytes(range(256)).decode("latin-1")
    items = [TrajectoryItem(kind="command", turn=1, command=odd, output=odd),
             tool({odd: [odd, "\ud83d"]}, name=odd),
             TrajectoryItem(kind="fileChange", turn=1, path=odd, change=odd),
             TrajectoryItem(kind="message", turn=1, role=odd, text=odd)]
    path = odd.replace("\n", "")  # one line, as a diff header holds it
    a = record(items, turns=[TurnRecord(index=1, prompt=odd, status="completed", ms=1,
                                        diff=diff(path, "+\x00\ud800"), files_changed=[path])],
               validations=[Validation(kind="command", name=odd, status="passed")])
    b = record([*items[:2], TrajectoryItem(kind="command", turn=1, command=odd + "\udc00"), *items[2:]],
               id="t_b", validations=[Validation(kind="command", name=odd, status="failed")])
    assert align(a, a.model_copy(update={"id": "t_c"})).first_divergence is None
    comparison = align(a, b)
    assert comparison.first_divergence == 2 and comparison.rows[2].kind == "only_b"
    [files] = turn_files(a, b)
    assert files.paths("only_a") == [path]
    assert checks(a, b).first_difference == 0


def test_odd_numbers_in_inputs_usage_and_timings_compare_without_error():
    numbers = {"nan": float("nan"), "inf": float("-inf"), "big": 10**5000, 1: "an int key", None: 0}
    a = record([tool(numbers)], usage=Usage(input=10**30, output=-5, reasoning=10**30),
               timings=Timings(agent_ms=10**30, setup_ms=-(10**30)), command_count=10**30,
               phases=[PhaseSpan(phase="turn", index=1, status="ok", start_ms=-(10**30), end_ms=10**30)],
               started_at="NaN", finished_at="2026-11-30T21:17:18.500Z")
    b = record([tool(dict(numbers))], id="t_b", started_at="2026-11-30T21:17:16.000Z",
               finished_at="9999-99-99T99:99:99Z")
    assert align(a, b).first_divergence is None  # NaN is the same step on both sides
    assert align(a, record([tool({"nan": 1})], id="t_c")).first_divergence == 0
    figures = deltas(a, b)
    assert figures.duration_ms is None and figures.command_count == -(10**30)
    assert figures.tokens["input"] == -USAGE_MAX and figures.tokens["reasoning"] is None
    assert figures.timings["agent_ms"] == -(10**30) and figures.phases["turn"] == -2 * 10**30


def test_ten_thousand_identical_items_align_at_once():
    same = [cmd("pytest -q")] * 10_000
    comparison, took = timed(align, record(same), record(same, id="t_b"))
    assert comparison.first_divergence is None and len(comparison.rows) == 10_000
    inserted = same[:5_000] + [cmd("rm -rf build")] + same[5_000:]
    comparison, took_too = timed(align, record(same), record(inserted, id="t_b"))
    assert comparison.divergences == [5_000] and comparison.rows[5_000].kind == "only_b"
    many = [check("pytest -q", "passed")] * 10_000
    result, took_checks = timed(checks, record([], validations=many),
                                record([], id="t_b", validations=many))
    assert result.first_difference is None and len(result.pairs) == 10_000
    assert took + took_too + took_checks < 2.0


def test_an_empty_trajectory_against_a_long_one():
    turns = [TurnRecord(index=i, prompt="p", status="completed", ms=1, diff=diff(f"f{i}.py", "+x"),
                        files_changed=[f"f{i}.py"]) for i in range(1, 101)]
    long = record(steps(10_000), validations=[check("lint", "passed")], turns=turns)
    empty = record([], id="t_b")
    for a, b, side in ((empty, long, "only_b"), (long, empty, "only_a")):
        comparison = align(a, b)
        assert comparison.first_divergence == 0 and comparison.divergences == [0]
        assert len(comparison.rows) == 10_000 and {row.kind for row in comparison.rows} == {side}
        assert len(turn_files(a, b)) == 100 and checks(a, b).first_difference == 0
        assert deltas(a, b).command_count == 0
    nothing = align(empty, empty.model_copy(update={"id": "t_c"}))
    assert nothing.rows == [] and nothing.first_divergence is None and nothing.divergences == []


def test_a_megabyte_of_diff_headers_sorts_into_files_at_once():
    def turn(diff_text: str) -> TurnRecord:
        return TurnRecord(index=1, prompt="p", status="completed", ms=1, diff=diff_text)

    many = "".join(f"diff --git a/f{i} b/f{i}\n+x\n" for i in range(40_000))  # 1.2 MB
    other = many.replace("+x", "+y")
    long_path = "z" * 1_000_000
    a = record([], turns=[turn(many)])
    b = record([], id="t_b", turns=[turn(other + f"diff --git a/{long_path} b/{long_path}\n+z\n")])
    [files], took = timed(turn_files, a, b)
    assert len(files.paths("different")) == 40_000 and files.paths("only_b") == [long_path]
    assert took < 2.0
