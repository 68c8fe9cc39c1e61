"""Read-only queries behind the studio's trial browser: batches → runs → trials.

Every function is one SQL statement over the trial table's short columns and
indexes (tables.py), never its record JSON, so a page of a 100,000-trial store
comes back in milliseconds and a list is never loaded whole. The one exception,
`batch_spans`, reads only the phases out of one batch's records, for its timeline.

A filter picks trials. A batch or a run is listed when it holds a picked
trial, and only picked trials are listed under a run; the counts, pass rate
and deterministic badge always describe the whole batch or run, because a pass
rate over "only the failures" would say nothing.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Literal, NamedTuple, get_args

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from sqlalchemy import Connection, text
from sqlalchemy import exc as sa_exc

from ..models import PhaseSpan
from ..models import Distribution, TrialSummary, distribution
from ..cost import harness_model, usage_cost  # harness_model: kept importable from here
from ..models import Usage  # a batch overview's cost
from .store import Store, StoreError
from .store import _readable, _trial_summary  # the rows read as batch_summary reads them

SortKey = Literal["name", "outcome", "pass_rate", "deterministic", "commands", "duration",
                  "tokens", "trigger", "started"]
SORT_KEYS: tuple[SortKey, ...] = get_args(SortKey)
RUNNING = "running"  # the outcome filter's word for a trial with no outcome yet


class Sort(NamedTuple):
    key: SortKey = "started"
    descending: bool = True


class BrowseFilter(BaseModel):
    """Which trials to show; an empty field does not filter."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcomes: frozenset[str] = frozenset()  # pass, fail, infra_error, skipped, running
    failure_kinds: frozenset[str] = frozenset()
    cases: frozenset[str] = frozenset()
    variants: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()
    labels: frozenset[str] = frozenset()  # trials whose note carries one of these labels
    trial_ids: frozenset[str] = frozenset()  # exactly these trials (a failure group's)
    text: str = ""  # in a case id, variant, trial id, batch id or failure reason

    @property
    def active(self) -> bool:
        return bool(self.outcomes or self.failure_kinds or self.cases or self.variants
                     or self.tags or self.labels or self.trial_ids or self.text.strip())


