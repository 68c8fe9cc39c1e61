"""The store: one SQLite file in WAL mode, written by one thread, read from any.

Writes are queued and return at once (see writer.py); reads open their own
connection and see what has been committed, so the studio can show a batch
live while the CLI runs it. A write that fails is reported at once to the
store's error listeners (a running batch stops on it); another process holding
the lock only delays writes. Reads never trust the file: a damaged row is left
out and counted, a damaged record is one StoreError. A record's trajectory items
and its turns' diffs are rows of their own (most of a big record): `get_trial`
puts them back in place; the studio reads the record without them
(`get_trial_outline`), lays the items out from a one-row summary
(`trajectory_layout`) and reads them a page at a time (`trajectory_items`).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

import platformdirs
from sqlalchemy import (
    Connection, Engine, Executable, LargeBinary, create_engine, delete, event, func, insert,
    literal_column, select, text, update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from pydantic import TypeAdapter, ValidationError

from ..events import Event, parse_event
from ..portable import ImportReport, Portable
from ..models import (
    BatchSummary, Failure, Note, RunSummary, TrajectoryItem, TrialRecord, TrialSummary, distribution,
)
from ..text import span_ms
from .tables import (
    SCHEMA_VERSION, TABLES, BatchRow, EventRow, Meta, NoteRow, RunRow, TrajectoryItemRow, TrajectoryLayoutRow,
    TrialRow, TurnDiffRow,
)
from . import search as _search
from .search import SearchHit
from .writer import BUSY_PATIENCE_S, Writer, is_busy
from .indexer import Indexer

BUSY_TIMEOUT_MS = 10_000  # another process (CLI and studio share a store) may hold the lock briefly
# The WAL is cut back to this size after each checkpoint, so one big commit does not
# leave a file that big behind; SQLite checkpoints every 1000 pages (4 MB) by itself.
JOURNAL_SIZE_LIMIT = 4 << 20
MAX_LIMIT = 2**62  # SQLite's LIMIT is a signed 64-bit integer
EVENT_PAGE = 2_000  # events read at a time by trial_events

_ITEMS = TypeAdapter(list[TrajectoryItem])
ItemRow = tuple[str, int, int, str, str]  # trial_id, position, turn, kind, json
LayoutRow = tuple[str, str, str]  # trial_id, runs, kinds
DiffRow = tuple[str, int, str | None, str | None]  # trial_id, turn's position, diff, cumulative_diff
_INSERT_ITEMS = ("INSERT INTO trajectory_item (trial_id, position, turn, kind, json) "
                 "VALUES (?, ?, ?, ?, ?)")
_INSERT_LAYOUT = "INSERT INTO trajectory_layout (trial_id, runs, kinds) VALUES (?, ?, ?)"
_INSERT_DIFFS = ("INSERT INTO turn_diff (trial_id, position, diff, cumulative_diff) "
                 "VALUES (?, ?, ?, ?)")
_DIFF_KEYS = ("diff", "cumulative_diff")
KIND_LETTER = {"message": "m", "command": "c", "toolCall": "t", "fileChange": "f"}
_KIND_OF_LETTER = {letter: kind for kind, letter in KIND_LETTER.items()} | {"?": ""}


@dataclass(frozen=True, slots=True)
class ItemRun:
    """Consecutive items of one turn: the first one's position and each one's kind."""

    turn: int
    start: int
    kinds: list[str]


def _item_rows(trial_id: str, items: list[Any]) -> list[ItemRow]:
    """A trajectory's items (JSON values) as rows; what a damaged one lacks reads as turn 0."""
    rows = []
    for position, item in enumerate(items):
        turn = item.get("turn") if isinstance(item, dict) else None
        kind = item.get("kind") if isinstance(item, dict) else None
        rows.append((trial_id, position, turn if isinstance(turn, int) and abs(turn) < 2**63 else 0,
                     kind if isinstance(kind, str) else "", json.dumps(item)))
    return rows


@dataclass(frozen=True, slots=True)
class _Parts:
    """A record as stored: the record column's JSON, with its trajectory and its turns' diffs
    left empty in their places, and the rows that hold those apart."""

    record: str
    items: list[ItemRow]
    diffs: list[DiffRow]


def _split_json(trial_id: str, data: dict[str, Any]) -> _Parts:
    """Take a record's (JSON's) items and diffs out of it, in place."""
    items = data.get("trajectory")
    if isinstance(items, list):
        data["trajectory"] = []
    diffs: list[DiffRow] = []
    turns = data.get("turns")
    for position, turn in enumerate(turns if isinstance(turns, list) else ()):
        texts = [turn.get(key) if isinstance(turn, dict) and isinstance(turn.get(key), str) else None
                 for key in _DIFF_KEYS]
        if any(texts):  # an absent key stays absent: None in its column
            diffs.append((trial_id, position, texts[0], texts[1]))
            turn.update({key: "" for key, text in zip(_DIFF_KEYS, texts) if text is not None})
    item_rows = _item_rows(trial_id, items if isinstance(items, list) else [])
    return _Parts(json.dumps(data), item_rows, diffs)


def _split(record: TrialRecord) -> _Parts:
    return _split_json(record.id, record.to_json())


def _layout_row(trial_id: str, rows: list[ItemRow]) -> LayoutRow:
    """The one-row summary of a trajectory (TrajectoryLayoutRow) from its item rows."""
    runs: list[list[int]] = []
    for _, position, turn, _, _ in rows:
        if runs and runs[-1][0] == turn:
            runs[-1][2] += 1
        else:
            runs.append([turn, position, 1])
    return trial_id, json.dumps(runs), "".join(KIND_LETTER.get(row[3], "?") for row in rows)


def _put_parts(conn: Connection, trial_id: str, parts: _Parts, replace: bool = True) -> None:
    """A record's items and diffs (the record column is its caller's)."""
    if replace:
        for table in (TrajectoryItemRow, TrajectoryLayoutRow, TurnDiffRow):
            conn.execute(delete(table).where(table.trial_id == trial_id))
    if parts.items:  # the driver's executemany: SQLAlchemy's insert took seconds per 100,000 items
        conn.exec_driver_sql(_INSERT_ITEMS, parts.items)
        conn.exec_driver_sql(_INSERT_LAYOUT, _layout_row(trial_id, parts.items))
    if parts.diffs:
        conn.exec_driver_sql(_INSERT_DIFFS, parts.diffs)


