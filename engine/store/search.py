"""Full-text search over every stored trial: the query language, the FTS5 index and its SQL.

The index (`search_index`) is a contentless FTS5 table: it keeps the tokens, not the text,
so it costs a fraction of the store; a hit's snippet is cut from the stored rows it came
from. Its rowid says where a text came from: the trial's index sequence (`search_trial`,
so newer trials have larger rowids and `ORDER BY rowid DESC` pages without sorting the
hits), then where (reason, prompt, item, evidence), the position and the field. A second
column, `facet`, holds tokens for the trial's batch, case, variant and outcome and the
text's field, so filters and scopes are FTS terms intersected inside the index.

A contentless table forgets a row only when told its text again: `unindex_trials` reads
the trial's stored rows back, so every writer that changes a trial's rows removes it from
the index first, in the same transaction; it is indexed again after (indexer.py: a saved
trial in a transaction of its own, a store from before the index a step at a time). Only
what is stored is indexed, and records are redacted before they are stored.

Query language: words and "quoted phrases" (all must match), `in:FIELD`, `outcome:`,
`case:`, `variant:`, `label:` and `batch:` filters. A case or variant is named by its
beginning, in any letter case (`case:greet` finds greets_user unless a case is greet). Every term reaches MATCH as a quoted
FTS5 string, so the user's `"`, `*`, `NEAR`, `-`, `:` or parentheses are only text.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field as dc_field
from typing import Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

__all__ = ["QueryError", "SearchHit", "Query", "parse_query", "create_index",
           "guarded", "index_trial", "index_stored", "unindex_trials", "reindex_trials", "missing", "pending",
           "search", "MAX_QUERY_CHARS"]

Where = Literal["item", "evidence", "reason", "prompt"]
MAX_QUERY_CHARS = 1_000
MAX_TERMS = 32
SNIPPET_CHARS = 200
MAX_TEXT_CHARS = 100_000  # of one field: a huge command output is indexed by its head
OUTCOME_VALUES = ("pass", "fail", "infra_error", "skipped")
FIELDS = ("output", "message", "command", "tool", "path", "evidence", "reason", "prompt")
FILTERS = ("in", "outcome", "case", "variant", "label", "batch")
# Within a trial, rowid DESC reads: the reason, the prompts, the items, the evidence.
_RANK = {"evidence": 0, "item": 1, "prompt": 2, "reason": 3}
_WHERE_OF_RANK = {rank: where for where, rank in _RANK.items()}
_CODE = {name: code for code, name in enumerate(FIELDS)}
_MAX_POSITION = (1 << 26) - 1
# search_trial.seq (a rowid's top 31 bits): saved trials count up from here, trials caught up
# on (indexer.py) count down from it, so `ORDER BY rowid DESC` lists the newest first either way.
LIVE_SEQ = 1 << 30
_TOKEN = re.compile(r"[^\W_]+")  # unicode61's token characters: letters and digits
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

_DDL = (
    "CREATE TABLE search_trial (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "trial_id TEXT NOT NULL UNIQUE, facet TEXT NOT NULL)",
    # Contentless: the text is in the store already. The per-row sizes (columnsize) stay,
    # though nothing ranks by them: without them the table cannot be scanned (SELECT *).
    "CREATE VIRTUAL TABLE search_index USING fts5(body, facet, content='', "
    "tokenize='unicode61 remove_diacritics 2')",
)
_INSERT = "INSERT INTO search_index (rowid, body, facet) VALUES (?, ?, ?)"
_DELETE = "INSERT INTO search_index (search_index, rowid, body, facet) VALUES ('delete', ?, ?, ?)"


class QueryError(ValueError):
    """A search query that cannot be run; the message is one sentence saying why."""


class SearchHit(BaseModel):
    """One text that matched: the trial it belongs to and where in its record it is."""

    model_config = ConfigDict(frozen=True)

    trial_id: str
    batch_id: str
    case_id: str
    variant: str
    trial: int
    outcome: str | None
    where: Where
    position: int | None  # item: its index in the trajectory; evidence: the validation's; prompt: the turn's
    field: str  # message, command, output, tool, path, evidence, reason, prompt
    snippet: str  # the text around the match, at most SNIPPET_CHARS characters, on one line
    marks: list[tuple[int, int]]  # [start, end) of each match inside the snippet


@dataclass
class Query:
    """A parsed query: phrases that must all match, and filters."""

    phrases: list[str] = dc_field(default_factory=list)
    scopes: list[str] = dc_field(default_factory=list)
    outcomes: list[str] = dc_field(default_factory=list)
    cases: list[str] = dc_field(default_factory=list)
    variants: list[str] = dc_field(default_factory=list)
    labels: list[str] = dc_field(default_factory=list)
    batches: list[str] = dc_field(default_factory=list)


# -- the query language --------------------------------------------------------------

def _quoted(text: str, start: int) -> tuple[str, int]:
    """The text of a quoted term opening at `start`, and where it ends; an unclosed quote
    runs to the end of the query."""
    end = text.find('"', start + 1)
    if end < 0:
        return text[start + 1:], len(text)
    return text[start + 1:end], end + 1


def parse_query(text: str) -> Query:
    """`text` in the query language as a Query; QueryError for what cannot be searched."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(text):,} characters long; a query is at most "
                         f"{MAX_QUERY_CHARS:,}")
    text = _CONTROL.sub(" ", text)
    query = Query()
    lists = dict(outcome=query.outcomes, case=query.cases, variant=query.variants,
                 label=query.labels, batch=query.batches)
    terms = 0
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        prefix = re.match(r"([A-Za-z]+):", text[i:])
        if prefix:
            name = prefix.group(1).lower()
            if name not in FILTERS:
                raise QueryError(f"unknown filter {prefix.group(1)}: (known: "
                                 f"{', '.join(f + ':' for f in FILTERS)}); put the term in quotes "
                                 "to search for it as text")
            i += prefix.end()
            if i < len(text) and text[i] == '"':
                value, i = _quoted(text, i)
            else:
                end = i
                while end < len(text) and not text[end].isspace():
                    end += 1
                value, i = text[i:end], end
            value = value.strip()
            if not value:
                raise QueryError(f"the filter {name}: needs a value, e.g. {_EXAMPLE[name]}")
            if name == "in":
                if value.lower() not in FIELDS:
                    raise QueryError(f"in:{value} is not a place to search; use one of "
                                     f"{', '.join('in:' + f for f in FIELDS)}")
                query.scopes.append(value.lower())
            elif name == "outcome":
                if value.lower() not in OUTCOME_VALUES:
                    raise QueryError(f"outcome:{value} is not an outcome; use one of "
                                     f"{', '.join('outcome:' + o for o in OUTCOME_VALUES)}")
                query.outcomes.append(value.lower())
            else:
                lists[name].append(value)
        elif text[i] == '"':
            phrase, i = _quoted(text, i)
            query.phrases.append(phrase)
        else:
            end = i
            while end < len(text) and not text[end].isspace():
                end += 1
            query.phrases.append(text[i:end])
            i = end
        terms += 1
        if terms > MAX_TERMS:
            raise QueryError(f"the query has more than {MAX_TERMS} terms; use fewer")
    if not query.phrases:
        raise QueryError("the query has no words to search for; add a word or a \"phrase\" "
                         "besides its filters")
    return query


