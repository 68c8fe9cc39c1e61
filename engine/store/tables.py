"""The store's SQLite tables and the schema version they carry.

A trial row holds the record as JSON plus the few columns that lists and
summaries need, so `proctor ls` and the studio's browser never parse records.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Text
from sqlmodel import Field, SQLModel

from ..models import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Meta", "BatchRow", "RunRow", "TrialRow", "EventRow", "TABLES"]


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

    id: str = Field(primary_key=True)
    run_id: str = Field(index=True)
    batch_id: str = Field(index=True)
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


TABLES = [model.__table__  # type: ignore[attr-defined]
          for model in (Meta, BatchRow, RunRow, TrialRow, EventRow)]
