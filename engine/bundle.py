"""Proctor bundles: trials, runs or batches as one zip that another store can import.

    manifest.json                        {"format": "proctor-bundle", "version": 1,
                                          "proctor": "0.1.0", "made_at": "…",
                                          "holds": [{"batch": "b_…", "runs": 2, "trials": 6}]}
    batches/<batch id>/batch.json        the batch: trigger, status, times, config and its runs
    batches/<batch id>/trials/<id>.json  a trial's record, as `proctor show --json` prints it
                                         (its saved files travel inside, in `artifacts`)
    batches/<batch id>/events/<id>.jsonl that trial's stored events, one JSON object a line
    batches/<batch id>/notes.json        the notes on its trials, when it has any: a list of
                                         {"target": "t_…", "label", "text", "updated_at"}
                                         (a failure group's note stays home: groups are made
                                         anew from the trials wherever they land)

The reader trusts nothing: the zip's directory is checked (paths, duplicates, declared sizes
and compression ratios) before a byte is inflated, sizes are enforced again while inflating
(the directory can lie), and every member must parse and fit its model. Anything else is an
`ImportRefused` whose one line names the file and what is wrong.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections import defaultdict
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version as package_version
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from sqlalchemy import select

from .events import Event, EventAdapter
from .importer import ZIP_ERRORS, ImportRefused, Progress
from .models import Note, TrialRecord
from .portable import Portable, PortableBatch, PortableRun
from .safezip import SafeZip, ZipLimits, ZipRefused
from .store import Store, StoreError
from .store.browse import locate
from .store.tables import BatchRow, RunRow, TrialRow

FORMAT = "proctor-bundle"
VERSION = 1
MANIFEST = "manifest.json"
# A record is at most a few MB (limits.py); these leave room and bound what a file can make us hold.
MAX_MEMBER = 128 << 20  # bytes of one member, inflated
MAX_TOTAL = 512 << 20  # bytes of all members, inflated (held in memory as records: ~7x)
MAX_MEMBERS = 250_000
MAX_RATIO = 200  # inflated / compressed, for members past RATIO_FLOOR; real records stay under 50
RATIO_FLOOR = 1 << 20
LIMITS = ZipLimits(member=MAX_MEMBER, total=MAX_TOTAL, members=MAX_MEMBERS, ratio=MAX_RATIO,
                   methods=frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}), ratio_floor=RATIO_FLOOR)
_INT64 = 2**63  # the store keeps numbers in 64-bit columns
# A note's JSON at most: 2,000 + 40 + 200 characters, each at worst a 6-byte \u escape, and room.
NOTE_BYTES = 16 << 10
_NOTES: TypeAdapter[list[Note]] = TypeAdapter(list[Note])
_MEMBER = re.compile(
    r"batches/([^/]+)/(?:(batch)\.json|trials/([^/]+)\.json|events/([^/]+)\.jsonl|(notes)\.json)")
_SAFE_ID = re.compile(r"[A-Za-z0-9_.\-]{1,200}")


class Holding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch: str
    runs: int
    trials: int


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["proctor-bundle"]
    version: Literal[1]
    proctor: str
    made_at: str
    holds: list[Holding]


class BatchMember(BaseModel):
    """batches/<id>/batch.json: a batch without its trials and events."""

    model_config = ConfigDict(extra="forbid")

    id: str
    trigger: str
    status: Literal["finished", "interrupted", "failed"]  # a running batch does not travel
    started_at: str
    finished_at: str | None = None
    config: dict[str, Any] = {}
    runs: list[PortableRun]


def proctor_version() -> str:
    try:
        return package_version("proctor")
    except PackageNotFoundError:
        return "unknown"


# --- export ---------------------------------------------------------------------------------


def export_bundle(store: Store, ids: Iterable[str], path: str | Path,
                  progress: Progress | None = None) -> int:
    """Write the trials these batch, run or trial ids (or unique prefixes) name into one bundle
    at `path`; returns how many trials it holds. A running one, or an unknown id, is a
    StoreError and no file is written."""
    path = Path(path)
    chosen = _chosen(store, list(ids))
    total = sum(len(trials) for _, trials in chosen.values())
    manifest = Manifest(format=FORMAT, version=VERSION, proctor=proctor_version(),
                        made_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                        .replace("+00:00", "Z"),
                        holds=[Holding(batch=b, runs=len(runs), trials=len(trials))
                               for b, (runs, trials) in chosen.items()])
    part = path.with_name(f".{path.name}.part")  # renamed when complete: no half bundle is left
    stamp = datetime.now().timetuple()[:6]

    def member(name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, date_time=stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        return info

    # Every note, filtered here: people write few, and a batch's trials are past SQL's IN limit.
    notes = store.notes()
    done = 0
    try:
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            zf.writestr(member(MANIFEST), manifest.model_dump_json(indent=1))
            for batch_id, (runs, trials) in chosen.items():
                zf.writestr(member(f"batches/{batch_id}/batch.json"),
                            _batch_member(store, batch_id, runs).model_dump_json(indent=1))
                for trial_id in trials:
                    record = store.get_trial(trial_id)
                    if record is None:
                        raise StoreError(f"trial {trial_id} left the store {store.path} while "
                                         "it was exported: nothing was written")
                    zf.writestr(member(f"batches/{batch_id}/trials/{trial_id}.json"),
                                json.dumps(record.to_json(), indent=1))
                    with zf.open(member(f"batches/{batch_id}/events/{trial_id}.jsonl"), "w") as f:
                        for event in store.trial_events(trial_id):
                            f.write(event.model_dump_json().encode() + b"\n")
                    done += 1
                    if progress:
                        progress(done, total)
                if noted := [notes[t].model_dump() for t in trials if t in notes]:
                    zf.writestr(member(f"batches/{batch_id}/notes.json"),
                                json.dumps(noted, indent=1))
        os.replace(part, path)
    except OSError as exc:
        raise StoreError(f"cannot write the bundle {path} ({exc.strerror or exc}): "
                         "pass -o with a writable path") from None
    finally:
        part.unlink(missing_ok=True)
    return total


def _chosen(store: Store, ids: list[str]) -> dict[str, tuple[list[PortableRun], list[str]]]:
    """batch id -> (its runs, its trial ids) that the given ids name, in the store's order."""
    runs_of: dict[str, set[str]] = defaultdict(set)
    trials_of: dict[str, set[str]] = defaultdict(set)
    # Filtered here, not with SQL `IN`: a batch of 100,000 trials is past SQLite's variable limit.
    all_runs: dict[str, list[PortableRun]] = {}
    all_trials: dict[str, list[Any]] = {}
    with store._read() as conn:  # noqa: SLF001 — one read of the rows to export
        for given in ids:
            found = locate(conn, given)
            if found is None:
                raise StoreError(f"{given} names no batch, run or trial in {store.path}, or the "
                                 "start of more than one: give more of the id; nothing was written")
            status = conn.execute(select(BatchRow.status)
                                  .where(BatchRow.id == found.batch_id)).scalar_one_or_none()
            if status is None:
                raise StoreError(f"{given} names a trial or run of batch {found.batch_id}, which "
                                 f"is not in {store.path}: the store is damaged")
            if status == "running":
                raise StoreError(f"batch {found.batch_id} is running: export it once it has "
                                 "finished; nothing was written")
            if found.batch_id not in all_runs:
                all_runs[found.batch_id] = [
                    PortableRun(id=r.id, case_id=r.case_id, variant=r.variant, position=r.position)
                    for r in conn.execute(select(RunRow.__table__)
                                          .where(RunRow.batch_id == found.batch_id)
                                          .order_by(RunRow.position, RunRow.id))]
                all_trials[found.batch_id] = list(conn.execute(
                    select(TrialRow.id, TrialRow.run_id, TrialRow.status)
                    .where(TrialRow.batch_id == found.batch_id)
                    .order_by(TrialRow.run_id, TrialRow.trial, TrialRow.id)))
            for row in all_trials[found.batch_id]:
                if found.kind == "batch" or row.id == found.trial_id or (
                        found.kind == "run" and row.run_id == found.run_id):
                    if row.status != "done":
                        raise StoreError(f"trial {row.id} is running: export it once it has "
                                         "finished; nothing was written")
                    trials_of[found.batch_id].add(row.id)
            runs_of[found.batch_id] |= ({r.id for r in all_runs[found.batch_id]}
                                        if found.kind == "batch" else {found.run_id or ""})
    chosen = {}
    for batch_id, run_ids in runs_of.items():
        trials = [row.id for row in all_trials[batch_id] if row.id in trials_of[batch_id]]
        for name in [batch_id, *trials]:
            if not _SAFE_ID.fullmatch(name) or name in (".", ".."):
                raise StoreError(f"{name!r} cannot name a member of a bundle; "
                                 "nothing was written")
        chosen[batch_id] = ([r for r in all_runs[batch_id] if r.id in run_ids], trials)
    return chosen