def _split_records(conn: Connection) -> None:
    """Schema 1 to 2: each record's items and diffs into the new tables, a record at a time (a
    damaged record is left as it was: it reads as damaged, alone)."""
    for table in (TrajectoryItemRow, TrajectoryLayoutRow, TurnDiffRow):
        table.__table__.create(conn)  # type: ignore[attr-defined]
    apart = text("CASE WHEN json_valid(record) THEN json_array_length(record, '$.trajectory') > 0 "
                 "OR json_array_length(record, '$.turns') > 0 END")
    for trial_id in list(conn.execute(select(TrialRow.id).where(apart)).scalars()):
        stored = conn.execute(select(TrialRow.record).where(TrialRow.id == trial_id)).scalar_one()
        try:
            data = json.loads(stored)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            parts = _split_json(trial_id, data)
            _put_parts(conn, trial_id, parts, replace=False)
            conn.execute(update(TrialRow).where(TrialRow.id == trial_id).values(record=parts.record))


def _add_notes(conn: Connection) -> None:
    """Schema 2 to 3: the notes and labels people put on trials and failure groups."""
    NoteRow.__table__.create(conn)  # type: ignore[attr-defined]


# Upgrades from version N to N+1, run in order on open.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _split_records, 2: _add_notes,
                                                       3: _search.create_index}  # indexer.py fills it


class StoreError(Exception):
    """A store problem a user can act on; the message is one sentence naming what to do."""


def default_store_path() -> Path:
    if env := os.environ.get("PROCTOR_STORE"):
        return Path(env).expanduser()
    return platformdirs.user_data_path("proctor") / "proctor.db"


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _open_engine(path: Path, begin: str) -> Engine:
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's begin event below own transactions instead of pysqlite's guesswork.
        dbapi_conn.isolation_level = None
        # Text that is not UTF-8 (a damaged file) reads as replacement characters, not an error.
        dbapi_conn.text_factory = _decode
        dbapi_conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")
        dbapi_conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)

    return engine


def _cause(exc: BaseException) -> str:
    return (str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0]


def write_error(path: Path, exc: BaseException) -> StoreError:
    """A failed write as one sentence that says what to do."""
    if isinstance(exc, StoreError):
        return exc
    cause = _cause(exc)
    code = getattr(getattr(exc, "orig", exc), "sqlite_errorcode", 0) & 0xFF
    if code == sqlite3.SQLITE_READONLY or "readonly" in cause:
        return StoreError(f"the store {path} is read-only ({cause}): make the file and its folder "
                          "writable, or pass --store with a writable path")
    if code == sqlite3.SQLITE_FULL or "disk is full" in cause:
        return StoreError(f"the disk holding the store {path} is full ({cause}): free some space, "
                          "or pass --store with a path on another disk")
    if is_busy(exc):
        return StoreError(f"the store {path} stayed locked by another process for "
                          f"{BUSY_PATIENCE_S:.0f}s: close the program holding it, or pass --store")
    return StoreError(f"writing to the store {path} failed ({cause}): check the file and its "
                      "folder, or pass --store")


def _patiently(attempt: Callable[[], Any]) -> Any:
    """Run `attempt`, retrying while another process holds the write lock (up to BUSY_PATIENCE_S)."""
    deadline = time.monotonic() + BUSY_PATIENCE_S
    while True:
        try:
            return attempt()
        except sa_exc.DBAPIError as exc:
            if not (is_busy(exc) and time.monotonic() < deadline):
                raise


def _summary_columns(record: TrialRecord, stored: str) -> dict[str, Any]:
    """The trial row's columns that mirror the record; `stored`: its JSON as `_split` made it."""
    failure = record.failure
    return dict(
        outcome=record.outcome,
        failure_kind=failure.kind if failure else None,
        failure_reason=failure.reason if failure else None,
        failure_where=failure.where if failure else None,
        command_count=record.command_count,
        duration_ms=span_ms(record.started_at, record.finished_at),
        started_at=record.started_at,
        finished_at=record.finished_at,
        tags=json.dumps(record.tags),
        tokens=record.usage.input + record.usage.output,
        record=stored,
    )


def _import_plan(conn: Connection, portable: Portable, report: ImportReport,
                 clash: list[str]) -> list[tuple[Executable | str, list[Any]]]:
    """The inserts that add what `portable` holds and the store lacks, counted in `report`;
    an id the store holds with other content goes into `clash` (and the plan is not run).
    A few statements whatever the size: one look per table for the ids the store holds, one
    insert per table (a statement per trial made 1,000 trials take 3.6 s)."""
    batches = _held(conn, BatchRow, [b.id for b in portable.batches],
                    BatchRow.trigger, BatchRow.started_at, BatchRow.config)
    runs = _held(conn, RunRow, [r.id for b in portable.batches for r in b.runs],
                 RunRow.batch_id, RunRow.case_id, RunRow.variant)
    trials = _held(conn, TrialRow, [t.id for b in portable.batches for t in b.trials], TrialRow.record)
    new_batches: list[dict[str, Any]] = []
    new_runs: list[dict[str, Any]] = []
    new_trials: list[dict[str, Any]] = []
    new_items: list[ItemRow] = []
    new_layouts: list[LayoutRow] = []
    new_diffs: list[DiffRow] = []
    new_events: list[dict[str, Any]] = []
    new_notes: list[dict[str, Any]] = []
    for batch in portable.batches:
        row = batches.get(batch.id)
        if row is None:
            report.batches_added += 1
            new_batches.append(dict(
                id=batch.id, trigger=batch.trigger, status=batch.status, owner="",
                started_at=batch.started_at, finished_at=batch.finished_at,
                heartbeat_at=batch.finished_at or batch.started_at, config=json.dumps(batch.config)))
        elif (row.trigger, row.started_at, _settings(json.loads(row.config or "{}"))) != \
                (batch.trigger, batch.started_at, _settings(batch.config)):
            clash.append(f"batch {batch.id}")
            return []
        for run in batch.runs:
            have = runs.get(run.id)
            if have is None:
                new_runs.append(dict(id=run.id, batch_id=batch.id, case_id=run.case_id,
                                     variant=run.variant, position=run.position))
            elif (have.batch_id, have.case_id, have.variant) != (batch.id, run.case_id, run.variant):
                clash.append(f"run {run.id}")
                return []
        for record in batch.trials:
            stored = trials.get(record.id)
            if stored is not None:
                if _whole(conn, record.id, stored.record) != record.to_json():
                    clash.append(f"trial {record.id}")
                    return []
                report.trials_same += 1
                continue
            report.trials_added += 1
            parts = _split(record)
            new_trials.append(dict(
                id=record.id, run_id=record.run_id, batch_id=record.batch_id,
                case_id=record.case_id, variant=record.variant, trial=record.trial, owner="",
                status="done", phase=None, **_summary_columns(record, parts.record)))
            if parts.items:
                new_items.extend(parts.items)
                new_layouts.append(_layout_row(record.id, parts.items))
            new_diffs.extend(parts.diffs)
            new_events.extend(dict(batch_id=batch.id, trial_id=record.id, type=e.type, at=e.at,
                                   json=e.model_dump_json()) for e in batch.events.get(record.id, ()))
        ours = {t.id for t in batch.trials}  # redaction may have changed a note's target
        new_notes.extend(n.model_dump() for n in batch.notes if n.target in ours)
    new_notes = _unnoted(conn, new_notes)  # a note the store has is a person's: it stays
    report.notes_added = len(new_notes)
    # executemany: one compiled statement a table (a multi-row VALUES compiled 240,000 binds).
    return [(insert(table), rows) for table, rows in ((BatchRow, new_batches), (RunRow, new_runs),
                                                      (TrialRow, new_trials), (EventRow, new_events),
                                                      (NoteRow, new_notes))
            if rows] + [(sql, rows) for sql, rows in ((_INSERT_ITEMS, new_items),
                                                      (_INSERT_LAYOUT, new_layouts),
                                                      (_INSERT_DIFFS, new_diffs)) if rows]