@dataclass(frozen=True, slots=True)
class Counts:
    trials: int
    passed: int
    failed: int
    voided: int
    skipped: int
    running: int

    @property
    def scored(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float | None:
        """SPEC.md: passes / scored; None (shown `—`) when nothing was scored."""
        return round(self.passed / self.scored, 3) if self.scored else None


@dataclass(frozen=True, slots=True)
class BatchItem:
    id: str
    trigger: str
    status: str  # running, finished, interrupted, failed
    started_at: str
    finished_at: str | None
    duration_ms: int | None
    counts: Counts
    commands: int  # summed over the batch's trials
    tokens: int
    origin: str | None = None  # where an imported batch came from, in words; None for Proctor's own


@dataclass(frozen=True, slots=True)
class RunItem:
    id: str
    batch_id: str
    case_id: str
    variant: str
    position: int
    counts: Counts
    deterministic: bool
    command_min: int | None  # over scored trials, like models.distribution
    command_median: float | None
    command_max: int | None
    tokens: int
    duration_ms: int | None  # mean per finished trial
    started_at: str | None

    @property
    def pass_rate(self) -> float | None:
        return self.counts.pass_rate


@dataclass(frozen=True, slots=True)
class TrialItem:
    id: str
    run_id: str
    batch_id: str
    trial: int
    status: str  # queued, running, done
    outcome: str | None
    failure_kind: str | None
    failure_reason: str | None
    failure_where: str | None
    command_count: int
    duration_ms: int | None
    tokens: int
    started_at: str | None
    phase: str | None
    label: str | None = None  # its note's label


@dataclass(frozen=True, slots=True)
class FilterOptions:
    cases: list[str]
    variants: list[str]
    tags: list[str]
    failure_kinds: list[str]
    labels: list[str]  # on trials; a failure group's label picks no trial


Source = Store | Connection


@contextmanager
def read_connection(source: Source) -> Iterator[Connection]:
    """A connection to read with: the one given, or one of the store's readers (for another
    module's queries over the browser's filter, e.g. engine.groups)."""
    if isinstance(source, Connection):
        yield source
    else:
        with source._read() as conn:  # noqa: SLF001 — the store package's own reader
            yield conn


def _rows(source: Source, sql: str, params: dict[str, Any]) -> list[Any]:
    with read_connection(source) as conn:
        return list(conn.execute(text(sql), params))


# -- the filter --------------------------------------------------------------------

def _in(column: str, values: frozenset[str], name: str, params: dict[str, Any]) -> str:
    names = []
    for i, value in enumerate(sorted(values)):
        params[f"{name}{i}"] = value
        names.append(f":{name}{i}")
    return f"{column} IN ({', '.join(names)})"


def _escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# The planner, knowing no row counts, would rather seek a one-column index and then read
# rows; one scan of the index that holds every filtered column is faster and bounded.
_FILTERED = "trial t INDEXED BY ix_trial_filter"


def trial_filter(flt: BrowseFilter, params: dict[str, Any]) -> str:
    """SQL conditions on the trial table aliased `t`; "1" when nothing filters."""
    parts = []
    if flt.outcomes:
        either = []
        if outcomes := flt.outcomes - {RUNNING}:
            either.append(_in("t.outcome", outcomes, "outcome", params))
        if RUNNING in flt.outcomes:
            either.append("t.outcome IS NULL")
        parts.append(f"({' OR '.join(either)})")
    if flt.failure_kinds:
        parts.append(_in("t.failure_kind", flt.failure_kinds, "kind", params))
    if flt.cases:
        parts.append(_in("t.case_id", flt.cases, "case", params))
    if flt.variants:
        parts.append(_in("t.variant", flt.variants, "variant", params))
    if flt.tags:
        # tags is a JSON list written by json.dumps: a tag is present iff its quoted form is.
        either = []
        for i, tag in enumerate(sorted(flt.tags)):
            params[f"tag{i}"] = json.dumps(tag)
            either.append(f"instr(t.tags, :tag{i}) > 0")
        parts.append(f"({' OR '.join(either)})")
    if flt.trial_ids:
        # One parameter however many: a group of 5,000 trials would pass SQLite's variable limit.
        params["trial_ids"] = json.dumps(sorted(flt.trial_ids))
        parts.append("t.id IN (SELECT value FROM json_each(:trial_ids))")
    if flt.labels:
        # The few labelled trials, from the note table's label index; their batches let the scan
        # of ix_trial_filter seek (8 ms, not 28, for 1,000 labelled trials of 100,000).
        labels = _in("n.label", flt.labels, "label", params)
        parts.append(f"t.batch_id IN (SELECT lt.batch_id FROM note n JOIN trial lt "
                     f"ON lt.id = n.target WHERE {labels}) "
                     f"AND t.id IN (SELECT n.target FROM note n WHERE {labels})")
    if needle := flt.text.strip():
        params["text"] = f"%{_escape_like(needle)}%"
        parts.append("(" + " OR ".join(
            f"{column} LIKE :text ESCAPE '\\'"
            for column in ("t.case_id", "t.variant", "t.id", "t.batch_id", "t.failure_reason")
        ) + ")")
    return " AND ".join(parts) or "1"


# -- sorting -----------------------------------------------------------------------

def _order(expressions: dict[str, str], sort: Sort, fallback: str, tiebreak: str) -> str:
    """ORDER BY for a sort; keys a level has no column for fall back to its natural order."""
    direction = "DESC" if sort.descending else "ASC"
    expression = expressions.get(sort.key, fallback)
    # Rows without a value (nothing scored, still running) go last either way.
    return f"{expression} {direction} NULLS LAST, {tiebreak} {direction}"


_COUNTS = """
    count({t}.batch_id) AS trials,
    coalesce(sum({t}.outcome = 'pass'), 0) AS passed,
    coalesce(sum({t}.outcome = 'fail'), 0) AS failed,
    coalesce(sum({t}.outcome = 'infra_error'), 0) AS voided,
    coalesce(sum({t}.outcome = 'skipped'), 0) AS skipped,
    coalesce(sum({t}.status = 'running'), 0) AS running,
    CAST(total({t}.command_count) AS INTEGER) AS commands,
    CAST(total({t}.tokens) AS INTEGER) AS tokens"""  # total(), unlike sum(), never overflows

_COUNT_NAMES = ("trials", "passed", "failed", "voided", "skipped", "running", "commands", "tokens")


def _coalesced(alias: str) -> str:
    """The counts of a LEFT JOIN, 0 where nothing joined (a batch or run with no trial yet)."""
    return ", ".join(f"coalesce({alias}.{name}, 0) AS {name}" for name in _COUNT_NAMES)


_PASS_RATE = "(1.0 * passed / nullif(passed + failed, 0))"
_PROBLEMS = "(failed * 1000000 + voided * 1000 + running)"  # failures, then voids, then live


def _counts(row: Any) -> Counts:
    return Counts(row.trials, row.passed, row.failed, row.voided, row.skipped, row.running)


# -- batches -----------------------------------------------------------------------

_BATCH_DURATION = ("CAST(round((julianday(b.finished_at) - julianday(b.started_at)) * 86400000)"
                   " AS INTEGER)")
_BATCH_ORDER = {
    "name": "id", "trigger": "trigger", "started": "started_at", "duration": "duration_ms",
    "outcome": _PROBLEMS, "pass_rate": _PASS_RATE, "commands": "commands", "tokens": "tokens",
}
# An imported batch's origin sentence from its config; anything else a file put there is none.
_ORIGIN = ("CASE WHEN json_valid(b.config) THEN CASE json_type(b.config, '$.origin') "
           "WHEN 'text' THEN json_extract(b.config, '$.origin') END END")
_BATCH_COLUMNS = ("b.id, b.trigger, b.status, b.started_at, b.finished_at, "
                  f"{_BATCH_DURATION} AS duration_ms, {_ORIGIN} AS origin")


def batches_page(source: Source, flt: BrowseFilter = BrowseFilter(), sort: Sort = Sort(),
                 offset: int = 0, limit: int = 200) -> list[BatchItem]:
    """A page of batches holding a trial the filter picks, with their whole-batch counts."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    where = "1"
    if flt.active:
        where = f"b.id IN (SELECT t.batch_id FROM {_FILTERED} WHERE {trial_filter(flt, params)})"
    order = _order(_BATCH_ORDER, sort, "started_at", "id")
    batches = f"SELECT * FROM (SELECT {_BATCH_COLUMNS} FROM batch b WHERE {where})"
    if sort.key in ("name", "trigger", "started", "duration"):
        # Ordered by the batch's own columns: take the page first, then count only its trials.
        page, tail = f"{batches} ORDER BY {order} LIMIT :limit OFFSET :offset", ""
    else:
        # Ordered by a count: count every listed batch's trials, from the covering index.
        page, tail = batches, "LIMIT :limit OFFSET :offset"
    sql = f"""
        WITH page AS MATERIALIZED ({page}),
        counts AS (
            SELECT t.batch_id, {_COUNTS.format(t="t")}
            FROM trial t INDEXED BY ix_trial_batch_summary
            WHERE t.batch_id IN (SELECT id FROM page) GROUP BY t.batch_id)
        SELECT * FROM (
            SELECT page.*, {_coalesced("c")} FROM page LEFT JOIN counts c ON c.batch_id = page.id)
        ORDER BY {order} {tail}"""
    return [BatchItem(row.id, row.trigger, row.status, row.started_at, row.finished_at,
                      row.duration_ms, _counts(row), row.commands, row.tokens, row.origin)
            for row in _rows(source, sql, params)]


def count_batches(source: Source, flt: BrowseFilter = BrowseFilter()) -> int:
    """How many batches `batches_page` can list under this filter."""
    params: dict[str, Any] = {}
    if not flt.active:
        sql = "SELECT count(*) FROM batch"
    else:
        where = trial_filter(flt, params)
        sql = f"SELECT count(DISTINCT t.batch_id) FROM {_FILTERED} WHERE {where}"
    return int(_rows(source, sql, params)[0][0])


# -- runs --------------------------------------------------------------------------

_RUN_ORDER = {
    "name": "case_id", "outcome": _PROBLEMS, "pass_rate": _PASS_RATE,
    "deterministic": "deterministic", "commands": "command_median", "tokens": "tokens",
    "duration": "duration_ms",  # "started": the order they were planned in, as a fallback
}


def runs_of(source: Source, batch_id: str, flt: BrowseFilter = BrowseFilter(),
            sort: Sort = Sort("name", False)) -> list[RunItem]:
    """A batch's runs holding a trial the filter picks, each with its whole distribution."""
    params: dict[str, Any] = {"batch": batch_id}
    where = "1"
    if flt.active:
        where = (f"r.id IN (SELECT t.run_id FROM {_FILTERED} WHERE t.batch_id = :batch "
                 f"AND {trial_filter(flt, params)})")
    # The median of the scored trials' command counts, as models.distribution takes it.
    sql = f"""
        WITH batch_trials AS (
            SELECT batch_id, run_id, outcome, status, command_count, duration_ms, tokens,
                   started_at
            FROM trial WHERE batch_id = :batch),
        ranked AS (
            SELECT run_id, command_count,
                   row_number() OVER (PARTITION BY run_id ORDER BY command_count) AS n,
                   count(*) OVER (PARTITION BY run_id) AS size
            FROM batch_trials WHERE outcome IN ('pass', 'fail')),
        medians AS (
            SELECT run_id, avg(command_count) AS median FROM ranked
            WHERE n IN ((size + 1) / 2, (size + 2) / 2) GROUP BY run_id),
        counts AS (
            SELECT run_id, {_COUNTS.format(t="batch_trials")},
                   min(CASE WHEN outcome IN ('pass', 'fail') THEN command_count END) AS cmin,
                   max(CASE WHEN outcome IN ('pass', 'fail') THEN command_count END) AS cmax,
                   CAST(avg(duration_ms) AS INTEGER) AS duration_ms,
                   min(started_at) AS started_at
            FROM batch_trials GROUP BY run_id)
        SELECT * FROM (SELECT r.id, r.case_id, r.variant, r.position, {_coalesced("c")},
               c.cmin, c.cmax, m.median AS command_median, c.duration_ms, c.started_at,
               -- SPEC.md: at least two scored trials, one outcome, command counts within 4
               coalesce(c.passed + c.failed >= 2 AND (c.passed = 0 OR c.failed = 0)
                        AND c.cmax - c.cmin <= 4, 0) AS deterministic
        FROM run r LEFT JOIN counts c ON c.run_id = r.id LEFT JOIN medians m ON m.run_id = r.id
        WHERE r.batch_id = :batch AND {where})
        ORDER BY {_order(_RUN_ORDER, sort, "position", "variant")}, id"""
    return [RunItem(row.id, batch_id, row.case_id, row.variant, row.position, _counts(row),
                    bool(row.deterministic), row.cmin, row.command_median, row.cmax,
                    row.tokens, row.duration_ms, row.started_at)
            for row in _rows(source, sql, params)]


# -- trials ------------------------------------------------------------------------

_TRIAL_ORDER = {
    "outcome": "coalesce(t.outcome, '')", "pass_rate": "(t.outcome = 'pass')",
    "commands": "t.command_count", "duration": "t.duration_ms", "tokens": "t.tokens",
    # "started": by trial number, which is the order they start in (queued ones have no time)
}
_TRIAL_COLUMNS = ("t.id, t.run_id, t.batch_id, t.trial, t.status, t.outcome, t.failure_kind, "
                  "t.failure_reason, t.failure_where, t.command_count, t.duration_ms, t.tokens, "
                  "t.started_at, t.phase, (SELECT n.label FROM note n WHERE n.target = t.id)")


def _trial_item(row: Any) -> TrialItem:
    return TrialItem(*row)


def trials_of(source: Source, run_id: str, flt: BrowseFilter = BrowseFilter(),
              sort: Sort = Sort("name", False)) -> list[TrialItem]:
    """A run's trials the filter picks."""
    params: dict[str, Any] = {"run": run_id}
    sql = (f"SELECT {_TRIAL_COLUMNS} FROM trial t "
           f"WHERE t.run_id = :run AND {trial_filter(flt, params)} "
           f"ORDER BY {_order(_TRIAL_ORDER, sort, 't.trial', 't.trial')}, t.id")
    return [_trial_item(row) for row in _rows(source, sql, params)]


def trial_item(source: Source, trial_id: str) -> TrialItem | None:
    """One trial's browser row, to find where a trial id sits in the tree."""
    rows = _rows(source, f"SELECT {_TRIAL_COLUMNS} FROM trial t WHERE t.id = :id",
                 {"id": trial_id})
    return _trial_item(rows[0]) if rows else None


# -- a batch's timeline ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TrialSpans:
    """What a batch timeline draws of one trial: its row's name, its start, its phases."""

    id: str
    case_id: str
    variant: str
    trial: int
    outcome: str | None
    started_at: str | None
    phases: list[PhaseSpan]


_PHASES: TypeAdapter[list[PhaseSpan]] = TypeAdapter(list[PhaseSpan])


_SPANS = """
    SELECT t.id, t.case_id, t.variant, t.trial, t.outcome, t.started_at, {phases} AS phases
    FROM trial t JOIN run r ON r.id = t.run_id
    WHERE t.batch_id = :batch
    ORDER BY r.position, r.id, t.trial, t.id"""
_PHASES_OF = "json_extract(t.record, '$.phases')"


def _span_rows(store: Store, batch_id: str) -> list[Any]:
    """Each record parsed once by SQLite. A damaged one fails the whole statement: only then
    is every record checked first (json_valid, a second parse), so the others still read."""
    with read_connection(store) as conn:
        try:
            return list(conn.execute(text(_SPANS.format(phases=_PHASES_OF)), {"batch": batch_id}))
        except sa_exc.OperationalError:
            checked = f"CASE WHEN json_valid(t.record) THEN {_PHASES_OF} END"
            return list(conn.execute(text(_SPANS.format(phases=checked)), {"batch": batch_id}))


def batch_spans(store: Store, batch_id: str, damaged: list[str] | None = None) -> list[TrialSpans]:
    """A batch's trials in run order with their phase spans, read out of the record JSON by
    SQLite; nothing else of a record is read or validated. A record that cannot be read is
    left out, with the sentence that says so in `damaged`."""
    damaged = damaged if damaged is not None else []
    trials = []
    for row in _span_rows(store, batch_id):
        try:
            if row.phases is not None:
                phases = _PHASES.validate_json(row.phases)
            else:  # no phases, or not a record at all: the stored record says which
                phases = _PHASES.validate_python((store.trial_json(row.id) or {}).get("phases", []))
        except StoreError as e:
            damaged.append(str(e))
            continue
        except ValidationError as e:
            where = ".".join(map(str, ("phases", *e.errors()[0]["loc"])))
            damaged.append(str(store._damaged(row.id, f"field {where}")))  # noqa: SLF001 — the store's own sentence
            continue
        trials.append(TrialSpans(row.id, row.case_id, row.variant, row.trial, row.outcome,
                                 row.started_at, phases))
    return trials


# -- the filter bar's choices ------------------------------------------------------

def filter_options(source: Source) -> FilterOptions:
    """Distinct cases, variants, tags and failure kinds in the store, sorted."""
    # Few distinct tag lists and failure kinds: one scan of the filter index finds them.
    sql = """
        SELECT DISTINCT 'case', case_id FROM run
        UNION ALL SELECT DISTINCT 'variant', variant FROM run
        UNION ALL SELECT DISTINCT 'kind', failure_kind FROM trial INDEXED BY ix_trial_filter
            WHERE failure_kind IS NOT NULL
        UNION ALL SELECT DISTINCT 'tag', j.value
            FROM (SELECT DISTINCT tags FROM trial INDEXED BY ix_trial_filter) d,
                 json_each(CASE WHEN typeof(d.tags) != 'text' THEN '[]'
                                WHEN json_valid(d.tags) THEN d.tags ELSE '[]' END) j
        UNION ALL SELECT DISTINCT 'label', label FROM note
            WHERE label IS NOT NULL AND target NOT LIKE 'group:%'"""
    found: dict[str, set[str]] = {"case": set(), "variant": set(), "tag": set(), "kind": set(),
                                  "label": set()}
    for what, value in _rows(source, sql, {}):
        if isinstance(value, str):  # a damaged row may hold anything
            found[what].add(value)
    return FilterOptions(*(sorted(found[k]) for k in ("case", "variant", "tag", "kind", "label")))


# -- finding and watching ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Located:
    """Where an id sits in the tree."""

    kind: Literal["batch", "run", "trial"]
    batch_id: str
    run_id: str | None = None
    trial_id: str | None = None


def locate(source: Source, id_or_prefix: str) -> Located | None:
    """A batch, run or trial by id or by a unique prefix of one (ranges on the primary keys)."""
    # Every id is ASCII, so the range [prefix, prefix + U+10FFFF) holds exactly its extensions.
    sql = """
        SELECT * FROM (SELECT 'batch' AS kind, id AS batch_id, NULL AS run_id, NULL AS trial_id
                       FROM batch WHERE id >= :lo AND id < :hi LIMIT 2)
        UNION ALL SELECT * FROM (SELECT 'run', batch_id, id, NULL
                                 FROM run WHERE id >= :lo AND id < :hi LIMIT 2)
        UNION ALL SELECT * FROM (SELECT 'trial', batch_id, run_id, id
                                 FROM trial WHERE id >= :lo AND id < :hi LIMIT 2)"""
    rows = _rows(source, sql, {"lo": id_or_prefix, "hi": id_or_prefix + "\U0010ffff"})
    exact = [r for r in rows if id_or_prefix in (r.trial_id or r.run_id or r.batch_id,)]
    found = exact or rows
    return Located(*found[0]) if len(found) == 1 else None


def change_stamp(source: Source) -> tuple[Any, ...]:
    """Changes whenever anything the browser shows may have: polled about once a second."""
    # Every trial's progress writes events (AUTOINCREMENT: the newest seq only grows), and
    # new batches or imports add rows; three lookups on primary keys and one small index.
    sql = """SELECT (SELECT max(seq) FROM event), (SELECT count(*) FROM batch),
                    (SELECT max(rowid) FROM trial),
                    (SELECT count(*) FROM trial WHERE status IN ('queued', 'running'))"""
    return tuple(_rows(source, sql, {})[0])


# -- a batch's run grid --------------------------------------------------------------

class GridCell(BaseModel):
    """One case under one variant in a batch: its trials, their distribution by SPEC.md's rules
    (models.distribution: void and skipped trials never count), and their median time."""

    model_config = ConfigDict(frozen=True)

    case_id: str
    variant: str
    run_ids: list[str]  # one as a batch plans it; a store that holds two shows them as one cell
    distribution: Distribution
    skipped: int
    running: int  # queued or running: no outcome yet
    median_ms: int | None  # over scored trials, as the command counts are
    trials: list[TrialSummary]  # in trial order

    @property
    def pass_rate(self) -> float | None:
        return self.distribution.pass_rate

    @property
    def deterministic(self) -> bool:
        return self.distribution.deterministic

    def first(self, outcome: str) -> TrialSummary | None:
        """The lowest-numbered trial with this outcome."""
        return next((t for t in self.trials if t.outcome == outcome), None)


_GRID = """
    SELECT r.id AS run_id, r.case_id, r.variant, t.id, t.trial, t.outcome, t.failure_kind,
           t.failure_reason, t.failure_where, t.command_count, t.duration_ms
    FROM run r LEFT JOIN trial t ON t.run_id = r.id
    WHERE r.batch_id = :batch
    ORDER BY r.position, r.id, t.trial, t.id"""


def run_grid(source: Source, batch_id: str, damaged: list[str] | None = None) -> list[GridCell]:
    """A batch's case × variant cells, in the order its runs were planned. One statement over
    the trial table's short columns (never its record JSON); a planned run with no trial yet
    is a cell with none. A trial row that does not read is left out and named in `damaged`,
    as batch_summary leaves it out."""
    damaged = damaged if damaged is not None else []
    runs: dict[tuple[str, str], tuple[list[str], list[TrialSummary]]] = {}
    for row in _rows(source, _GRID, {"batch": batch_id}):
        run_ids, trials = runs.setdefault((row.case_id, row.variant), ([], []))
        if row.run_id not in run_ids:
            run_ids.append(row.run_id)
        if row.id is not None and (trial := _readable(lambda: _trial_summary(row),
                                                       f"trial {row.id}", damaged)):
            trials.append(trial)
    cells = []
    for (case_id, variant), (run_ids, trials) in runs.items():
        trials.sort(key=lambda t: (t.trial, t.id))  # two runs in one cell interleave
        times = [t.duration_ms for t in trials
                 if t.outcome in ("pass", "fail") and t.duration_ms is not None]
        cells.append(GridCell(
            case_id=case_id, variant=variant, run_ids=run_ids, distribution=distribution(trials),
            skipped=sum(t.outcome == "skipped" for t in trials),
            running=sum(t.outcome is None for t in trials),
            median_ms=round(statistics.median(times)) if times else None,
            trials=trials))
    return cells


_PASS_AND_FAIL = """
    SELECT id, outcome FROM trial
    WHERE run_id = :run AND outcome IN ('pass', 'fail')
    ORDER BY trial, id"""


def pass_and_fail(source: Source, run_id: str) -> tuple[str, str] | None:
    """"Compare a pass with a fail" for one run: its lowest-numbered passing trial (A) and its
    lowest-numbered failing one (B); None when it lacks either."""
    first: dict[str, str] = {}
    for row in _rows(source, _PASS_AND_FAIL, {"run": run_id}):
        first.setdefault(row.outcome, row.id)
    return (first["pass"], first["fail"]) if len(first) == 2 else None


# -- a batch's overview --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OverviewTrial:
    """A trial as a batch's Overview counts and lists it: the trial table's short columns."""

    id: str
    run_id: str
    case_id: str
    variant: str
    trial: int
    status: str  # queued, running, done
    outcome: str | None
    failure_reason: str | None
    command_count: int
    duration_ms: int | None
    tokens: int


@dataclass(frozen=True, slots=True)
class VoidGroup:
    """The void trials that share one failure reason, in run order."""

    reason: str
    trial_ids: list[str]


@dataclass(frozen=True)
class BatchFigures:
    """A batch's Overview figures by SPEC.md's rules, from the trial table's short columns."""

    batch_id: str
    counts: Counts
    runs: list[RunItem]  # in planned order, each with its own counts and distribution
    trials: list[OverviewTrial]  # in run order
    tokens: int
    command_min: int | None  # over scored trials, as a run's distribution counts them
    command_median: float | None
    command_max: int | None
    voids: list[VoidGroup]  # the commonest reason first
    origin: str | None = None  # where an imported batch came from, in words

    @property
    def deterministic_runs(self) -> int:
        return sum(run.deterministic for run in self.runs)

    @property
    def durations_ms(self) -> list[int]:
        """Every trial that ran to an outcome and has a time (skipped ones never ran)."""
        return [t.duration_ms for t in self.trials
                if t.outcome in ("pass", "fail", "infra_error") and t.duration_ms is not None]

    def slowest(self, n: int = 5) -> list[OverviewTrial]:
        timed = [t for t in self.trials
                 if t.outcome in ("pass", "fail", "infra_error") and t.duration_ms is not None]
        return sorted(timed, key=lambda t: -(t.duration_ms or 0))[:n]

    def most_tokens(self, n: int = 5) -> list[OverviewTrial]:
        return sorted((t for t in self.trials if t.tokens > 0), key=lambda t: -t.tokens)[:n]


_OVERVIEW_TRIALS = """
    SELECT t.id, t.run_id, t.case_id, t.variant, t.trial, t.status, t.outcome, t.failure_reason,
           t.command_count, t.duration_ms, t.tokens
    FROM trial t LEFT JOIN run r ON r.id = t.run_id
    WHERE t.batch_id = :batch
    ORDER BY r.position, t.run_id, t.trial, t.id"""


def _overview_trial(row: Any) -> OverviewTrial | None:
    """None for a damaged row (a number that is not one), which the figures leave out."""
    # Unpacked, not read by name: a Row's attribute lookups were most of a 1,000-trial read.
    id_, run_id, case_id, variant, trial, status, outcome, reason, commands, ms, tokens = row
    commands, tokens = commands or 0, tokens or 0
    if not (type(trial) is int and type(commands) is int and type(tokens) is int
            and (ms is None or type(ms) is int)):
        return None
    return OverviewTrial(id_, run_id, case_id, variant, trial, status, outcome, reason, commands,
                         ms, tokens)


def batch_figures(source: Source, batch_id: str) -> BatchFigures | None:
    """A batch's Overview figures: two statements over short columns, never the record JSON
    (a 1,000-trial batch reads in a few milliseconds). None when there is no such batch."""
    with read_connection(source) as conn:
        found = list(conn.execute(text(f"SELECT {_ORIGIN} FROM batch b WHERE id = :batch"),
                                  {"batch": batch_id}))
        if not found:
            return None
        rows = list(conn.execute(text(_OVERVIEW_TRIALS), {"batch": batch_id}))
        runs = runs_of(conn, batch_id, sort=Sort("started", False))  # "started": planned order
    trials = [t for row in rows if (t := _overview_trial(row)) is not None]
    outcomes = [t.outcome for t in trials]
    counts = Counts(len(trials), outcomes.count("pass"), outcomes.count("fail"),
                    outcomes.count("infra_error"), outcomes.count("skipped"),
                    sum(t.status == "running" for t in trials))
    commands = sorted(t.command_count for t in trials if t.outcome in ("pass", "fail"))
    voids: dict[str, list[str]] = {}
    for t in trials:
        if t.outcome == "infra_error":
            voids.setdefault(t.failure_reason or "no reason recorded", []).append(t.id)
    return BatchFigures(
        batch_id=batch_id, counts=counts, runs=runs, trials=trials,
        tokens=sum(t.tokens for t in trials),
        command_min=commands[0] if commands else None,
        command_median=statistics.median(commands) if commands else None,
        command_max=commands[-1] if commands else None,
        voids=[VoidGroup(reason, ids) for reason, ids in
               sorted(voids.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        origin=found[0][0])


@dataclass(frozen=True, slots=True)
class TrialCost:
    """What a batch's Overview reads out of one finished trial's record."""

    id: str
    model: str | None  # as the harness phase names it; None for the command harness
    usage: Usage
    cost: float | None  # US dollars at list price; None: no model recorded, or no price known
    phase_ms: dict[str, int]  # each phase's total time in this trial (two turns add up)


@dataclass(frozen=True, slots=True)
class PhaseStat:
    phase: str
    trials: int  # how many trials went through it
    median_ms: int
    p90_ms: int  # nearest rank: a time some trial really took


@dataclass(frozen=True, slots=True)
class CostSummary:
    usage: Usage  # summed over every finished trial's record
    total: float | None  # over the priced trials; None when none is
    priced: int
    unpriced: int  # trials whose cost is unknown (said so, never counted as 0)
    models: list[str]


def price(usage: Usage, model: str | None, host: str | None = None,
          at: str | None = None) -> float | None:
    """Tokens at `model`'s list price in US dollars, as of `at` (ISO): engine.cost.usage_cost."""
    return usage_cost(usage, model, host, at)


_COSTS = """
    SELECT t.id, t.started_at, {figures} AS figures FROM trial t
    WHERE t.batch_id = :batch AND t.status = 'done'
      AND t.id NOT IN (SELECT value FROM json_each(:skip))"""
# One parse for all: the cost it was saved with, and the last turn's model (engine.cost).
_FIGURES_OF = "json_extract(t.record, '$.phases', '$.usage', '$.cost_usd', '$.turns[#-1].model')"


def trial_costs(source: Source, batch_id: str, skip: Iterable[str] = ()) -> list[TrialCost]:
    """The model, usage, price and phase times of a batch's finished trials, but those in
    `skip` (read before: a finished record does not change). SQLite takes the phases and usage
    out of each record in one parse; nothing else of a record is read or validated, and a
    record that does not read is left out."""
    params = {"batch": batch_id, "skip": json.dumps(list(skip))}
    with read_connection(source) as conn:
        try:
            rows = list(conn.execute(text(_COSTS.format(figures=_FIGURES_OF)), params))
        except sa_exc.OperationalError:  # a damaged record fails the statement: check each
            checked = f"CASE WHEN json_valid(t.record) THEN {_FIGURES_OF} END"
            rows = list(conn.execute(text(_COSTS.format(figures=checked)), params))
    costs = []
    for row in rows:
        if row.figures is None:  # no record, or one that is not JSON
            continue
        try:
            phases, usage_json, saved, last_model = json.loads(row.figures)
            usage = Usage.model_validate(usage_json or {})
        except (ValueError, TypeError):  # not a record's shape; ValidationError is a ValueError
            continue
        phase_ms: dict[str, int] = {}
        found = None
        for span in phases if isinstance(phases, list) else []:
            if not isinstance(span, dict) or not isinstance(span.get("phase"), str):
                continue
            start, end = span.get("start_ms"), span.get("end_ms")
            if isinstance(start, int) and isinstance(end, int) and end >= start:
                phase_ms[span["phase"]] = phase_ms.get(span["phase"], 0) + end - start
            if span["phase"] == "harness" and isinstance(span.get("detail"), str):
                found = harness_model(span["detail"])
        model, host = found or (None, None)
        if isinstance(last_model, str) and last_model and last_model != model:
            model, host = last_model, None  # the model that served it, where the turn says
        cost = saved if isinstance(saved, (int, float)) and not isinstance(saved, bool) else None
        if cost is None and not last_model:  # saved before turns named models: priced now
            cost = price(usage, model, host, row.started_at)
        costs.append(TrialCost(row.id, model, usage, float(cost) if cost is not None else None,
                               phase_ms))
    return costs


def phase_stats(costs: Iterable[TrialCost]) -> list[PhaseStat]:
    """Each phase's time per trial across a batch: its median and 90th percentile, the
    slowest median first."""
    times: dict[str, list[int]] = {}
    for cost in costs:
        for phase, ms in cost.phase_ms.items():
            times.setdefault(phase, []).append(ms)
    stats = []
    for phase, values in times.items():
        values.sort()
        p90 = values[-(-9 * len(values) // 10) - 1]  # nearest rank: the ceil(0.9 n)-th value
        stats.append(PhaseStat(phase, len(values), round(statistics.median(values)), p90))
    return sorted(stats, key=lambda s: (-s.median_ms, -s.p90_ms, s.phase))


def cost_summary(costs: Iterable[TrialCost]) -> CostSummary:
    """A batch's tokens and cost: priced trials summed, the others counted as unknown."""
    usage, total, priced, unpriced, models = Usage(), 0.0, 0, 0, set()
    for cost in costs:
        usage = usage.add(cost.usage)
        if cost.model:
            models.add(cost.model)
        if cost.cost is None:
            unpriced += 1
        else:
            total, priced = total + cost.cost, priced + 1
    return CostSummary(usage, total if priced else None, priced, unpriced, sorted(models))
