"""The recorded batch the studio tests share holds what they expect, and the checked-in copy
(tests/data/recorded.db, used when Docker is absent) is what the engine makes today.

To regenerate the checked-in copy after an intended change to what the engine records:
    PROCTOR_REGENERATE=1 pytest tests/studio/test_recorded.py
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.store import Store
from tests.studio.conftest import CHECKED_IN


def test_the_recorded_batch_has_every_kind_of_trial(records):
    assert records["writes_greet"].outcome == "pass"
    assert records["adds_numbers"].outcome == "fail"
    assert records["needs_a_lockfile"].outcome == "infra_error"
    assert records["sleeps"].failure.kind == "timeout"
    greet = records["writes_greet"]
    assert len(greet.turns) == 2 and "Binary files" in greet.turns[1].diff
    assert "[redacted]" in greet.trajectory[-1].text
    assert greet.validations[-1].kind == "judge" and greet.validations[-1].status == "passed"
    # 25,000 input tokens, none from cache: the engine warns (engine/usage.py).
    assert records["adds_numbers"].usage_warnings == [
        "nothing came from cache: 25,000 input tokens, none cached"]
    assert greet.usage_warnings == []


def _keys(value: Any, path: str = "") -> set[str]:
    """Every key path of a JSON value ("turns[].diff"), to notice a field added or gone."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{path}.{k}"} | _keys(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {p for v in value for p in _keys(v, f"{path}[]")}
    return set()


def shape(store_path: Path) -> dict[str, Any]:
    """What the studio tests rely on in a recorded batch, without ids, times or sizes that
    change from one run to the next. A slot span depends on scheduling and is left out."""
    store = Store(store_path)
    try:
        [batch] = store.list_batches()
        runs: dict[str, Any] = {}
        for run in batch.runs:
            [trial] = run.trials
            r = store.get_trial(trial.id)
            events = Counter(f"{type(e).__name__} {getattr(e, 'phase', '')}".strip()
                             for _, e in store.events(trial_id=trial.id)
                             if getattr(e, "phase", None) != "slot")
            runs[run.case_id] = {
                "variant": run.variant, "distribution": run.distribution.model_dump(),
                "outcome": r.outcome, "void_fields": r.void_fields,
                "failure": r.failure and (r.failure.kind, r.failure.where, r.failure.reason),
                "phases": [(s.phase, s.index, s.status) for s in r.phases if s.phase != "slot"],
                "turns": [(t.index, t.status, t.files_changed) for t in r.turns],
                "trajectory": [(i.kind, i.turn, i.truncated) for i in r.trajectory],
                "validations": [(v.kind, v.name, v.status) for v in r.validations],
                "artifacts": [a.path for a in r.artifacts], "egress": len(r.egress),
                "usage": r.usage.model_dump(), "usage_warnings": r.usage_warnings,
                "command_count": r.command_count, "events": dict(sorted(events.items())),
                # The source snapshot's keys are the suite's paths, which differ every run.
                "fields": sorted(_keys({**store.trial_json(trial.id), "source": None})),
            }
        return {"trigger": batch.trigger, "status": batch.status, "runs": runs}
    finally:
        store.close()


def test_the_checked_in_batch_is_what_the_engine_makes_now(docker_client, recorded, tmp_path):
    """The one Docker test behind tests/data/recorded.db: the batch made now, and the checked-in
    one, agree in every outcome, phase, turn, item, validation, event and record field."""
    if recorded.made_now is None:
        pytest.skip("PROCTOR_RECORDED=checked-in: no batch was made now to compare with")
    if os.environ.get("PROCTOR_REGENERATE") == "1":
        CHECKED_IN.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(recorded.made_now, CHECKED_IN)
    assert CHECKED_IN.is_file(), "no checked-in batch: run with PROCTOR_REGENERATE=1"
    # Copies: a Store opened on a file may migrate it and leaves -wal and -shm beside it.
    made = shape(shutil.copyfile(recorded.made_now, tmp_path / "made.db"))
    checked_in = shape(shutil.copyfile(CHECKED_IN, tmp_path / "checked-in.db"))
    assert checked_in == made, ("the checked-in batch is not what the engine makes now; if that "
                                "change is meant, regenerate it: PROCTOR_REGENERATE=1 pytest "
                                "tests/studio/test_recorded.py")