def _item_texts(conn: Connection, trial_id: str, start: int = 0,
                stop: int = MAX_LIMIT) -> list[str]:
    """The JSON of a trial's items from position `start` up to `stop`, in order."""
    # The driver's own rows: at 100,000 items SQLAlchemy's Row objects cost more than the query.
    return [row[0] for row in conn.exec_driver_sql(
        "SELECT json FROM trajectory_item WHERE trial_id = ? AND position >= ? AND position < ? "
        "ORDER BY position", (trial_id, start, stop)).cursor.fetchall()]


def _whole(conn: Connection, trial_id: str, stored: Any, items: bool = True,
           diffs: bool = True) -> Any:
    """The record as `to_json` gave it: the stored JSON with its items and its turns' diffs
    back in their places (those asked for)."""
    data = json.loads(stored) if isinstance(stored, (str, bytes)) else None
    if not isinstance(data, dict):
        return data
    if items and (texts := _item_texts(conn, trial_id)):
        data["trajectory"] = json.loads("[" + ",".join(texts) + "]")  # one parse for them all
    turns = data.get("turns")
    if diffs and isinstance(turns, list):
        for position, *texts in _diff_rows(conn, trial_id):
            if 0 <= position < len(turns) and isinstance(turns[position], dict):
                turns[position].update({k: t for k, t in zip(_DIFF_KEYS, texts) if t is not None})
    return data


def _diff_rows(conn: Connection, trial_id: str) -> list[tuple[int, str | None, str | None]]:
    """(position, diff, cumulative_diff) of a trial's turns, decoded by the driver itself: the
    store's replacing decoder would hold a bytes copy of a 20 MB diff beside its text, and
    that copy was the studio's peak memory. Text that is not UTF-8 takes the replacing way."""
    raw: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]
    sql = "SELECT position, diff, cumulative_diff FROM turn_diff WHERE trial_id = ?"
    try:
        raw.text_factory = str
        return raw.execute(sql, (trial_id,)).fetchall()
    except sqlite3.OperationalError:  # "Could not decode to UTF-8": a damaged file
        raw.text_factory = _decode
        return raw.execute(sql, (trial_id,)).fetchall()
    finally:
        raw.text_factory = _decode


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """A batch's config but its origin: the same log imported from another file name is the
    same batch."""
    return {k: v for k, v in config.items() if k != "origin"}


def _held(conn: Connection, table: Any, ids: list[str], *columns: Any) -> dict[str, Any]:
    """The rows of `table` among `ids` the store holds already, by id."""
    held: dict[str, Any] = {}
    for start in range(0, len(ids), _DELETE_CHUNK):
        chunk = ids[start: start + _DELETE_CHUNK]
        for row in conn.execute(select(table.id, *columns).where(table.id.in_(chunk))):
            held[row.id] = row
    return held


_DELETE_CHUNK = 500  # ids per statement, well under SQLite's limit on bound variables


