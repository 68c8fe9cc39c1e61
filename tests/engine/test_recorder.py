"""The recorder's bookkeeping of a record, and the typed item in a progress event (no Docker).

The record is written from the eval body's thread under the recorder's lock; a body
abandoned after the timeout is muted, and its late writes are dropped. A progress
event carries the stored `TrajectoryItem` itself, yet is stored as the same JSON as
before, so stores written by earlier versions still read.
"""

from __future__ import annotations

import threading
from pathlib import Path

from engine.config import Config, Variant
from engine.events import PhaseProgress, parse_event
from engine.models import Artifact, TrajectoryItem, TrialRecord, TurnRecord, Usage, Validation
from engine.recorder import Recorder
from engine.redact import Redactor
from engine.spec import Case
from engine.trial import TrialPlan

# Two progress events as this version's predecessor stored them (item as a dict of its kind's fields).
STORED_TOOL_CALL = (
    '{"batch_id":"b_1","at":1700000000000,"trial_id":"t_1","case_id":"c","variant":"v","trial":1,'
    '"type":"phase_progress","phase":"turn","index":2,"message":"tool edit","item":{"kind":"toolCall",'
    '"turn":2,"at":"2026-01-02T03:04:05.678Z","truncated":false,"output":"ok","name":"edit",'
    '"input":{"path":"greet.py","n":[1,2]},"warnings":["exitCode: NaN dropped"]}}')
STORED_COMMAND = (
    '{"batch_id":"b_1","at":1700000000000,"trial_id":"t_1","case_id":"c","variant":"v","trial":1,'
    '"type":"phase_progress","phase":"turn","index":1,"message":"$ ls","item":{"kind":"command",'
    '"turn":1,"at":null,"truncated":false,"command":"ls","exit_code":0,"output":"a\\n"}}')


def recorder(secrets: list[str] | None = None) -> tuple[Recorder, list]:
    record = TrialRecord(id="t_1", batch_id="b_1", run_id="r_1", case_id="c", variant="v",
                         trial=1, trigger="api")
    events: list = []
    return Recorder(record, events.append, Redactor(secrets=secrets or [])), events


def turn(index: int, **fields) -> TurnRecord:
    return TurnRecord(index=index, prompt="p", status="completed", ms=1, **fields)


def in_thread(fn) -> int:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()
    return thread.ident or 0


# --- the record's bookkeeping ------------------------------------------------------------


def test_turns_validations_artifacts_and_usage_join_the_record():
    rec, _ = recorder()
    rec.add_turn(turn(1))
    rec.add_validation(Validation(kind="command", name="ls", status="passed"))
    rec.add_artifact(Artifact(path="greet.py", bytes=3, sha256="ab"))
    rec.add_usage(Usage(input=10, output=2))
    rec.add_usage(Usage(input=5, output=1, reasoning=4))
    record = rec.record
    assert [t.index for t in record.turns] == [1]
    assert [v.name for v in record.validations] == ["ls"]
    assert [a.path for a in record.artifacts] == ["greet.py"]
    assert record.usage == Usage(input=15, output=3, reasoning=4)


def test_a_muted_body_writes_nothing_more_to_the_record():
    rec, events = recorder()

    def late_body() -> None:
        rec.muted.add(threading.get_ident())  # as Trial does once the body outlived its grace
        rec.add_turn(turn(1))
        rec.add_validation(Validation(kind="command", name="ls", status="passed"))
        rec.add_artifact(Artifact(path="greet.py", bytes=3, sha256="ab"))
        rec.progress("turn", "late")

    in_thread(late_body)
    assert rec.record.turns == [] and rec.record.validations == [] and rec.record.artifacts == []
    assert events == []
    rec.add_turn(turn(2))  # the trial's own thread still writes
    assert [t.index for t in rec.record.turns] == [2]


def test_a_new_diff_clears_the_cumulative_diffs_before_it():
    rec, _ = recorder()
    rec.add_turn(turn(1, diff="A", cumulative_diff="A"))
    rec.add_turn(turn(2, diff="B", cumulative_diff="AB"))
    rec.drop_cumulative_diffs()
    assert [(t.diff, t.cumulative_diff) for t in rec.record.turns] == [("A", ""), ("B", "")]


# --- the typed item in a progress event --------------------------------------------------


def test_a_progress_event_carries_the_stored_item_typed_and_redacted():
    rec, events = recorder(secrets=["hunter2-secret-value"])
    stored = rec.add_item(TrajectoryItem(kind="command", turn=1, command="echo hunter2-secret-value",
                                         exit_code=0, output="hunter2-secret-value\n"))
    assert stored is not None
    rec.progress("turn", "$ echo", index=1, item=stored)
    [event] = events
    assert isinstance(event.item, TrajectoryItem)
    assert event.item == stored and "hunter2" not in (event.item.command or "")


def test_an_item_event_is_stored_as_the_same_json_as_before():
    for stored in (STORED_TOOL_CALL, STORED_COMMAND):
        event = parse_event(stored)
        assert isinstance(event, PhaseProgress) and isinstance(event.item, TrajectoryItem)
        # Same keys, same order (and the number events carry now, 0: unnumbered): old stores still read.
        assert event.n == 0 and event.model_dump_json(exclude={"n"}) == stored
    item = TrajectoryItem(kind="fileChange", turn=3, path="greet.py", change="add")
    event = PhaseProgress(batch_id="b", trial_id="t", case_id="c", variant="v", trial=1,
                          phase="turn", message="add greet.py", item=item)
    assert parse_event(event.model_dump_json()).item == item
    assert event.model_dump(mode="json")["item"] == item.to_json()


def test_every_event_of_a_trial_is_numbered_in_the_order_it_reaches_the_sink():
    """The studio folds a trial from its stored events and the bridge's without doubling
    any: by these numbers, so they must follow the order the events were emitted in."""
    rec, events = recorder()
    gate = threading.Barrier(4)

    def emit_many() -> None:
        gate.wait()  # all four at once, as a body thread, a harness reader and the gateway may
        for k in range(250):
            rec.progress("turn", f"line {k}", index=1)

    with rec.phase("turn", index=1):
        threads = [threading.Thread(target=emit_many) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(events) == 1_002
    assert [event.n for event in events] == list(range(1, 1_003))
    assert parse_event(events[5].model_dump_json()).n == 6  # stored with its number
    assert parse_event(STORED_COMMAND).n == 0  # stored before events were numbered: 0, unnumbered


def test_a_progress_event_without_an_item_stays_without_one():
    event = PhaseProgress(batch_id="b", trial_id="t", case_id="c", variant="v", trial=1,
                          phase="setup", index=1, message="step 1: make")
    assert '"item":null' in event.model_dump_json()
    assert parse_event(event.model_dump_json()).item is None


# --- the empty record ----------------------------------------------------------------------


def test_a_planned_trial_has_one_empty_record():
    case = Case(id="writes_greet", file=Path("eval_greet.py"), line=3, body=lambda c: None,
                tags=["smoke", "py"])
    plan = TrialPlan(case=case, variant=Variant(name="fast", command="agent"), config=Config(),
                     batch_id="b_1", run_id="r_1", trial_id="t_1", trial=2, trigger="cli", owner="o")
    record = plan.empty_record()
    assert record == TrialRecord(id="t_1", batch_id="b_1", run_id="r_1", case_id="writes_greet",
                                 variant="fast", trial=2, trigger="cli", tags=["smoke", "py"])
    assert plan.empty_record(host="ssh://gpu").host == "ssh://gpu"
    record.tags.append("changed")
    assert case.tags == ["smoke", "py"]  # the record's tags are its own
