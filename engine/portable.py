"""What travels between stores: batches with their runs, their trials' records and the events
stored for them. A Proctor bundle (engine/bundle.py) and an Inspect AI log
(engine/inspect_log.py) are each read into a `Portable`; `Store.import_portable` adds one to
a store in one transaction, all or nothing. A batch carries the notes people put on its
trials (a failure group's note stays in its store: a group is made anew from the trials).

A reader trusts nothing in its file: it validates every member into these models (pydantic
refuses what does not fit), and the importer redacts every record and event again before the
store sees it, so a file written by hand cannot put a raw secret into the store.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .events import Event
from .models import Note, TrialRecord

# ISO 8601, as notes are stamped: the model leaves a note's time free, a file may not.
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]{5,20}(?:Z|[+-]\d\d:\d\d)?")


class PortableRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    case_id: str
    variant: str
    position: int = 0


class PortableBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    trigger: str
    status: str  # finished, interrupted, failed (a running batch does not travel)
    started_at: str
    finished_at: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)  # `origin` says where it came from
    runs: list[PortableRun]
    trials: list[TrialRecord]
    events: dict[str, list[Event]] = Field(default_factory=dict)  # by trial id, in order
    notes: list[Note] = Field(default_factory=list)  # on its trials, one a trial at most

    @model_validator(mode="after")
    def _consistent(self) -> PortableBatch:
        """Every trial, run and event says it belongs here: a file cannot slip a trial or an
        event into another batch of the store."""
        runs = {run.id: run for run in self.runs}
        if len(runs) != len(self.runs):
            raise ValueError(f"batch {self.id} lists a run twice")
        trials = {t.id for t in self.trials}
        if len(trials) != len(self.trials):
            raise ValueError(f"batch {self.id} lists a trial twice")
        for t in self.trials:
            run = runs.get(t.run_id)
            if t.batch_id != self.id or run is None:
                raise ValueError(f"trial {t.id} names batch {t.batch_id} and run {t.run_id}, "
                                 f"not one of batch {self.id}'s")
            if (t.case_id, t.variant) != (run.case_id, run.variant):
                raise ValueError(f"trial {t.id} is not of its run {run.id}'s case and variant")
            if t.outcome is None:
                raise ValueError(f"trial {t.id} has not finished: a running trial does not travel")
        for trial_id, events in self.events.items():
            if trial_id not in trials:
                raise ValueError(f"events of trial {trial_id}, which batch {self.id} does not hold")
            if any(e.batch_id != self.id or getattr(e, "trial_id", None) != trial_id for e in events):
                raise ValueError(f"an event filed under trial {trial_id} names another trial or batch")
        noted: set[str] = set()
        for note in self.notes:
            if note.target not in trials:
                raise ValueError(f"a note on {note.target[:60]}, which is not a trial of "
                                 f"batch {self.id}")
            if not _TIME.fullmatch(note.updated_at):
                raise ValueError(f"a note on {note.target} whose time is not a time "
                                 f"({note.updated_at[:40]!r})")
            if note.target in noted:
                raise ValueError(f"batch {self.id} notes a trial twice ({note.target})")
            noted.add(note.target)
        return self

    @property
    def origin(self) -> str | None:
        """Where an imported batch came from, in words ("Inspect AI log run.eval, task X,
        model Y"); None for one made by Proctor."""
        value = self.config.get("origin")
        return value if isinstance(value, str) else None


class Portable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batches: list[PortableBatch]


class ImportReport(BaseModel):
    """What an import added, and what the store held already (the same content)."""

    batches_added: int = 0
    trials_added: int = 0
    trials_same: int = 0  # already in the store with the same record: nothing to add
    notes_added: int = 0  # on trials the store held no note on; the store's own note is kept

    @property
    def nothing_added(self) -> bool:
        return self.batches_added == 0 and self.trials_added == 0 and self.notes_added == 0