_EXAMPLE = {"in": "in:command", "outcome": "outcome:fail", "case": "case:greets",
            "variant": "variant:scripted", "label": 'label:"env problem"', "batch": "batch:b_1a2b"}


def _fts_string(text: str) -> str:
    """`text` as an FTS5 string: a phrase of its tokens whatever characters it holds."""
    return '"' + text.replace('"', '""') + '"'


def _token(kind: str, value: str) -> str:
    """A facet's one token: a letter and a hash, so any value is one exact token."""
    return kind + hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def _any_of(tokens: list[str]) -> str:
    return "(" + " OR ".join(f"facet : {_fts_string(t)}" for t in tokens) + ")"


def match_expression(query: Query, batches: list[str]) -> str | None:
    """The FTS5 MATCH expression of `query`; None when its words hold no token at all."""
    phrases = [p for p in query.phrases if _TOKEN.search(p)]
    if not phrases:
        return None
    parts = [f"body : {_fts_string(p)}" for p in phrases]
    for kind, values in (("f", query.scopes), ("o", query.outcomes), ("c", query.cases),
                         ("v", query.variants), ("b", batches)):
        if values:
            parts.append(_any_of([_token(kind, v) if kind != "f" else "f" + v for v in values]))
    return " AND ".join(parts)


# -- what is indexed -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Doc:
    where: str
    position: int
    field: str
    text: str


