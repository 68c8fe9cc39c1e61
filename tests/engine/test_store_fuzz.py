"""Hypothesis: whatever a store's rows hold (a damaged file, another tool's writes, an old
bug), `proctor ls`, `ls --json`, `show`, `show --json` and the studio's browser queries
answer or refuse in one line, and never raise a traceback.

Each example copies a small valid store and overwrites some columns of its batch, run,
trial and event rows with arbitrary SQLite values (NULL, integers up to 64 bits, floats
with NaN and infinities, text with lone surrogates, blobs) or the record with arbitrary
or deeply nested JSON.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.cli import main
from engine.events import PhaseProgress, PhaseStarted
from engine.models import Failure, PhaseSpan, TrialRecord, TurnRecord, Usage, Validation
from engine.store import Store, StoreError
from engine.store.browse import (
    SORT_KEYS, BrowseFilter, Sort, batches_page, change_stamp, count_batches, filter_options,
    locate, runs_of, trial_item, trials_of,
)

pytestmark = pytest.mark.slow
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

COLUMNS = {
    "batch": ["id", "trigger", "status", "owner", "started_at", "finished_at", "heartbeat_at", "config"],
    "run": ["id", "batch_id", "case_id", "variant", "position"],
    "trial": ["id", "run_id", "batch_id", "case_id", "variant", "trial", "status", "outcome",
              "failure_kind", "failure_reason", "failure_where", "command_count", "duration_ms",
              "started_at", "finished_at", "tags", "tokens", "phase", "record"],
    "event": ["batch_id", "trial_id", "type", "at", "json"],
}
VALID_WORDS = ["pass", "fail", "infra_error", "skipped", "running", "done", "queued", "finished",
               "interrupted", "assertion", "infra", "cli", "studio", "b_1", "r_1", "t_1", "[]",
               '["smoke"]', "2026-11-29T17:40:47.120Z"]

sql_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(VALID_WORDS),
    st.sampled_from(["\ud800", "\x00", "{", "[1, 2]", "null", "NaN", "1e999", "🙂" * 10]),
    st.binary(max_size=16),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _record() -> dict[str, Any]:
    return TrialRecord(
        id="t_1", batch_id="b_1", run_id="r_1", case_id="writes_greet", variant="scripted",
        trial=1, trigger="cli", outcome="fail", started_at="2026-11-29T17:40:47.120Z",
        finished_at="2026-11-29T17:40:55.620Z", command_count=1, usage=Usage(input=10, output=2),
        failure=Failure(kind="assertion", reason="exit 1", where="check 1 of 1"),
        phases=[PhaseSpan(phase="image", status="ok", start_ms=0, end_ms=33, detail="cache hit"),
                PhaseSpan(phase="turn", status="ok", start_ms=40, end_ms=90, index=1)],
        turns=[TurnRecord(index=1, prompt="hi", status="completed", ms=50)],
        validations=[Validation(kind="command", name="pytest -q", status="failed")],
    ).to_json()


RECORD = _record()


@st.composite
def records(draw) -> Any:
    """A stored record column: the valid one with fields replaced or removed, or anything."""
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "text", "deep"]))
    if kind == "json":
        return json.dumps(draw(json_values))
    if kind == "text":
        return draw(sql_values)
    if kind == "deep":
        depth = draw(st.integers(min_value=100, max_value=3000))
        opener = draw(st.sampled_from(["[", '{"phases": ']))
        return json.dumps({**RECORD, "phases": None}).replace(
            '"phases": null', '"phases": ' + opener * depth + "1" + ("]" if opener == "[" else "}") * depth)
    data = json.loads(json.dumps(RECORD))
    for key in draw(st.lists(st.sampled_from(sorted(data)), max_size=5)):
        if draw(st.booleans()):
            data.pop(key, None)
        else:
            data[key] = draw(json_values)
    phases = data.get("phases")
    for span in phases if isinstance(phases, list) else []:  # a drawn value may stand there
        if isinstance(span, dict) and draw(st.booleans()):
            span[draw(st.sampled_from(["phase", "status", "start_ms", "end_ms", "index", "detail"]))] = \
                draw(json_values)
    return json.dumps(data)


@st.composite
def damage(draw) -> list[tuple[str, str, Any]]:
    """(table, column, value) overwrites."""
    changes = []
    for table, columns in COLUMNS.items():
        for column in draw(st.lists(st.sampled_from(columns), max_size=3, unique=True)):
            changes.append((table, column, draw(sql_values)))
    if draw(st.booleans()):
        changes.append(("trial", "record", draw(records())))
    return changes


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A valid store: one batch, one run, two trials (one finished, one running), events."""
    path = tmp_path_factory.mktemp("fuzz-template") / "proctor.db"
    record = TrialRecord.model_validate(RECORD)
    with Store(path) as store:
        store.create_batch("b_1", "cli", "", "2026-11-29T17:40:47.120Z")
        store.create_run("r_1", "b_1", "writes_greet", "scripted", 0)
        store.create_trial(record.model_copy(update=dict(id="t_2", trial=2, outcome=None, failure=None)), "")
        store.mark_trial_running("t_2", "2026-11-29T17:40:48.000Z")
        store.save_trial(record)
        ids = dict(batch_id="b_1", trial_id="t_1", case_id="writes_greet", variant="scripted", trial=1)
        store.add_event(PhaseStarted(**ids, phase="image"))
        store.add_event(PhaseProgress(**ids, phase="turn", index=1, message="hi"))
        store.finish_batch("b_1", "finished", "2026-11-29T17:41:00.000Z")
    return path


