"""Compare's engine side: trajectories built to part at a known step, and two engine-made records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.compare import align, checks, deltas, mask, normalise, turn_files
from engine.models import TrajectoryItem, TurnRecord, Usage, Validation
from engine.store import Store
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