def _text(value: Any) -> str:
    return value[:MAX_TEXT_CHARS] if isinstance(value, str) else ""


def _item_docs(position: int, item: Any) -> list[_Doc]:
    """The texts of one trajectory item (its stored JSON value), by field."""
    if not isinstance(item, dict):
        return []
    kind = item.get("kind")
    texts: list[tuple[str, str]] = []
    if kind == "message":
        texts.append(("message", _text(item.get("text"))))
    elif kind == "command":
        texts += [("command", _text(item.get("command"))), ("output", _text(item.get("output")))]
    elif kind == "toolCall":
        name = _text(item.get("name"))
        args = item.get("input")
        if args is not None:
            name = f"{name} {args if isinstance(args, str) else json.dumps(args)}"[:MAX_TEXT_CHARS]
        texts += [("tool", name), ("output", _text(item.get("output")))]
    elif kind == "fileChange":
        texts.append(("path", _text(item.get("path"))))
    return [_Doc("item", position, f, t) for f, t in texts if t.strip()]


def _leaves(value: Any) -> Iterable[str]:
    """The strings inside a JSON value, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)


def _record_docs(record: Any, reason: str | None) -> list[_Doc]:
    """The failure reason, each turn's prompt and each validation's evidence."""
    docs = []
    if reason and reason.strip():
        docs.append(_Doc("reason", 0, "reason", _text(reason)))
    if isinstance(record, dict):
        turns = record.get("turns")
        for position, turn in enumerate(turns if isinstance(turns, list) else ()):
            prompt = _text(turn.get("prompt")) if isinstance(turn, dict) else ""
            if prompt.strip():
                docs.append(_Doc("prompt", position, "prompt", prompt))
        validations = record.get("validations")
        for position, validation in enumerate(validations if isinstance(validations, list) else ()):
            if isinstance(validation, dict):
                evidence = _text("\n".join(_leaves(validation.get("evidence"))))
                if evidence.strip():
                    docs.append(_Doc("evidence", position, "evidence", evidence))
    return docs


def _rowid(seq: int, doc: _Doc) -> int:
    return (seq << 32) | (_RANK[doc.where] << 29) | ((_MAX_POSITION - doc.position) << 3) | _CODE[doc.field]


def _decode(rowid: int) -> tuple[str, int, str]:
    """(where, position, field) of an index rowid."""
    return (_WHERE_OF_RANK[(rowid >> 29) & 3], _MAX_POSITION - ((rowid >> 3) & _MAX_POSITION),
            FIELDS[rowid & 7])


def _trial_facet(batch_id: str, case_id: str, variant: str, outcome: str | None) -> str:
    return " ".join((_token("b", batch_id), _token("c", case_id), _token("v", variant),
                     _token("o", outcome or "")))


def _rows(seq: int, facet: str, docs: list[_Doc]) -> list[tuple[int, str, str]]:
    """The index rows of a trial's texts, in rowid order: FTS5 writes its pending terms out
    as a new segment whenever a rowid is not above the last one written, so rows in any
    other order (the reason, the highest, comes first) made a segment a row."""
    return sorted((_rowid(seq, d), d.text, f"{facet} f{d.field}") for d in docs
                  if d.position <= _MAX_POSITION)


def _docs(record: Any, reason: str | None, items: list[tuple[int, str]]) -> list[_Doc]:
    docs = _record_docs(record, reason)
    for position, data in items:
        docs += _item_docs(position, _loads(data))
    return docs


def _loads(data: Any) -> Any:
    try:
        return json.loads(data) if isinstance(data, (str, bytes)) else None
    except (ValueError, RecursionError):
        return None


# -- keeping the index current (called inside the store writer's transactions) -------

def create_index(conn: Connection) -> None:
    """The index's tables, empty (dropping any left from before); trials indexed as they are
    saved get sequences above LIVE_SEQ, those caught up on below it."""
    conn.exec_driver_sql("DROP TABLE IF EXISTS search_index")
    conn.exec_driver_sql("DROP TABLE IF EXISTS search_trial")
    for ddl in _DDL:
        conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("DELETE FROM sqlite_sequence WHERE name = 'search_trial'")
    conn.exec_driver_sql("INSERT INTO sqlite_sequence (name, seq) VALUES ('search_trial', ?)", (LIVE_SEQ,))


def index_trial(conn: Connection, trial_id: str, columns: dict[str, Any], record_json: str,
                items: list[tuple[int, str]], seq: int | None = None) -> None:
    """Index a trial that is not in the index: `columns` its trial row's batch_id, case_id,
    variant, outcome and failure_reason; `record_json` its record column; `items`
    (position, JSON) of its trajectory items, as stored; `seq` its sequence (default: after
    every other, the newest)."""
    facet = _trial_facet(columns["batch_id"], columns["case_id"], columns["variant"],
                         columns.get("outcome"))
    seq = conn.exec_driver_sql("INSERT INTO search_trial (seq, trial_id, facet) VALUES (?, ?, ?)",
                               (seq, trial_id, facet)).lastrowid
    rows = _rows(seq, facet, _docs(_loads(record_json), columns.get("failure_reason"), items))
    if rows:
        conn.exec_driver_sql(_INSERT, rows)


def _stored(conn: Connection, trial_id: str) -> tuple[dict[str, Any], str, list[tuple[int, str]]] | None:
    row = conn.exec_driver_sql(
        "SELECT batch_id, case_id, variant, outcome, failure_reason, record, status FROM trial "
        "WHERE id = ?", (trial_id,)).fetchone()
    if row is None:
        return None
    items = conn.exec_driver_sql("SELECT position, json FROM trajectory_item WHERE trial_id = ? "
                                 "ORDER BY position", (trial_id,)).fetchall()
    columns = dict(batch_id=row[0], case_id=row[1], variant=row[2], outcome=row[3], failure_reason=row[4],
                   status=row[6])
    return columns, row[5], [tuple(i) for i in items]


def unindex_trials(conn: Connection, trial_ids: Iterable[str]) -> None:
    """Take these trials out of the index: their texts, read back from their stored rows as
    they were indexed, are removed. Call it before their rows change or go."""
    for trial_id in trial_ids:
        held = conn.exec_driver_sql("SELECT seq, facet FROM search_trial WHERE trial_id = ?",
                                    (trial_id,)).fetchone()
        if held is None:
            continue
        seq, facet = held
        stored = _stored(conn, trial_id)
        if stored is not None:
            columns, record_json, items = stored
            rows = _rows(seq, facet, _docs(_loads(record_json), columns["failure_reason"], items))
            if rows:
                conn.exec_driver_sql(_DELETE, rows)
        conn.exec_driver_sql("DELETE FROM search_trial WHERE seq = ?", (seq,))


def reindex_trials(conn: Connection, trial_ids: Iterable[str]) -> None:
    """Index these trials again from their stored rows (after a change to them)."""
    for trial_id in trial_ids:
        unindex_trials(conn, [trial_id])
        index_stored(conn, trial_id)


def index_stored(conn: Connection, trial_id: str, older: bool = False) -> bool:
    """Index a finished trial from its stored rows unless it is indexed already; False when
    there was nothing to do (indexed, not finished, or gone). `older`: a trial caught up on
    (indexer.py), given a sequence below every other so hits stay newest first."""
    if conn.exec_driver_sql("SELECT 1 FROM search_trial WHERE trial_id = ?", (trial_id,)).fetchone():
        return False
    stored = _stored(conn, trial_id)
    if stored is None or stored[0]["status"] != "done":
        return False
    index_trial(conn, trial_id, *stored, seq=_older_seq(conn) if older else None)
    return True


def _older_seq(conn: Connection) -> int | None:
    """A sequence below every one in use, from the room below LIVE_SEQ; None when there is
    none (an index made before that room was kept): the trial is then listed as the newest."""
    least = conn.exec_driver_sql("SELECT min(seq) FROM search_trial").scalar_one()
    seq = LIVE_SEQ if least is None else min(least, LIVE_SEQ + 1) - 1
    return seq if seq > 0 else None


_MISSING = ("FROM trial t WHERE t.status = 'done' "
            "AND NOT EXISTS (SELECT 1 FROM search_trial s WHERE s.trial_id = t.id)")


def missing(conn: Connection, newest_first: bool = False) -> list[str]:
    """The finished trials the index does not hold (a store from before the index, or a
    process that stopped between a save and its indexing), in the order they started."""
    order = "DESC" if newest_first else "ASC"
    return [row[0] for row in conn.exec_driver_sql(
        f"SELECT t.id {_MISSING} ORDER BY t.started_at {order}, t.rowid {order}").fetchall()]


def pending(conn: Connection) -> int:
    """How many finished trials the index does not hold yet."""
    return conn.exec_driver_sql(f"SELECT count(*) {_MISSING}").scalar_one()


# What no savepoint survives: SQLite may roll the whole transaction back on these.
_FATAL = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_NOMEM", "SQLITE_READONLY",
          "SQLITE_CANTOPEN", "SQLITE_INTERRUPT")


def guarded(conn: Connection, write: Callable[[], None]) -> None:
    """Run an index write in a savepoint: a damaged index must not cost the record being saved
    (the trial is then missing from search until it is saved again)."""
    try:
        with conn.begin_nested():
            write()
    except DBAPIError as e:
        # Only a damaged index is passed over. A full disk, an I/O error or a lock may have
        # rolled the whole transaction back (SQLite does so on SQLITE_FULL): the record's write
        # must fail with it, never be said saved.
        name = getattr(e.orig, "sqlite_errorname", "") or ""
        driver = conn.connection.dbapi_connection
        if name.startswith(_FATAL) or not getattr(driver, "in_transaction", True):
            raise


# -- searching -----------------------------------------------------------------------

_SELECT = ("SELECT f.rowid, s.trial_id, t.batch_id, t.case_id, t.variant, t.trial, t.outcome "
           "FROM search_index f JOIN search_trial s ON s.seq = (f.rowid >> 32) "
           "JOIN trial t ON t.id = s.trial_id WHERE search_index MATCH ?")


def _batch_ids(conn: Connection, wanted: list[str]) -> list[str] | None:
    """Full batch ids for ids or unique prefixes (those naming none left out); None when
    none names a batch."""
    full = []
    for value in wanted:
        exact = "SELECT 1 FROM trial WHERE batch_id = ? UNION ALL SELECT 1 FROM batch WHERE id = ?"
        if conn.exec_driver_sql(exact, (value, value)).fetchone():
            full.append(value)
            continue
        pattern = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        ids = [r[0] for r in conn.exec_driver_sql(
            "SELECT id FROM batch WHERE id LIKE ? ESCAPE '\\' LIMIT 2", (pattern,)).fetchall()]
        if len(ids) > 1:
            raise QueryError(f"batch:{value} matches more than one batch; give more of its id")
        full += ids
    return full or None


MAX_NAMES = 200  # cases or variants one case: or variant: filter may stand for


def _names(conn: Connection, column: str, wanted: list[str]) -> list[str]:
    """The case ids (or variants) that `wanted` name: the value itself when a trial has it,
    else those equal to it but for letter case, else those it begins (in any case)."""
    names: list[str] = []
    for value in wanted:
        pattern = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        found = [r[0] for r in conn.exec_driver_sql(
            f"SELECT DISTINCT {column} FROM trial WHERE {column} LIKE ? ESCAPE '\\' "
            f"ORDER BY length({column}) LIMIT ?",
            (pattern, MAX_NAMES)).fetchall()]
        same_but_case = [f for f in found if f.casefold() == value.casefold()]
        names += [value] if value in found else same_but_case or found
    return names


def search(conn: Connection, text: str, limit: int = 50, offset: int = 0,
           batch_id: str | None = None) -> list[SearchHit]:
    """A page of the hits of `text`, newest trials first; QueryError for a bad query."""
    query = parse_query(text)
    limit, offset = max(0, min(limit, 10_000)), max(0, min(offset, 1 << 40))
    batches = _batch_ids(conn, query.batches) if query.batches else []
    if batches is None:
        return []
    for names, column in ((query.cases, "case_id"), (query.variants, "variant")):
        if names:
            names[:] = _names(conn, column, names)
            if not names:
                return []
    if batch_id is not None:
        if batches and batch_id not in batches:
            return []
        batches = [batch_id]
    expression = match_expression(query, batches)
    if expression is None or limit == 0:
        return []
    if query.labels:
        rows = _labelled(conn, expression, query.labels, limit + offset)[offset:]
    else:
        rows = conn.exec_driver_sql(_SELECT + " ORDER BY f.rowid DESC LIMIT ? OFFSET ?",
                                    (expression, limit, offset)).fetchall()
    return _hits(conn, rows, query)


def _labelled(conn: Connection, expression: str, labels: list[str], wanted: int) -> list[Any]:
    """The hits among trials whose note carries one of `labels`: few trials carry a label, so
    each one's rowid range is searched in turn, newest first."""
    marks = ", ".join("?" * len(labels))
    seqs = [r[0] for r in conn.exec_driver_sql(
        f"SELECT s.seq FROM search_trial s JOIN note n ON n.target = s.trial_id "
        f"WHERE n.label IN ({marks}) ORDER BY s.seq DESC", tuple(labels)).fetchall()]
    rows: list[Any] = []
    for seq in seqs:
        rows += conn.exec_driver_sql(
            _SELECT + " AND f.rowid BETWEEN ? AND ? ORDER BY f.rowid DESC LIMIT ?",
            (expression, seq << 32, ((seq + 1) << 32) - 1, wanted - len(rows))).fetchall()
        if len(rows) >= wanted:
            break
    return rows


