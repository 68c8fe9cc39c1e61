"""`c`, the eval body's context, stands on its own runtime, not on the trial (no Docker).

The Docker tests (test_trial_docker.py) drive `c` through a real sandbox; here a
stand-in sandbox shows only that the context needs nothing of `Trial`.
"""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

import engine.context
from engine.context import Context, TrialAborted, TrialRuntime
from engine.models import TrialRecord
from engine.recorder import Recorder
from engine.redact import Redactor
from engine.sandbox.container import ExecOutput
from engine.sandbox.tree import Tree


def test_the_context_module_never_imports_the_trial_runner():
    tree = ast.parse(Path(engine.context.__file__).read_text())
    imported = {(node.level, node.module) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {(0, alias.name) for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert not {m for m in imported if m in ((1, "trial"), (0, "engine.trial"))}


class ExecOnly:
    """A sandbox that answers exec with a fixed result (a unit-test stand-in)."""

    def __init__(self, exit_code: int):
        self.exit_code = exit_code
        self.commands: list[tuple[str, float]] = []

    def exec(self, command: str, timeout: float) -> ExecOutput:
        self.commands.append((command, timeout))
        return ExecOutput(exit_code=self.exit_code, stdout="out\n", stderr="", ms=7)


def runtime(sandbox, deadline_in: float = 60) -> tuple[TrialRuntime, list]:
    record = TrialRecord(id="t_1", batch_id="b_1", run_id="r_1", case_id="c", variant="v",
                         trial=1, trigger="api")
    events: list = []
    rec = Recorder(record, events.append, Redactor())

    def no_turns(*args):
        raise AssertionError("no turn in this test")

    return TrialRuntime(sandbox=sandbox, recorder=rec, aborted=threading.Event(),  # type: ignore[arg-type]
                        deadline=time.monotonic() + deadline_in, snapshot=Tree(), judge=None,
                        run_turn=no_turns), events


def test_a_check_is_recorded_through_the_runtime_recorder():
    sandbox = ExecOnly(exit_code=3)
    rt, events = runtime(sandbox, deadline_in=30)
    context = Context(rt)
    result = context.exec("pytest -q", timeout="2m")
    assert result.exit_code == 3 and result.stdout == "out\n"
    assert [e.type for e in events] == ["phase_started"]  # open until its matchers have run
    result.to_succeed()
    context.end_check()  # the body moved on
    [(command, timeout)] = sandbox.commands
    assert command == "pytest -q" and 29 < timeout <= 30  # the trial's deadline bounds the check's own
    [validation] = rt.recorder.record.validations
    assert validation.name == "pytest -q" and validation.evidence["exit_code"] == 3
    assert [(s.phase, s.index, s.status) for s in rt.recorder.record.phases] == [("check", 1, "failed")]
    assert [e.type for e in events] == ["phase_started", "phase_ended"] and events[1].status == "failed"
    assert events[1].summary.endswith("· failed: exited 3")


def test_a_context_whose_trial_was_aborted_ends_the_body():
    sandbox = ExecOnly(exit_code=0)
    rt, events = runtime(sandbox)
    rt.aborted.set()
    with pytest.raises(TrialAborted):
        Context(rt).exec("ls")
    assert sandbox.commands == [] and events == []