def _unnoted(conn: Connection, notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `notes` whose targets carry no note in the store."""
    targets = [n["target"] for n in notes]
    held: set[str] = set()
    for start in range(0, len(targets), _DELETE_CHUNK):
        chunk = targets[start:start + _DELETE_CHUNK]
        held.update(conn.execute(select(NoteRow.target).where(
            NoteRow.target.in_(chunk))).scalars())  # type: ignore[attr-defined]
    return [n for n in notes if n["target"] not in held]


def _delete_batch_rows(conn: Connection, batch_ids: list[str]) -> int:
    """Every row of these batches, from every table that names a batch or one of its trials
    (a table added later included); returns how many batch rows there were."""
    deleted = 0
    for start in range(0, len(batch_ids), _DELETE_CHUNK):
        chunk = batch_ids[start:start + _DELETE_CHUNK]
        trials = select(TrialRow.id).where(TrialRow.batch_id.in_(chunk)).scalar_subquery()
        ids = conn.execute(select(TrialRow.id).where(TrialRow.batch_id.in_(chunk))).scalars().all()
        _search.guarded(conn, lambda: _search.unindex_trials(conn, ids))
        conn.execute(delete(NoteRow).where(NoteRow.target.in_(trials)))  # type: ignore[attr-defined]
        for table in TABLES:  # rows keyed by a trial only go before the trials they name
            if "trial_id" in table.c and "batch_id" not in table.c:
                conn.execute(delete(table).where(table.c.trial_id.in_(trials)))
        for table in TABLES:
            if "batch_id" in table.c:
                conn.execute(delete(table).where(table.c.batch_id.in_(chunk)))
        deleted += conn.execute(delete(BatchRow).where(BatchRow.id.in_(chunk))).rowcount
    return deleted


def _delete_trial_rows(conn: Connection, trial_ids: list[str]) -> int:
    """These trials and every row that names one of them; returns how many trials there were."""
    deleted = 0
    for start in range(0, len(trial_ids), _DELETE_CHUNK):
        chunk = trial_ids[start:start + _DELETE_CHUNK]
        _search.guarded(conn, lambda: _search.unindex_trials(conn, chunk))
        conn.execute(delete(NoteRow).where(NoteRow.target.in_(chunk)))  # type: ignore[attr-defined]
        for table in TABLES:  # every table that names a trial, a later one included
            if "trial_id" in table.c:
                conn.execute(delete(table).where(table.c.trial_id.in_(chunk)))
        deleted += conn.execute(delete(TrialRow).where(TrialRow.id.in_(chunk))).rowcount
    return deleted


def _trial_summary(row: Any, attempt: int = 1) -> TrialSummary:
    failure = None
    if row.failure_kind:
        failure = Failure(kind=row.failure_kind, reason=row.failure_reason or "",
                          where=row.failure_where)
    return TrialSummary(id=row.id, trial=row.trial, attempt=attempt, outcome=row.outcome,
                        failure=failure, command_count=row.command_count or 0,
                        duration_ms=row.duration_ms)


def _readable(build: Callable[[], Any], what: str, damaged: list[str]) -> Any:
    """`build()`, or None (with `what` noted in `damaged`) when the row's values do not fit."""
    try:
        return build()
    except (ValidationError, TypeError, ValueError):
        damaged.append(what)
        return None


def _parsed(rows: list[Any]) -> list[tuple[int, Event]]:
    events = []
    for seq, data in rows:
        try:
            events.append((seq, parse_event(data)))
        except (ValidationError, ValueError, TypeError, RecursionError):
            continue  # a damaged event row: the rest of the stream still plays
    return events


def _parse_version(value: Any) -> int | None:
    try:
        version = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return version if version >= 1 else None


class Store:
    """The Proctor store. Write methods queue and return; `flush()` waits for them."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder for the store {self.path} ({exc.strerror}): "
                "pass --store with a writable path"
            ) from None
        # IMMEDIATE: take the write lock at BEGIN, so busy_timeout applies instead of a
        # deadlock when another process's writer commits between our read and write.
        self._write_engine = _open_engine(self.path, "BEGIN IMMEDIATE")
        self._read_engine = _open_engine(self.path, "BEGIN")
        self._listeners: list[Callable[[StoreError], None]] = []
        self._listeners_lock = threading.Lock()
        try:
            _patiently(self._open)
        except (sqlite3.DatabaseError, sa_exc.DBAPIError) as exc:
            self._dispose()
            cause = _cause(exc)
            if "not a database" in cause or "malformed" in cause:
                raise StoreError(
                    f"{self.path} is not a Proctor store ({cause}): move it away or pass --store"
                ) from None
            if "readonly" in cause or "disk is full" in cause or is_busy(exc):
                raise write_error(self.path, exc) from None
            raise StoreError(
                f"cannot open the store {self.path} ({cause}): "
                "check the file and its folder, or pass --store"
            ) from None
        except StoreError:
            self._dispose()
            raise
        self._writer = Writer(self._write_engine, on_error=self._failed,
                              describe=lambda exc: write_error(self.path, exc))
        self._indexer = Indexer(self._writer)

    def _check(self, conn: Connection) -> int | None:
        """The schema version of the store in the file, None for an empty file; raise
        StoreError for anything that is not a store this Proctor can read."""
        names = set(conn.execute(
            text("SELECT name FROM sqlite_master WHERE type='table'")).scalars())
        if "meta" not in names:
            if names - {"sqlite_sequence"}:
                raise StoreError(
                    f"{self.path} is not a Proctor store (it holds other tables): "
                    "move it away or pass --store"
                )
            return None
        value = conn.execute(
            select(Meta.value).where(Meta.key == "schema_version")).scalar_one_or_none()
        version = _parse_version(value)
        if version is None:
            what = "no schema version" if value is None else f"an unreadable schema version {value!r}"
            raise StoreError(f"{self.path} has {what}: it is damaged or was not written by "
                             "Proctor; move it away or pass --store")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer Proctor (store schema {version}, this one "
                f"reads {SCHEMA_VERSION}): upgrade Proctor or pass --store"
            )
        return version

    def _open(self) -> None:
        """Check the file with a read; take the write lock only to create or upgrade it."""
        with self._read_engine.connect() as conn:
            version = self._check(conn)
        if version != SCHEMA_VERSION:
            with self._write_engine.begin() as conn:
                self._prepare(conn)

    def _prepare(self, conn: Connection) -> None:
        """Create the tables in a new file; upgrade the schema of an older one."""
        version = self._check(conn)  # again: another process may have done it meanwhile
        if version is None:
            for table in TABLES:
                table.create(conn)
            _search.create_index(conn)
            conn.execute(insert(Meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
            return
        for step in range(version, SCHEMA_VERSION):
            MIGRATIONS[step](conn)
        if version < SCHEMA_VERSION:
            conn.execute(update(Meta).where(Meta.key == "schema_version")
                         .values(value=str(SCHEMA_VERSION)))

    # -- lifecycle -------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Block until every write queued so far is committed; raise the writer's error if any."""
        if not self._writer.flush(timeout):
            raise StoreError(f"the store {self.path} did not finish writing within {timeout}s")
        self._raise_writer_error()

    def close(self) -> None:
        """Flush, stop the writer, fold the WAL back into the file and release it."""
        self._writer.close()
        if self._writer.started:
            self._checkpoint()
        self._dispose()
        self._raise_writer_error()

    def _checkpoint(self) -> None:
        """Best effort: copy the WAL into the file and truncate it, so none is left behind."""
        try:
            with self._write_engine.connect() as conn:
                # A studio reading the store may hold the WAL; do not wait for it.
                conn.exec_driver_sql("PRAGMA busy_timeout=200")
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        except sa_exc.DBAPIError:
            pass  # a full disk or a reader: the WAL keeps what is committed, SQLite reads it

    def check_writable(self) -> None:
        """One real write transaction, now: raise StoreError if nothing could be stored."""
        done = self._writer.submit(lambda conn: conn.execute(
            update(Meta).where(Meta.key == "schema_version").values(value=str(SCHEMA_VERSION))))
        if done is None:
            raise StoreError(f"the store {self.path} is closed")
        done.result()

    def add_error_listener(self, listener: Callable[[StoreError], None]) -> None:
        """Call `listener` (on the writer thread) as soon as a write fails."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_error_listener(self, listener: Callable[[StoreError], None]) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _failed(self, error: BaseException) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(write_error(self.path, error))

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dispose(self) -> None:
        self._write_engine.dispose()
        self._read_engine.dispose()

    def _raise_writer_error(self) -> None:
        if error := self._writer.take_error():
            raise write_error(self.path, error)

    def _put(self, item: Any) -> None:
        if not self._writer.put(item):
            raise StoreError(f"the store {self.path} is closed")

    def _execute(self, statement: Executable) -> None:
        self._put(lambda conn: conn.execute(statement))

    # -- writes (queued) -------------------------------------------------------------

    def create_batch(self, batch_id: str, trigger: str, owner: str, started_at: str,
                     config: dict[str, Any] | None = None) -> None:
        stmt = insert(BatchRow).values(
            id=batch_id, trigger=trigger, status="running", owner=owner,
            started_at=started_at, heartbeat_at=started_at, config=json.dumps(config or {}))
        self._execute(stmt)

    def finish_batch(self, batch_id: str, status: str, finished_at: str) -> None:
        stmt = update(BatchRow).where(BatchRow.id == batch_id).values(
            status=status, finished_at=finished_at)
        self._execute(stmt)

    def heartbeat(self, batch_id: str, at: str) -> None:
        stmt = update(BatchRow).where(BatchRow.id == batch_id).values(heartbeat_at=at)
        self._execute(stmt)

    def create_run(self, run_id: str, batch_id: str, case_id: str, variant: str,
                   position: int) -> None:
        stmt = insert(RunRow).values(id=run_id, batch_id=batch_id, case_id=case_id,
                                     variant=variant, position=position)
        self._execute(stmt)

    def create_trial(self, record: TrialRecord, owner: str) -> None:
        """A queued trial; its record is stored already so `show` works while it runs."""
        parts = _split(record)
        stmt = insert(TrialRow).values(
            id=record.id, run_id=record.run_id, batch_id=record.batch_id,
            case_id=record.case_id, variant=record.variant, trial=record.trial,
            owner=owner, status="queued", **_summary_columns(record, parts.record))

        def write(conn: Connection) -> None:
            conn.execute(stmt)
            _put_parts(conn, record.id, parts)

        self._put(write)

    def mark_trial_running(self, trial_id: str, started_at: str, host: str | None = None) -> None:
        """Running now; `host` names the cluster node it runs on, once the node has said so."""
        record = func.json_set(TrialRow.record, "$.started_at", started_at)
        if host is not None:
            record = func.json_set(record, "$.host", host)
        self._execute(update(TrialRow).where(TrialRow.id == trial_id).values(
            status="running", started_at=started_at, record=record))

    def set_note(self, note: Note) -> Future[None]:
        """Put `note` on its target, replacing the one there; one with neither text nor label
        takes the target's note away. Returns a future set when it is committed."""
        if not note.text.strip() and note.label is None:
            stmt: Executable = delete(NoteRow).where(NoteRow.target == note.target)  # type: ignore[arg-type]
        else:
            values = note.model_dump()
            stmt = sqlite_insert(NoteRow).values(**values).on_conflict_do_update(
                index_elements=["target"], set_={k: v for k, v in values.items() if k != "target"})
        done = self._writer.submit(lambda conn: conn.execute(stmt))
        if done is None:
            raise StoreError(f"the store {self.path} is closed")
        return done

    def notes(self, targets: Collection[str] | None = None) -> dict[str, Note]:
        """The notes on `targets` (every note when None), by target."""
        stmt = select(NoteRow.target, NoteRow.label, NoteRow.text, NoteRow.updated_at)
        if targets is not None:
            stmt = stmt.where(NoteRow.target.in_(list(targets)))  # type: ignore[attr-defined]
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        return {target: Note(target=target, label=label, text=text, updated_at=at)
                for target, label, text, at in rows}

    def labels(self) -> dict[str, int]:
        """Every label in use, with how many targets carry it, most used first."""
        with self._read() as conn:
            rows = conn.execute(select(NoteRow.label, func.count()).where(NoteRow.label.is_not(None))  # type: ignore[union-attr]
                                .group_by(NoteRow.label).order_by(func.count().desc(), NoteRow.label)).all()
        return {label: count for label, count in rows}

    def set_trial_phase(self, trial_id: str, phase: str) -> None:
        """The phase a running trial has entered, so a browser in any process can show it."""
        self._execute(update(TrialRow).where(TrialRow.id == trial_id).values(phase=phase))

    def save_trial(self, record: TrialRecord) -> Future[None]:
        """The final record; inserts the trial if it was never created (an imported one).
        Returns a future set when it is committed (or failed, with a StoreError)."""
        parts = _split(record)
        columns = _summary_columns(record, parts.record) | dict(status="done", phase=None)
        stmt = sqlite_insert(TrialRow).values(
            id=record.id, run_id=record.run_id, batch_id=record.batch_id,
            case_id=record.case_id, variant=record.variant, trial=record.trial,
            owner="", **columns,
        ).on_conflict_do_update(index_elements=["id"], set_=columns)

        def write(conn: Connection) -> None:
            # Out of the search index before its rows change; back in after its commit (indexer.py).
            _search.guarded(conn, lambda: _search.unindex_trials(conn, [record.id]))
            conn.execute(stmt)
            _put_parts(conn, record.id, parts)
            self._indexer.add([record.id])

        done = self._writer.submit(write)
        if done is None:
            raise StoreError(f"the store {self.path} is closed")
        return done

    def add_event(self, event: Event) -> None:
        self._put(dict(batch_id=event.batch_id, trial_id=getattr(event, "trial_id", None),
                       type=event.type, at=event.at, json=event.model_dump_json()))

    def delete_batches(self, ids: Collection[str]) -> int:
        """Delete these batches (full ids) and every row of them: runs, trials (whose records
        hold the artifacts) and events, in one transaction. Returns how many batches were
        there; a running one is refused with a StoreError and nothing is deleted."""
        return self._delete(
            ids, lambda conn, ids: list(conn.execute(select(BatchRow.id).where(
                BatchRow.id.in_(ids), BatchRow.status == "running")).scalars()),
            _delete_batch_rows,
            lambda batch: f"batch {batch} is running: stop it (Ctrl-C its `proctor run`, "
                          "or Stop in the studio) before deleting it")

    def delete_trials(self, ids: Collection[str]) -> int:
        """Delete these trials (full ids) with their events, in one transaction; their runs and
        batches stay. Returns how many were there; a trial not finished is refused with a
        StoreError and nothing is deleted."""
        return self._delete(
            ids, lambda conn, ids: list(conn.execute(select(TrialRow.id).where(
                TrialRow.id.in_(ids), TrialRow.status != "done")).scalars()),
            _delete_trial_rows,
            lambda trial: f"trial {trial} has not finished: stop it before deleting it")

    def _delete(self, ids: Collection[str], busy: Callable[[Connection, list[str]], list[str]],
                remove: Callable[[Connection, list[str]], int], why: Callable[[str], str]) -> int:
        """`remove(conn, ids)` in one transaction, unless `busy` names one still in use (checked
        in the writer, so none starts between the check and the delete): then nothing."""
        ids = sorted(set(ids))
        if not ids:
            return 0
        in_use: list[str] = []
        deleted = 0

        def write(conn: Connection) -> None:
            nonlocal deleted
            in_use[:] = busy(conn, ids)
            if not in_use:  # else not an error of the write: listeners would stop a running batch
                deleted = remove(conn, ids)

        done = self._writer.submit(write)
        if done is None:
            raise StoreError(f"the store {self.path} is closed")
        done.result()
        if in_use:
            raise StoreError(why(in_use[0]))
        return deleted

    def import_portable(self, portable: Portable) -> ImportReport:
        """Add batches read from a bundle or another tool's log, in one transaction: all of it
        or, when an id the store holds already has other content, nothing (a StoreError names
        the id). What the store holds with the same content is left as it is and counted."""
        report = ImportReport()
        clash: list[str] = []

        def write(conn: Connection) -> None:
            plan = _import_plan(conn, portable, report, clash)
            if clash:
                return  # not an error of the write: listeners would stop a running batch
            for statement, rows in plan:
                if isinstance(statement, str):  # the driver's own SQL: items and diffs
                    conn.exec_driver_sql(statement, rows)
                else:
                    conn.execute(statement, rows)
            self._indexer.add(row["id"] for statement, rows in plan
                              if getattr(getattr(statement, "table", None), "name", None) == "trial"
                              for row in rows)

        done = self._writer.submit(write)
        if done is None:
            raise StoreError(f"the store {self.path} is closed")
        done.result()
        if clash:
            raise StoreError(f"{clash[0]} is already in the store {self.path} with other content: "
                             "nothing was imported (delete it with `proctor rm`, or import into "
                             "another store with --store)")
        return report

    def close_trial_as_infra(self, trial_id: str, reason: str, finished_at: str) -> None:
        """Void a trial its process never finished (killed, crashed) with one reason."""
        failure = Failure(kind="infra", reason=reason)

        def write(conn: Connection) -> None:
            # Read in the writer, so a save_trial still queued ahead of us is seen.
            row = conn.execute(select(TrialRow.record, TrialRow.started_at)
                               .where(TrialRow.id == trial_id)).one_or_none()
            if row is None:
                return
            _search.guarded(conn, lambda: _search.unindex_trials(conn, [trial_id]))
            values: dict[str, Any] = dict(
                status="done", outcome="infra_error", failure_kind="infra",
                failure_reason=reason, failure_where=None, finished_at=finished_at,
                duration_ms=span_ms(row.started_at, finished_at))
            if row.record:
                try:
                    record = TrialRecord.model_validate(json.loads(row.record)).model_copy(
                        update=dict(outcome="infra_error", failure=failure, finished_at=finished_at))
                    values["record"] = json.dumps(record.to_json())
                except (ValueError, RecursionError):  # a damaged record: its columns still close
                    pass
            conn.execute(update(TrialRow).where(TrialRow.id == trial_id).values(**values))
            _search.guarded(conn, lambda: _search.reindex_trials(conn, [trial_id]))

        self._put(write)

    # -- reads (own connection, committed data) --------------------------------------

    def search_pending(self) -> int:
        """How many finished trials search cannot find yet (being indexed, or from before the
        index until `index_for_search` or `start_indexing`)."""
        with self._read() as conn:
            return _search.pending(conn)

    def start_indexing(self) -> None:
        """Index, in the writer's spare time, every finished trial search cannot find yet."""
        self._indexer.catch_up()

    @property
    def index_error(self) -> StoreError | None:
        """Why the search index could not be written by its last step (a full disk, a read-only
        store); None once a step commits. The records are stored either way."""
        error = self._indexer.error
        return None if error is None else write_error(self.path, error)

    def index_for_search(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Index every finished trial search cannot find yet, and wait; `progress(done, total)`
        is called about twice a second. StoreError when the index cannot be written (a full
        disk, a read-only store): what was indexed stays."""
        total = self.search_pending()
        if not total:
            return
        self._indexer.catch_up(waited=True)
        while self._indexer.busy:
            if progress is not None:
                left = self._indexer.left  # not a count over the store: that costs the indexing CPU
                progress(0 if left is None else max(0, total - left), total)
            time.sleep(0.5)
        self.flush()
        if (error := self.index_error) is not None:
            raise error
        if progress is not None:
            progress(total - self.search_pending(), total)

    def search(self, query: str, *, limit: int = 50, offset: int = 0,
               batch_id: str | None = None) -> list[SearchHit]:
        """A page of the texts that match `query` (search.py's language), newest trials first
        (the last saved first); raises search.QueryError for a query that cannot be run.
        What this process saved is found: its indexing is waited for."""
        if self._writer.started:  # what this process saved is indexed after its commit: wait
            self._writer.flush()
            while self._indexer.owes:  # a big import is indexed a step at a time
                self._writer.flush()
        with self._read() as conn:
            return _search.search(conn, query, limit=limit, offset=offset, batch_id=batch_id)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._read_engine.connect() as conn:
                yield conn
        except sa_exc.DBAPIError as exc:
            raise StoreError(f"cannot read the store {self.path} ({_cause(exc)}): "
                             "check the file, or pass --store") from None

    def _resolve(self, conn: Connection, table: Any, id_or_prefix: str, noun: str) -> str | None:
        """The full id for an id or a unique prefix of one."""
        if conn.execute(select(table.id).where(table.id == id_or_prefix)).first():
            return id_or_prefix
        where = table.id.startswith(id_or_prefix, autoescape=True)
        ids = conn.execute(select(table.id).where(where).limit(2)).scalars().all()
        if len(ids) > 1:
            count = conn.execute(select(func.count()).where(where)).scalar_one()
            raise StoreError(f"{noun} id {id_or_prefix!r} is ambiguous: it matches {count} "
                             f"{noun}s; give more of the id")
        return ids[0] if ids else None

    def trial_json(self, trial_id: str, items: bool = True,
                   diffs: bool = True) -> dict[str, Any] | None:
        """The stored record as it is, by id or unique prefix; None if there is no such trial.
        `items=False`: its trajectory left empty, its items not read; `diffs=False`: its turns'
        diffs left empty. A record that is not a JSON object is a StoreError naming the trial."""
        with self._read() as conn:
            full_id = self._resolve(conn, TrialRow, trial_id, "trial")
            if full_id is None:
                return None
            stored = conn.execute(select(TrialRow.record).where(TrialRow.id == full_id)).scalar()
            try:
                data = _whole(conn, full_id, stored, items, diffs)
            except (ValueError, RecursionError) as exc:
                raise self._damaged(full_id, str(exc).splitlines()[0][:120]) from None
        if not isinstance(data, dict):
            raise self._damaged(full_id, "no record" if data is None else "not a JSON object")
        return data

    def get_trial(self, trial_id: str) -> TrialRecord | None:
        return self._validated(trial_id, self.trial_json(trial_id))

    def get_trial_outline(self, trial_id: str, diffs: bool = False) -> TrialRecord | None:
        """The record without its trajectory items (an empty trajectory), which are neither
        read nor parsed: `trajectory_layout` and `trajectory_items` page them. Its turns'
        diffs are empty too unless `diffs`."""
        if diffs:
            return self._validated(trial_id, self.trial_json(trial_id, items=False))
        with self._read() as conn:
            full_id = self._resolve(conn, TrialRow, trial_id, "trial")
            if full_id is None:
                return None
            stored = conn.execute(select(func.cast(TrialRow.record, LargeBinary))
                                  .where(TrialRow.id == full_id)).scalar()
        if stored is not None:
            try:  # parsed and validated in one pass by pydantic's JSON reader: faster than json.loads
                return TrialRecord.model_validate_json(stored)
            except (ValidationError, RecursionError):
                pass  # the slower way below says what is wrong
        return self._validated(full_id, self.trial_json(full_id, items=False, diffs=False))

    def trajectory_layout(self, trial_id: str) -> list[ItemRun]:
        """A trial's items (full id) in brief, as runs of one turn in turn order (in the order
        stored within a turn), read from one short row: no item's JSON."""
        with self._read() as conn:
            row = conn.execute(select(TrajectoryLayoutRow.runs, TrajectoryLayoutRow.kinds)
                               .where(TrajectoryLayoutRow.trial_id == trial_id)).one_or_none()
        if row is None:
            return []
        try:
            # Sorting is stable: within a turn, runs stay in the order they were stored.
            runs = sorted(json.loads(row.runs), key=lambda run: run[0])
            kinds = [_KIND_OF_LETTER.get(letter, "") for letter in row.kinds]
            return [ItemRun(turn, start, kinds[start:start + count]) for turn, start, count in runs]
        except (ValueError, TypeError, RecursionError):
            raise self._damaged(trial_id, "the trajectory's layout") from None

    def trajectory_items(self, trial_id: str, start: int, stop: int) -> list[TrajectoryItem]:
        """A trial's items (full id) from position `start` up to `stop`."""
        with self._read() as conn:
            texts = _item_texts(conn, trial_id, max(start, 0), min(max(stop, 0), MAX_LIMIT))
        try:
            return _ITEMS.validate_json("[" + ",".join(texts) + "]")
        except (ValidationError, ValueError, RecursionError):
            raise self._damaged(trial_id, f"trajectory items {start} to {stop}") from None

    def _validated(self, trial_id: str, data: dict[str, Any] | None) -> TrialRecord | None:
        if data is None:
            return None
        try:
            return TrialRecord.model_validate(data)
        except (ValidationError, RecursionError) as exc:
            where = ""
            if isinstance(exc, ValidationError) and exc.errors():
                where = "field " + ".".join(map(str, exc.errors()[0]["loc"]))
            raise self._damaged(trial_id, where or "unreadable") from None

    def _damaged(self, trial_id: Any, why: str) -> StoreError:
        return StoreError(f"the record of trial {trial_id} in {self.path} is damaged ({why}): "
                          "restore the store from a backup, or run the trial again")

    def batch_summary(self, batch_id: str,
                      damaged: list[str] | None = None) -> BatchSummary | None:
        """One batch by id or unique prefix, its runs in order with their distributions.
        `damaged` collects the rows left out because they could not be read."""
        with self._read() as conn:
            full_id = self._resolve(conn, BatchRow, batch_id, "batch")
            if full_id is None:
                return None
            rows = conn.execute(select(BatchRow.__table__).where(BatchRow.id == full_id)).all()
            summaries = self._summaries(conn, rows, damaged)
        if not summaries:
            raise StoreError(f"batch {full_id} in {self.path} is damaged: restore the store "
                             "from a backup, or pass --store")
        return summaries[0]

    def list_batches(self, limit: int = 50, offset: int = 0,
                     damaged: list[str] | None = None) -> list[BatchSummary]:
        """A page of batches, newest first; `damaged` collects the rows left out."""
        limit, offset = min(max(limit, 0), MAX_LIMIT), min(max(offset, 0), MAX_LIMIT)
        with self._read() as conn:
            rows = conn.execute(select(BatchRow.__table__).order_by(BatchRow.started_at.desc(),
                                                          BatchRow.id.desc())
                                .limit(limit).offset(offset)).all()
            return self._summaries(conn, rows, damaged)

    def _summaries(self, conn: Connection, batch_rows: list[Any],
                   damaged: list[str] | None = None) -> list[BatchSummary]:
        """Summaries of these batches in three queries, reading no record JSON.
        A row whose columns do not fit the model is left out and named in `damaged`."""
        damaged = damaged if damaged is not None else []
        ids = [b.id for b in batch_rows]

        def _setting(config: str | None, key: str) -> str | None:
            """A text of the batch's config (an imported batch's origin sentence, the CI run's
            link); a file may have put anything there."""
            try:
                value = json.loads(config or "{}").get(key)
            except (ValueError, AttributeError, RecursionError):
                return None
            return value if isinstance(value, str) else None

        def _link(config: str | None) -> str | None:
            """A web link only: a bundle may hold any text, and the studio opens links."""
            link = _setting(config, "link")
            return link if link and re.fullmatch(r"https?://[!-~]{1,2000}", link) else None

        runs = conn.execute(select(RunRow.__table__).where(RunRow.batch_id.in_(ids))
                            .order_by(RunRow.position, RunRow.id)).all()
        trials = conn.execute(
            select(TrialRow.id, TrialRow.run_id, TrialRow.trial, TrialRow.outcome,
                   TrialRow.failure_kind, TrialRow.failure_reason, TrialRow.failure_where,
                   TrialRow.command_count, TrialRow.duration_ms)
            # A trial number's attempts (`--retry-void`) in the order they were created.
            .where(TrialRow.batch_id.in_(ids)).order_by(TrialRow.trial, literal_column("trial.rowid"))).all()
        trials_of: dict[str, list[TrialSummary]] = defaultdict(list)
        attempts: Counter[tuple[str, int]] = Counter()
        for row in trials:
            attempts[row.run_id, row.trial] += 1
            attempt = attempts[row.run_id, row.trial]
            if (summary := _readable(lambda: _trial_summary(row, attempt), f"trial {row.id}", damaged)):
                trials_of[row.run_id].append(summary)
        runs_of: dict[str, list[RunSummary]] = defaultdict(list)
        for run in runs:
            summaries = trials_of[run.id]
            if (one := _readable(lambda: RunSummary(
                    run_id=run.id, case_id=run.case_id, variant=run.variant,
                    distribution=distribution(summaries), trials=summaries),
                    f"run {run.id}", damaged)):
                runs_of[run.batch_id].append(one)
        batches = [_readable(lambda: BatchSummary(
            batch_id=b.id, trigger=b.trigger, status=b.status, started_at=b.started_at,
            finished_at=b.finished_at, runs=runs_of[b.id], origin=_setting(b.config, "origin"),
            link=_link(b.config)),
            f"batch {b.id}", damaged)
            for b in batch_rows]
        return [b for b in batches if b is not None]

    def last_event_seq(self) -> int:
        """The newest event's seq (0 when none), so a reader can follow only what comes next."""
        with self._read() as conn:
            return conn.execute(select(func.max(EventRow.seq))).scalar() or 0

    def events(self, *, trial_id: str | None = None, batch_id: str | None = None,
               after_seq: int = 0, limit: int = 10_000,
               exclude_batches: Collection[str] = ()) -> list[tuple[int, Event]]:
        """Events in order after `after_seq`; page with the last seq returned.
        `exclude_batches`: left out in SQL, so a reader never parses what it already has."""
        return _parsed(self._event_rows(trial_id, batch_id, after_seq, limit, exclude_batches))

    def trial_events(self, trial_id: str, page: int = EVENT_PAGE) -> Iterator[Event]:
        """All of a trial's events in order, however many, read a page at a time."""
        after_seq = 0
        while True:
            rows = self._event_rows(trial_id, None, after_seq, page, ())
            yield from (event for _, event in _parsed(rows))
            if len(rows) < page:
                return
            after_seq = rows[-1][0]  # a damaged row's seq too: it ends no page early

    def _event_rows(self, trial_id: str | None, batch_id: str | None, after_seq: int, limit: int,
                    exclude_batches: Collection[str]) -> list[Any]:
        stmt = select(EventRow.seq, EventRow.data).where(EventRow.seq > after_seq)
        if exclude_batches:
            stmt = stmt.where(EventRow.batch_id.not_in(list(exclude_batches)))  # type: ignore[attr-defined]
        if trial_id is not None:
            stmt = stmt.where(EventRow.trial_id == trial_id)
        if batch_id is not None:
            stmt = stmt.where(EventRow.batch_id == batch_id)
        with self._read() as conn:
            return list(conn.execute(stmt.order_by(EventRow.seq).limit(min(limit, MAX_LIMIT))).all())

    def unfinished_trials(self) -> list[tuple[str, str, str]]:
        """(trial_id, batch_id, owner) of every trial not done, for the sweep at start."""
        with self._read() as conn:
            rows = conn.execute(select(TrialRow.id, TrialRow.batch_id, TrialRow.owner)
                                .where(TrialRow.status != "done").order_by(TrialRow.id)).all()
        return [tuple(row) for row in rows]  # type: ignore[misc]

    def silent_batches(self, before: str) -> list[str]:
        """Running batches with no heartbeat (nor start) since `before` (ISO time)."""
        with self._read() as conn:
            rows = conn.execute(select(BatchRow.id).where(
                BatchRow.status == "running",
                func.coalesce(BatchRow.heartbeat_at, BatchRow.started_at) < before)).all()
        return [row[0] for row in rows]

    def running_batches(self) -> list[tuple[str, str]]:
        """(batch_id, owner) of every batch still marked running."""
        with self._read() as conn:
            rows = conn.execute(select(BatchRow.id, BatchRow.owner)
                                .where(BatchRow.status == "running")
                                .order_by(BatchRow.started_at)).all()
        return [tuple(row) for row in rows]  # type: ignore[misc]