def _hits(conn: Connection, rows: list[Any], query: Query) -> list[SearchHit]:
    records: dict[str, Any] = {}
    phrases = [_norm_tokens(p) for p in query.phrases]
    hits = []
    for rowid, trial_id, batch_id, case_id, variant, trial, outcome in rows:
        where, position, field = _decode(rowid)
        text = _source_text(conn, records, trial_id, where, position, field)
        snippet, marks = _snippet(text, [p for p in phrases if p])
        hits.append(SearchHit(trial_id=trial_id, batch_id=batch_id, case_id=case_id, variant=variant,
                              trial=trial, outcome=outcome, where=where,  # type: ignore[arg-type]
                              position=None if where == "reason" else position, field=field,
                              snippet=snippet, marks=marks))
    return hits


def _source_text(conn: Connection, records: dict[str, Any], trial_id: str, where: str,
                 position: int, field: str) -> str:
    """The stored text a hit came from."""
    if where == "item":
        row = conn.exec_driver_sql("SELECT json FROM trajectory_item WHERE trial_id = ? AND position = ?",
                                   (trial_id, position)).fetchone()
        docs = _item_docs(position, _loads(row[0]) if row else None)
    else:
        if trial_id not in records:
            row = conn.exec_driver_sql("SELECT record, failure_reason FROM trial WHERE id = ?",
                                       (trial_id,)).fetchone()
            records[trial_id] = _record_docs(_loads(row[0]), row[1]) if row else []
        docs = records[trial_id]
    return next((d.text for d in docs if (d.where, d.position, d.field) == (where, position, field)), "")