def damaged_copy(template: Path, folder: Path, changes: list[tuple[str, str, Any]]) -> Path:
    path = folder / "proctor.db"
    shutil.copy(template, path)
    with sqlite3.connect(path) as conn:
        for table, column, value in changes:
            expression = "?"
            if isinstance(value, str) and not value.isascii():
                # As raw bytes, so a lone surrogate lands as the invalid UTF-8 a damaged file holds.
                value, expression = value.encode("utf-8", "surrogatepass"), "CAST(? AS TEXT)"
            try:
                conn.execute(f"UPDATE {table} SET {column} = {expression}", (value,))
            except sqlite3.IntegrityError:
                pass  # NOT NULL or a duplicate key: SQLite itself refuses that damage
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, code, err)
    assert len(err.strip().splitlines()) <= 1, (argv, err)
    return code, out, err


def every_cli_reading(capsys, path: Path) -> None:
    store = ["--store", str(path)]
    for argv in (["ls"], ["ls", "--batch", "b_1", "--json"], ["show", "t_2"], ["show", "t_1", "--json"]):
        code, out, _ = run_cli(capsys, *argv, *store)
        if code == 0 and "--json" in argv:
            json.loads(out)


filters = st.builds(
    BrowseFilter,
    outcomes=st.frozensets(st.sampled_from(["pass", "fail", "infra_error", "skipped", "running"])),
    failure_kinds=st.frozensets(st.sampled_from(["assertion", "infra"])),
    cases=st.frozensets(st.sampled_from(["writes_greet", "other"])),
    tags=st.frozensets(st.sampled_from(["smoke", "\x00"])),
    text=st.sampled_from(["", "greet", "%_\\"]),
)
sorts = st.builds(Sort, st.sampled_from(SORT_KEYS), st.booleans())


def every_browser_query(path: Path, flt: BrowseFilter, sort: Sort) -> None:
    with Store(path) as store:
        count_batches(store, flt)
        batches_page(store, flt, sort)
        runs_of(store, "b_1", flt, sort)
        trials_of(store, "r_1", flt, sort)
        trial_item(store, "t_1")
        filter_options(store)
        locate(store, "t_")
        change_stamp(store)
        store.events(batch_id="b_1")
        for trial_id in ("t_1", "t_2"):
            try:
                store.get_trial(trial_id)
            except StoreError as e:
                assert "\n" not in str(e)


@FUZZ
@given(changes=damage())
def test_damaged_rows_never_traceback_in_the_cli(template, capsys, changes):
    with tempfile.TemporaryDirectory() as folder:
        path = damaged_copy(template, Path(folder), changes)
        every_cli_reading(capsys, path)


@FUZZ
@given(changes=damage(), flt=filters, sort=sorts)
def test_damaged_rows_never_crash_the_browser_queries(template, changes, flt, sort):
    with tempfile.TemporaryDirectory() as folder:
        every_browser_query(damaged_copy(template, Path(folder), changes), flt, sort)


@settings(FUZZ, max_examples=40)
@given(record=records())
def test_damaged_records_never_traceback_in_show(template, capsys, record):
    with tempfile.TemporaryDirectory() as folder:
        path = damaged_copy(template, Path(folder), [("trial", "record", record)])
        for argv in (["show", "t_1"], ["show", "t_1", "--json"]):
            code, out, err = run_cli(capsys, *argv, "--store", str(path))
            if code != 0:
                assert "t_1" in err  # the one line names the trial
            elif "--json" in argv:
                json.loads(out)  # the record as stored, printed as JSON
            else:
                assert "t_1" in out.splitlines()[0]
