"""The store: one SQLite file in WAL mode, written by one thread, read from any.

Writes are queued and return at once (see writer.py); reads open their own
connection and see what has been committed, so the studio can show a batch
live while the CLI runs it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import defaultdict
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

import platformdirs
from sqlalchemy import (
    Connection, Engine, Executable, create_engine, event, func, insert, select, text, update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ..events import Event, parse_event
from ..models import (
    BatchSummary, Failure, RunSummary, TrialRecord, TrialSummary, distribution,
)
from .tables import SCHEMA_VERSION, TABLES, BatchRow, EventRow, Meta, RunRow, TrialRow
from .writer import Writer

BUSY_TIMEOUT_MS = 10_000  # another process (CLI and studio share a store) may hold the lock briefly

# Upgrades from version N to N+1, run in order on open; none yet.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {}


class StoreError(Exception):
    """A store problem a user can act on; the message is one sentence naming what to do."""


def default_store_path() -> Path:
    if env := os.environ.get("PROCTOR_STORE"):
        return Path(env).expanduser()
    return platformdirs.user_data_path("proctor") / "proctor.db"


def _open_engine(path: Path, begin: str) -> Engine:
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's begin event below own transactions instead of pysqlite's guesswork.
        dbapi_conn.isolation_level = None
        dbapi_conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)

    return engine


def _cause(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).splitlines()[0]


def _duration_ms(started_at: str | None, finished_at: str | None) -> int | None:
    if not (started_at and finished_at):
        return None
    try:
        delta = datetime.fromisoformat(finished_at) - datetime.fromisoformat(started_at)
    except ValueError:
        return None
    return int(delta.total_seconds() * 1000)


def _summary_columns(record: TrialRecord) -> dict[str, Any]:
    """The trial row's columns that mirror the record."""
    failure = record.failure
    return dict(
        outcome=record.outcome,
        failure_kind=failure.kind if failure else None,
        failure_reason=failure.reason if failure else None,
        failure_where=failure.where if failure else None,
        command_count=record.command_count,
        duration_ms=_duration_ms(record.started_at, record.finished_at),
        started_at=record.started_at,
        finished_at=record.finished_at,
        tags=json.dumps(record.tags),
        tokens=record.usage.input + record.usage.output,
        record=json.dumps(record.to_json()),
    )