# -- snippets ------------------------------------------------------------------------

def _fold(token: str) -> str:
    """A token as unicode61 compares it: case folded, diacritics removed."""
    return "".join(c for c in unicodedata.normalize("NFD", token.casefold())
                   if not unicodedata.combining(c))


def _norm_tokens(text: str) -> list[str]:
    return [_fold(m.group()) for m in _TOKEN.finditer(text)]


def _snippet(text: str, phrases: list[list[str]]) -> tuple[str, list[tuple[int, int]]]:
    """At most SNIPPET_CHARS of `text` around its first match, on one line, and the matches."""
    tokens = list(_TOKEN.finditer(text))
    folded = [_fold(t.group()) for t in tokens]
    found: list[tuple[int, int]] = []
    for phrase in phrases:
        n = len(phrase)
        for i in range(len(tokens) - n + 1):
            if folded[i:i + n] == phrase:
                found.append((tokens[i].start(), tokens[i + n - 1].end()))
    found.sort()
    start = max(0, found[0][0] - 40) if found else 0
    if found and len(text) - start < SNIPPET_CHARS:
        start = max(0, len(text) - SNIPPET_CHARS)
    snippet = re.sub(r"\s", " ", text[start:start + SNIPPET_CHARS])
    marks, last = [], -1
    for begin, end in found:
        if begin >= last and end - start <= len(snippet) and begin >= start:
            marks.append((begin - start, end - start))
            last = end
    return snippet, marks