def _batch_member(store: Store, batch_id: str, runs: list[PortableRun]) -> BatchMember:
    with store._read() as conn:  # noqa: SLF001
        row = conn.execute(select(BatchRow.__table__).where(BatchRow.id == batch_id)).one()
    try:
        config = json.loads(row.config or "{}")
        return BatchMember(id=row.id, trigger=row.trigger, status=row.status,
                           started_at=row.started_at, finished_at=row.finished_at,
                           config=config if isinstance(config, dict) else {}, runs=runs)
    except (ValueError, ValidationError):
        raise StoreError(f"batch {batch_id} in {store.path} is damaged: restore the store "
                         "from a backup") from None


# --- import ---------------------------------------------------------------------------------


def read_bundle(path: str | Path, progress: Progress | None = None) -> Portable:
    """The batches a bundle holds, every member checked; ImportRefused names what is wrong."""
    path = Path(path)

    def refuse(what: str) -> ImportRefused:
        return ImportRefused(f"{path}: {what}; nothing was imported")

    try:
        with zipfile.ZipFile(path) as zf:
            return _read(SafeZip(zf, LIMITS, progress), refuse)
    except ImportRefused:
        raise
    except ZipRefused as exc:
        raise refuse(str(exc)) from None
    except (PermissionError, IsADirectoryError, FileNotFoundError) as exc:
        raise refuse(f"cannot be read ({exc.strerror or exc})") from None
    except ZIP_ERRORS as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise refuse(f"not a readable Proctor bundle: a damaged or truncated zip ({why})") from None