def _trial_summary(row: Any) -> TrialSummary:
    failure = None
    if row.failure_kind:
        failure = Failure(kind=row.failure_kind, reason=row.failure_reason or "",
                          where=row.failure_where)
    return TrialSummary(id=row.id, trial=row.trial, outcome=row.outcome, failure=failure,
                        command_count=row.command_count, duration_ms=row.duration_ms)


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
        try:
            with self._write_engine.begin() as conn:
                self._prepare(conn)
        except (sqlite3.DatabaseError, sa_exc.DBAPIError) as exc:
            self._dispose()
            cause = _cause(exc)
            if "not a database" in cause or "malformed" in cause:
                raise StoreError(
                    f"{self.path} is not a Proctor store ({cause}): move it away or pass --store"
                ) from None
            raise StoreError(
                f"cannot open the store {self.path} ({cause}): "
                "check the file and its folder, or pass --store"
            ) from None
        except StoreError:
            self._dispose()
            raise
        self._writer = Writer(self._write_engine)

    def _prepare(self, conn: Connection) -> None:
        """Create the tables in a new file; check and upgrade the schema of an existing one."""
        names = set(conn.execute(
            text("SELECT name FROM sqlite_master WHERE type='table'")).scalars())
        if "meta" not in names:
            if names - {"sqlite_sequence"}:
                raise StoreError(
                    f"{self.path} is not a Proctor store (it holds other tables): "
                    "move it away or pass --store"
                )
            for table in TABLES:
                table.create(conn)
            conn.execute(insert(Meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
            return
        version = int(conn.execute(
            select(Meta.value).where(Meta.key == "schema_version")).scalar_one_or_none() or 0)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer Proctor (store schema {version}, this one "
                f"reads {SCHEMA_VERSION}): upgrade Proctor or pass --store"
            )
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
        """Flush, stop the writer and release the file."""
        self._writer.close()
        self._dispose()
        self._raise_writer_error()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dispose(self) -> None:
        self._write_engine.dispose()
        self._read_engine.dispose()

    def _raise_writer_error(self) -> None:
        if error := self._writer.take_error():
            raise StoreError(f"writing to the store {self.path} failed: {_cause(error)}") from error

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
        stmt = insert(TrialRow).values(
            id=record.id, run_id=record.run_id, batch_id=record.batch_id,
            case_id=record.case_id, variant=record.variant, trial=record.trial,
            owner=owner, status="queued", **_summary_columns(record))
        self._execute(stmt)

    def mark_trial_running(self, trial_id: str, started_at: str) -> None:
        self._execute(update(TrialRow).where(TrialRow.id == trial_id).values(
            status="running", started_at=started_at,
            record=func.json_set(TrialRow.record, "$.started_at", started_at)))

    def set_trial_phase(self, trial_id: str, phase: str) -> None:
        """The phase a running trial has entered, so a browser in any process can show it."""
        self._execute(update(TrialRow).where(TrialRow.id == trial_id).values(phase=phase))

    def save_trial(self, record: TrialRecord) -> None:
        """The final record; inserts the trial if it was never created (an imported one)."""
        columns = _summary_columns(record) | dict(status="done", phase=None)
        stmt = sqlite_insert(TrialRow).values(
            id=record.id, run_id=record.run_id, batch_id=record.batch_id,
            case_id=record.case_id, variant=record.variant, trial=record.trial,
            owner="", **columns,
        ).on_conflict_do_update(index_elements=["id"], set_=columns)
        self._execute(stmt)

    def add_event(self, event: Event) -> None:
        self._put(dict(batch_id=event.batch_id, trial_id=getattr(event, "trial_id", None),
                       type=event.type, at=event.at, json=event.model_dump_json()))

    def close_trial_as_infra(self, trial_id: str, reason: str, finished_at: str) -> None:
        """Void a trial its process never finished (killed, crashed) with one reason."""
        failure = Failure(kind="infra", reason=reason)

        def write(conn: Connection) -> None:
            # Read in the writer, so a save_trial still queued ahead of us is seen.
            row = conn.execute(select(TrialRow.record, TrialRow.started_at)
                               .where(TrialRow.id == trial_id)).one_or_none()
            if row is None:
                return
            values: dict[str, Any] = dict(
                status="done", outcome="infra_error", failure_kind="infra",
                failure_reason=reason, failure_where=None, finished_at=finished_at,
                duration_ms=_duration_ms(row.started_at, finished_at))
            if row.record:
                record = TrialRecord.model_validate(json.loads(row.record)).model_copy(
                    update=dict(outcome="infra_error", failure=failure, finished_at=finished_at))
                values["record"] = json.dumps(record.to_json())
            conn.execute(update(TrialRow).where(TrialRow.id == trial_id).values(**values))

        self._put(write)

    # -- reads (own connection, committed data) --------------------------------------

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

    def trial_json(self, trial_id: str) -> dict[str, Any] | None:
        """The stored record as it is, by id or unique prefix."""
        with self._read() as conn:
            full_id = self._resolve(conn, TrialRow, trial_id, "trial")
            if full_id is None:
                return None
            stored = conn.execute(select(TrialRow.record).where(TrialRow.id == full_id)).scalar()
        return json.loads(stored) if stored else None

    def get_trial(self, trial_id: str) -> TrialRecord | None:
        data = self.trial_json(trial_id)
        return TrialRecord.model_validate(data) if data is not None else None

    def batch_summary(self, batch_id: str) -> BatchSummary | None:
        """One batch by id or unique prefix, its runs in order with their distributions."""
        with self._read() as conn:
            full_id = self._resolve(conn, BatchRow, batch_id, "batch")
            if full_id is None:
                return None
            rows = conn.execute(select(BatchRow.__table__).where(BatchRow.id == full_id)).all()
            return self._summaries(conn, rows)[0]

    def list_batches(self, limit: int = 50, offset: int = 0) -> list[BatchSummary]:
        """A page of batches, newest first."""
        with self._read() as conn:
            rows = conn.execute(select(BatchRow.__table__).order_by(BatchRow.started_at.desc(),
                                                          BatchRow.id.desc())
                                .limit(limit).offset(offset)).all()
            return self._summaries(conn, rows)

    def _summaries(self, conn: Connection, batch_rows: list[Any]) -> list[BatchSummary]:
        """Summaries of these batches in three queries, reading no record JSON."""
        ids = [b.id for b in batch_rows]
        runs = conn.execute(select(RunRow.__table__).where(RunRow.batch_id.in_(ids))
                            .order_by(RunRow.position, RunRow.id)).all()
        trials = conn.execute(
            select(TrialRow.id, TrialRow.run_id, TrialRow.trial, TrialRow.outcome,
                   TrialRow.failure_kind, TrialRow.failure_reason, TrialRow.failure_where,
                   TrialRow.command_count, TrialRow.duration_ms)
            .where(TrialRow.batch_id.in_(ids)).order_by(TrialRow.trial, TrialRow.id)).all()
        trials_of: dict[str, list[TrialSummary]] = defaultdict(list)
        for row in trials:
            trials_of[row.run_id].append(_trial_summary(row))
        runs_of: dict[str, list[RunSummary]] = defaultdict(list)
        for run in runs:
            summaries = trials_of[run.id]
            runs_of[run.batch_id].append(RunSummary(
                run_id=run.id, case_id=run.case_id, variant=run.variant,
                distribution=distribution(summaries), trials=summaries))
        return [BatchSummary(batch_id=b.id, trigger=b.trigger, status=b.status,
                             started_at=b.started_at, finished_at=b.finished_at,
                             runs=runs_of[b.id]) for b in batch_rows]

    def last_event_seq(self) -> int:
        """The newest event's seq (0 when none), so a reader can follow only what comes next."""
        with self._read() as conn:
            return conn.execute(select(func.max(EventRow.seq))).scalar() or 0

    def events(self, *, trial_id: str | None = None, batch_id: str | None = None,
               after_seq: int = 0, limit: int = 10_000,
               exclude_batches: Collection[str] = ()) -> list[tuple[int, Event]]:
        """Events in order after `after_seq`; page with the last seq returned.
        `exclude_batches`: left out in SQL, so a reader never parses what it already has."""
        stmt = select(EventRow.seq, EventRow.data).where(EventRow.seq > after_seq)
        if exclude_batches:
            stmt = stmt.where(EventRow.batch_id.not_in(list(exclude_batches)))  # type: ignore[attr-defined]
        if trial_id is not None:
            stmt = stmt.where(EventRow.trial_id == trial_id)
        if batch_id is not None:
            stmt = stmt.where(EventRow.batch_id == batch_id)
        with self._read() as conn:
            rows = conn.execute(stmt.order_by(EventRow.seq).limit(limit)).all()
        return [(seq, parse_event(data)) for seq, data in rows]

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
