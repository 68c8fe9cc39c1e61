"""The store's SQLite tables and the schema version they carry.

A trial row holds the record as JSON plus the few columns that lists and
summaries need, so `proctor ls` and the studio's browser never parse records.
The record's trajectory items (`trajectory_item`) and its turns' diffs
(`turn_diff`) are rows of their own: the record JSON keeps `[]` and `""` in
their places, so the studio reads a record without them, pages the items and
reads the diffs only for the Diff tab.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Text
from sqlmodel import Field, SQLModel

__all__ = ["SCHEMA_VERSION", "Meta", "BatchRow", "RunRow", "TrialRow", "EventRow", "TrajectoryItemRow", "NoteRow",
           "TrajectoryLayoutRow", "TurnDiffRow", "TABLES"]

# The store's own schema, in `meta`; the record's is engine.models.SCHEMA_VERSION.
# 2: trajectory items and turns' diffs moved out of the record JSON into tables of their own.
# 3: notes. 4: the full-text search index (search.py; its tables are made there, not here).
SCHEMA_VERSION = 4


class Meta(SQLModel, table=True):
    __tablename__ = "meta"

    key: str = Field(primary_key=True)
    value: str


class BatchRow(SQLModel, table=True):
    __tablename__ = "batch"

    id: str = Field(primary_key=True)
    trigger: str
    status: str = "running"  # running, finished, interrupted, failed
    owner: str = ""  # the process that runs it, so a later start can close it if that process died
    started_at: str = Field(index=True)
    finished_at: str | None = None
    heartbeat_at: str | None = None
    config: str = "{}"  # JSON: what the batch ran with


class RunRow(SQLModel, table=True):
    __tablename__ = "run"

    id: str = Field(primary_key=True)
    batch_id: str = Field(index=True)
    case_id: str
    variant: str
    position: int = 0


class TrialRow(SQLModel, table=True):
    __tablename__ = "trial"
    # The browser's queries (browse.py) read only these indexes, never rows, whose record
    # JSON makes them long: a 100,000-trial store is then one index scan away from any page.
    __table_args__ = (
        # Every column a batch's counts sum.
        Index("ix_trial_batch_summary", "batch_id", "outcome", "status", "command_count",
              "duration_ms", "tokens"),
        # Every column a filter tests, so any filter costs at most one scan of this index.
        Index("ix_trial_filter", "batch_id", "run_id", "outcome", "failure_kind", "case_id",
              "variant", "id", "tags", "failure_reason"),
    )

    id: str = Field(primary_key=True)
    run_id: str = Field(index=True)
    batch_id: str
    case_id: str
    variant: str
    trial: int
    owner: str = ""
    status: str = Field(default="queued", index=True)  # queued, running, done
    outcome: str | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    failure_where: str | None = None
    command_count: int = 0
    duration_ms: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    tags: str = "[]"  # JSON list
    tokens: int = 0  # usage input + output
    phase: str | None = None  # the phase a running trial is in, for the browser
    # Last: SQLite reads a row's columns in order, so the short ones above stay cheap to scan.
    record: str | None = None  # TrialRecord.to_json() as JSON


class EventRow(SQLModel, table=True):
    __tablename__ = "event"
    # AUTOINCREMENT: a seq is never reused, so a reader's `after_seq` cursor stays valid.
    __table_args__ = (
        Index("ix_event_trial_seq", "trial_id", "seq"),
        Index("ix_event_batch_seq", "batch_id", "seq"),
        {"sqlite_autoincrement": True},
    )

    seq: int | None = Field(default=None, primary_key=True)
    batch_id: str
    trial_id: str | None = None
    type: str
    at: int
    # The column is named `json`; pydantic reserves that name for an attribute.
    data: str = Field(sa_column=Column("json", Text, nullable=False))


class TrajectoryItemRow(SQLModel, table=True):
    __tablename__ = "trajectory_item"
    # Turn and kind are for a later full-text index's filters; the studio reads trajectory_layout.

    trial_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # the item's index in the record's trajectory
    turn: int
    kind: str
    # TrajectoryItem.to_json() as JSON; the column is named `json`, as the event table's.
    data: str = Field(sa_column=Column("json", Text, nullable=False))


class TrajectoryLayoutRow(SQLModel, table=True):
    """A trial's items in brief, one row: the studio lays out 100,000 items from it in a
    millisecond, where stepping through their index rows took 55 ms."""

    __tablename__ = "trajectory_layout"

    trial_id: str = Field(primary_key=True)
    runs: str  # JSON [[turn, first position, count], …]: runs of consecutive items of one turn
    kinds: str  # one letter an item, in position order (KIND_LETTER in store.py)


class TurnDiffRow(SQLModel, table=True):
    """A turn's diffs, which are most of a big record: read only where they are shown."""

    __tablename__ = "turn_diff"

    trial_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)  # the turn's index in the record's turns
    diff: str | None = None  # None: the stored record had no such key
    cumulative_diff: str | None = None


class NoteRow(SQLModel, table=True):
    """A person's note and label on a trial or a failure group (engine.models.Note)."""

    __tablename__ = "note"

    target: str = Field(primary_key=True)  # a trial id, or "group:" and a failure group's key
    label: str | None = Field(default=None, index=True)
    text: str = ""
    updated_at: str


TABLES = [model.__table__  # type: ignore[attr-defined]
          for model in (Meta, BatchRow, RunRow, TrialRow, EventRow, TrajectoryItemRow, TrajectoryLayoutRow,
                        TurnDiffRow, NoteRow)]