def _read(safe: SafeZip, refuse: Callable[[str], ImportRefused]) -> Portable:
    names = {i.filename: i for i in safe.infos}
    if MANIFEST not in names:
        raise refuse("not a Proctor bundle: it holds no manifest.json")
    manifest = _manifest(_json(safe.read(names.pop(MANIFEST)), MANIFEST, refuse), refuse)
    members: dict[str, dict[str, Any]] = defaultdict(lambda: {"trials": {}, "events": {}})
    for name in names:
        match = _MEMBER.fullmatch(name)
        if match is None:
            raise refuse(f"member {name} is not part of a Proctor bundle (manifest.json and "
                         "batches/<id>/… only)")
        batch, is_batch, trial, events, notes = match.groups()
        if is_batch:
            members[batch]["batch"] = name
        elif notes:
            members[batch]["notes"] = name
        else:
            members[batch]["trials" if trial else "events"][trial or events] = name
    held = {h.batch: h for h in manifest.holds}
    if len(held) != len(manifest.holds) or set(held) != set(members):
        raise refuse(f"its manifest lists batches {sorted(held)} but it holds {sorted(members)}")
    batches = [_batch(safe, batch, parts, held[batch], refuse) for batch, parts in members.items()]
    return Portable(batches=batches)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _int(text: str) -> int:
    value = int(text)
    if not -_INT64 <= value < _INT64:
        raise ValueError(f"the number {text[:30]}… is larger than a store holds")
    return value


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_refuse_constant, parse_int=_int)


