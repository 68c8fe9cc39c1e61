"""`proctor import`: a file (a Proctor bundle or an Inspect AI log) into a store.

The file's reader (engine/bundle.py, engine/inspect_log.py) turns it into a `Portable` and
refuses, with one line naming the file, anything that does not fit. Every record and event is
then redacted again, so a file written by hand cannot put a raw secret into the store, and
`Store.import_portable` adds it in one transaction: each file is all or nothing.
"""

from __future__ import annotations

import importlib
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

from .limits import holds_secret, redact
from .portable import ImportReport, Portable, PortableBatch
from .redact import Redactor, holds_password_assignment
from .store import Store, StoreError
from .text import plural

Progress = Callable[[int, int], None]  # (done, total): bytes or members
# What zipfile raises on a damaged or hostile zip, besides BadZipFile: a "version needed" it
# lacks (NotImplementedError), an encrypted member (RuntimeError), a broken stream (zlib.error).
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
              NotImplementedError, RuntimeError, ValueError, UnicodeError, OverflowError)


class ImportRefused(Exception):
    """A file import will not take; its str is one line that names the file and what is wrong."""


def read_file(path: str | Path, *, threshold: float | None = None,
              progress: Progress | None = None) -> Portable:
    """What the file holds, read and checked but not yet redacted: a bundle or an Inspect log."""
    path = Path(path)
    if not path.is_file():
        raise ImportRefused(f"{path}: no such file")
    if _is_inspect_log(path):
        try:
            inspect_log: Any = importlib.import_module("engine.inspect_log")
        except ModuleNotFoundError as exc:
            if exc.name != "engine.inspect_log":
                raise
            raise ImportRefused(f"{path}: Inspect AI logs are not supported yet") from None
        return inspect_log.read_inspect(path, threshold=threshold, progress=progress)
    from .bundle import read_bundle  # bundle.py imports ImportRefused from here

    return read_bundle(path, progress=progress)


def _is_inspect_log(path: Path) -> bool:
    """An Inspect AI log: any `.eval` or `.json` (a bundle is neither, and Inspect's reader says
    best what is wrong with one), or a zip holding header.json or _journal/ but no manifest.json."""
    if path.suffix.lower() in (".eval", ".json"):
        return True
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except ZIP_ERRORS:
        return False  # the bundle reader says what is wrong with it
    return "manifest.json" not in names and (
        "header.json" in names or any(n.startswith("_journal/") for n in names))


def prepared(path: str | Path, *, threshold: float | None = None,
             progress: Progress | None = None) -> Portable:
    """`read_file`, with every record, event and batch setting redacted again."""
    portable = read_file(path, threshold=threshold, progress=progress)
    return redacted(portable, Path(path))


def redacted(portable: Portable, path: Path) -> Portable:
    """The portable with every string redacted, as the engine redacts what it stores; a saved
    file whose text still assigns a password loses its text, as `c.capture` would keep it."""
    redactor = _Memoized()
    batches = []
    for batch in portable.batches:
        # Most files hold no secret: then one pass over all texts, not a copy of every item.
        clean = redact(redactor, batch) if holds_secret(redactor, batch) else batch
        if _names(clean) != _names(batch):
            # The batch's model checked these names; a redacted one could now name another.
            raise ImportRefused(f"{path}: an id, case or variant name in batch {clean.id} looks "
                                "like a secret; nothing was imported")
        trials = []
        for record in clean.trials:
            artifacts = [a.model_copy(update={"text": None})
                         if a.text is not None and holds_password_assignment(a.text) else a
                         for a in record.artifacts]
            trials.append(record.model_copy(update={"artifacts": artifacts}))
        batches.append(clean.model_copy(update={"trials": trials}))
    return Portable.model_construct(batches=batches)


class _Memoized(Redactor):
    """A redactor that redacts each distinct text once: every event repeats its trial's ids,
    case and variant, and most of an import's time went to those."""

    def __init__(self) -> None:
        super().__init__()
        self._done: dict[str, str] = {}

    def value(self, obj: Any) -> Any:
        if not isinstance(obj, str):
            return super().value(obj)
        if (done := self._done.get(obj)) is None:
            done = self._done[obj] = super().value(obj)
        return done


def _names(batch: PortableBatch) -> tuple[Any, ...]:
    """Every id and name by which a batch's parts refer to one another."""
    return (batch.id, [(r.id, r.case_id, r.variant) for r in batch.runs],
            [(t.id, t.batch_id, t.run_id, t.case_id, t.variant) for t in batch.trials],
            {trial_id: [(e.batch_id, getattr(e, "trial_id", None), getattr(e, "run_id", None),
                         getattr(e, "case_id", None), getattr(e, "variant", None)) for e in events]
             for trial_id, events in batch.events.items()})


def add(store: Store, path: str | Path, portable: Portable) -> ImportReport:
    """`store.import_portable`, with a clash named as the file's refusal."""
    try:
        return store.import_portable(portable)
    except StoreError as exc:
        raise ImportRefused(f"{path}: {exc}") from None


def import_file(store: Store, path: str | Path, *, threshold: float | None = None,
                progress: Progress | None = None) -> ImportReport:
    """Read, check, redact and add one file, all of it or (ImportRefused) nothing."""
    return add(store, path, prepared(path, threshold=threshold, progress=progress))


def report_line(path: str | Path, portable: Portable, report: ImportReport) -> str:
    """What one file added, in one line ("run.zip: b_1f… : 3 trials added")."""
    ids = ", ".join(b.id for b in portable.batches) or "no batch"
    if report.nothing_added:
        return f"{path}: {ids}: nothing new: already in the store"
    line = f"{path}: {ids}: {plural(report.trials_added, 'trial')} added"
    if report.notes_added:
        line += f", {plural(report.notes_added, 'note')}"
    if report.trials_same:
        line += f" ({report.trials_same} already in the store)"
    return line