def _json(data: bytes, name: str, refuse: Callable[[str], ImportRefused]) -> Any:
    try:
        return _loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise refuse(f"member {name} is not JSON ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]


def _schema_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "unreadable"
    where = ".".join(map(str, errors[0]["loc"]))
    return f"{where + ': ' if where else ''}{errors[0]['msg']}"[:200]


def _manifest(data: Any, refuse: Callable[[str], ImportRefused]) -> Manifest:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        what = data.get("format") if isinstance(data, dict) else None
        raise refuse("not a Proctor bundle: its manifest's format is "
                     f"{json.dumps(what)[:60]}, not {json.dumps(FORMAT)}")
    if data.get("version") != VERSION:
        raise refuse(f"bundle format version {json.dumps(data.get('version'))[:30]} is unknown: "
                     f"this Proctor ({proctor_version()}) reads version {VERSION}; a newer "
                     "Proctor may read it")
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise refuse(f"member {MANIFEST} does not match the manifest schema "
                     f"({_schema_error(exc)})") from None


def _batch(safe: SafeZip, batch_id: str, parts: dict[str, Any], holding: Holding,
           refuse: Callable[[str], ImportRefused]) -> PortableBatch:
    if "batch" not in parts:
        raise refuse(f"batch {batch_id} has no member batches/{batch_id}/batch.json")
    name = parts["batch"]
    member = _model(BatchMember, _json(safe.read(safe.by_name[name]), name, refuse),
                    name, refuse)
    if member.id != batch_id:
        raise refuse(f"member {name} holds batch {member.id}, not {batch_id}")
    trials: list[TrialRecord] = []
    for trial_id, name in parts["trials"].items():
        record = _model(TrialRecord, _json(safe.read(safe.by_name[name]), name,
                                           refuse), name, refuse)
        if record.id != trial_id:
            raise refuse(f"member {name} holds trial {record.id}, not {trial_id}")
        trials.append(record)
    events: dict[str, list[Event]] = {}
    for trial_id, name in parts["events"].items():
        events[trial_id] = _events(safe.read(safe.by_name[name]), name, refuse)
    if (len(member.runs), len(trials)) != (holding.runs, holding.trials):
        raise refuse(f"its manifest says batch {batch_id} holds {holding.runs} runs and "
                     f"{holding.trials} trials, but it holds {len(member.runs)} and {len(trials)}")
    trials.sort(key=lambda t: (t.run_id, t.trial, t.id))
    notes = _notes(safe, parts.get("notes"), len(trials), refuse)
    try:
        return PortableBatch(**dict(member), trials=trials, events=events, notes=notes)
    except ValidationError as exc:
        raise refuse(f"batch {batch_id} does not hold together ({_schema_error(exc)})") from None


def _model(model: type[BaseModel], data: Any, name: str,
           refuse: Callable[[str], ImportRefused]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise refuse(f"member {name} does not match the {model.__name__} schema "
                     f"({_schema_error(exc)})") from None
    except RecursionError:
        raise refuse(f"member {name} is nested too deep") from None


def _notes(safe: SafeZip, name: str | None, trials: int,
           refuse: Callable[[str], ImportRefused]) -> list[Note]:
    """A batch's notes member, if it has one; bounded by its trials before a byte is inflated
    (SafeZip holds a member to the size it declares)."""
    if name is None:
        return []
    info = safe.by_name[name]
    if info.file_size > NOTE_BYTES * max(trials, 1):
        raise refuse(f"member {name} is larger than the notes of {trials} trials can be "
                     f"({info.file_size:,} bytes; one note a trial, at most {NOTE_BYTES:,} bytes)")
    data = _json(safe.read(info), name, refuse)
    try:
        return _NOTES.validate_python(data)
    except ValidationError as exc:
        raise refuse(f"member {name} does not match the Note schema "
                     f"({_schema_error(exc)})") from None


def _events(data: bytes, name: str, refuse: Callable[[str], ImportRefused]) -> list[Event]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(f"member {name} is not UTF-8 ({_first_line(exc)})") from None
    events = []
    # "\n" only: pydantic writes U+2028 and other line breaks raw inside strings.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            events.append(EventAdapter.validate_python(_loads(line)))
        except ValidationError as exc:
            raise refuse(f"member {name} line {number} is not a Proctor event "
                         f"({_schema_error(exc)})") from None
        except (ValueError, RecursionError) as exc:
            raise refuse(f"member {name} line {number} is not JSON ({_first_line(exc)})") from None
    return events
