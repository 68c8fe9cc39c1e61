"""The caps of SPEC.md "Limits on what is stored", each cut marked visibly.

Callers redact first (`engine.redact`) and cap after: a key cut in half would
no longer match a pattern, and its first half would be stored readable. What
the agent controls is also cut while reading, before redaction: such a cut is
marked (`read_cut`), and `redact` leaves out what only the dropped rest could
decide. Truncation never changes a verdict; checks read the uncut data.

`clean` makes any JSON-ish value storable (no lone surrogate, no NaN, bounded
nesting): what an agent prints must never stop a record from being written.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel

if TYPE_CHECKING:
    from .models import TrajectoryItem
    from .redact import Redactor

ITEM_TEXT = 4000  # one trajectory item's text
EVIDENCE_TOTAL = 64000  # one validator's evidence, serialised as JSON
EVIDENCE_VALUE = 16000  # one string in the evidence
EVIDENCE_ENTRIES = 64  # one list in the evidence (calls, log entries)
SOURCE_FILES = 100  # the eval's source snapshot
SOURCE_CHARS = 1_000_000

# What the agent controls (issue 8): every one is cut while reading, kept bounded in memory,
# and cut again to these caps, after redaction, when stored.
ITEM_NAME = 1000  # an item's role, tool name, file path or change
TOOL_INPUT = 4000  # a toolCall's input, as JSON text
ITEM_DEPTH = 32  # levels of nesting kept in a toolCall's input; deeper ones are cut
ITEMS_PER_TURN = 2000  # trajectory items kept per turn; the rest are counted in a marked item
ITEMS_PER_TRIAL = 10_000
TRAJECTORY_CHARS = 5_000_000  # all items of a trial, as stored JSON
FINAL_MESSAGE = ITEM_TEXT  # a turn's final message
RAW_OUTPUT = EVIDENCE_VALUE  # a turn's raw output (lines that are no item) and stderr
FAILURE_REASON = 1000  # failure.reason, which may quote the harness
USAGE_MAX = 10**12  # any one token count; far above any real turn, far below SQLite's 2**63
DIFF_FILE = 100_000  # one file's section of a diff; a larger one is replaced by one line
DIFF_TOTAL = 1_000_000  # one diff (a turn's, or the cumulative one)
DIFF_TRIAL = 4_000_000  # all diffs of a trial together
DIFF_SOURCE = 1_000_000  # a file larger than this (bytes, either side) is named, not diffed
FILES_CHANGED = 1000  # paths listed in a turn's files_changed

# Cuts made while reading come before redaction, so they are generous, READ_FACTOR times the
# stored cap. Keys before such a cut may shrink to `redact.MARK` and bring it inside the stored
# cap, so it is marked (`read_cut`): redaction leaves out the half of a key it may end in.
READ_FACTOR = 4
ITEM_READ = READ_FACTOR * ITEM_TEXT
NAME_READ = READ_FACTOR * ITEM_NAME
TOOL_INPUT_READ = READ_FACTOR * TOOL_INPUT
RAW_READ = READ_FACTOR * RAW_OUTPUT
DIFF_FILE_READ = READ_FACTOR * DIFF_FILE
DIFF_TOTAL_READ = READ_FACTOR * DIFF_TOTAL
LINE_READ = 1_000_000  # bytes of one stdout line handed to the harness; the rest is dropped

# Strings this short are left whole when evidence must shrink; the mark alone is about as long.
_SHORTEST_CUT = 64


def _mark(dropped: int) -> str:
    return f"\n… [truncated {dropped:,} chars]"


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters with a mark saying how much went."""
    if len(text) <= limit:
        return text, False
    limit = max(limit, 0)
    keep = max(limit - len(_mark(len(text))), 0)
    mark = _mark(len(text) - keep)
    # The count can lose a digit as `keep` grows; the mark is then shorter, never longer.
    return (text[:keep] + mark)[:limit], True


# --- cuts made while reading, before redaction -------------------------------------------------

_READ_MARK = re.compile(r"\n… \[truncated [\d,]+ (?:chars|bytes) while reading\]")


def read_mark(dropped: int, unit: str = "chars") -> str:
    return f"\n… [truncated {dropped:,} {unit} while reading]"


def read_cut(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut while reading, before redaction: its first `limit` characters and a mark that
    tells `redact` the text went on."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + read_mark(len(text) - limit), True


def quote(text: str, limit: int) -> str:
    """The start of a line to quote in a sentence (a failure reason), cut before redaction:
    when it is cut, its last, unfinished word goes too, because every key, token and
    password the redactor knows is one unbroken word, and half of one would not match."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = max(head.rfind(" "), head.rfind("\t"))
    return (head[:space] if space > 0 else "") + "…"


def redacted(redactor: Redactor, text: str) -> str:
    """`redactor.text(text)`, where each read mark (`read_cut`) ends a piece that went on: what
    only the dropped rest could decide, such as the first half of a key, is left out
    (`Redactor.head(…, complete=False)`), and the mark becomes an ordinary one."""
    pieces, start = [], 0
    for cut in _READ_MARK.finditer(text):
        pieces.append(redactor.head(text[start:cut.start()], sys.maxsize, complete=False)[0])
        pieces.append(cut.group().replace(" while reading", ""))
        start = cut.end()
    if not pieces:
        return redactor.text(text)
    return "".join(pieces) + redactor.text(text[start:])


def texts(value: Any) -> Iterator[str]:
    """Every string in a value (models, dicts, lists, tuples), keys included, without a copy."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, BaseModel):
            stack.extend(v for _, v in item)


def holds_secret(redactor: Redactor, value: Any) -> bool:
    """Whether `redact` would change anything in `value`: one pass over all its texts joined
    (a line break between two meets every pattern as the end of a text does), so a clean
    value of 20,000 items is checked without copying each one."""
    joined = "\n".join(texts(value))
    return bool(_READ_MARK.search(joined)) or redactor.text(joined) != joined


def redact(redactor: Redactor, value: Any) -> Any:
    """`redactor.value(value)`, with every text cut while reading redacted as `redacted` does.
    What it returns holds no read mark, so redacting it again changes nothing more."""
    if isinstance(value, str):
        return redacted(redactor, value) if _READ_MARK.search(value) else redactor.value(value)
    if isinstance(value, dict):
        return {redact(redactor, k): redact(redactor, v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(redactor, v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact(redactor, v) for v in value)
    if isinstance(value, BaseModel):
        return value.model_copy(update={name: redact(redactor, v) for name, v in value})
    return value


# --- evidence -----------------------------------------------------------------------------------


def _cap(obj: Any, string_limit: int) -> tuple[Any, int, bool]:
    """(copy of obj with strings and lists cut, entries dropped, whether anything was cut)."""
    if isinstance(obj, str):
        text, cut = truncate(obj, string_limit)
        return text, 0, cut
    if isinstance(obj, dict):
        items = [(key, _cap(value, string_limit)) for key, value in obj.items()]
        return ({key: value for key, (value, _, _) in items},
                sum(d for _, (_, d, _) in items), any(c for _, (_, _, c) in items))
    if isinstance(obj, (list, tuple)):
        items = [_cap(value, string_limit) for value in obj[:EVIDENCE_ENTRIES]]
        dropped = max(len(obj) - EVIDENCE_ENTRIES, 0)
        return ([value for value, _, _ in items], dropped + sum(d for _, d, _ in items),
                bool(dropped) or any(c for _, _, c in items))
    return obj, 0, False


def _size(obj: Any) -> int:
    return len(json.dumps(obj, ensure_ascii=False, default=str))


def _capped(evidence: dict, string_limit: int) -> tuple[dict, bool]:
    capped, dropped, cut = _cap(evidence, string_limit)
    if dropped:
        capped["truncated_entries"] = dropped
    return capped, cut


def cap_evidence(evidence: dict) -> tuple[dict, bool]:
    """A copy of `evidence` within the caps, and whether anything was cut.

    Every string at most EVIDENCE_VALUE characters, every list at most
    EVIDENCE_ENTRIES entries (the number of entries dropped is kept under the
    top-level key "truncated_entries"), and the whole, as JSON, at most
    EVIDENCE_TOTAL characters: the longest strings are cut further, all to one
    common length, until it fits.
    """
    capped, cut = _capped(evidence, EVIDENCE_VALUE)
    if _size(capped) <= EVIDENCE_TOTAL:
        return capped, cut
    # The largest common string length that fits; size grows with it, so bisect.
    low, high = _SHORTEST_CUT, EVIDENCE_VALUE
    if _size(_capped(evidence, low)[0]) > EVIDENCE_TOTAL:
        return _as_text(capped), True
    while low < high:
        middle = (low + high + 1) // 2
        if _size(_capped(evidence, middle)[0]) <= EVIDENCE_TOTAL:
            low = middle
        else:
            high = middle - 1
    return _capped(evidence, low)[0], True


def _as_text(capped: dict) -> dict:
    """Too many small values to fit by cutting strings: keep the start of the JSON text."""
    text = json.dumps(capped, ensure_ascii=False, default=str)
    limit = EVIDENCE_TOTAL
    while True:
        short = {"truncated_json": truncate(text, limit)[0]}
        size = _size(short)
        if size <= EVIDENCE_TOTAL:
            return short
        # Escaping the JSON again makes it longer, by a ratio that depends on the text.
        limit = min(limit - 1, limit * EVIDENCE_TOTAL // size)


def cap_source(files: dict[str, str]) -> dict[str, str]:
    """The eval's source snapshot within the caps: the first files, in the order given.

    The file that crosses SOURCE_CHARS is kept cut and marked; those after it are left out.
    """
    kept: dict[str, str] = {}
    budget = SOURCE_CHARS
    for path, text in list(files.items())[:SOURCE_FILES]:
        if budget <= _SHORTEST_CUT and len(text) > budget:
            break
        kept[path], cut = truncate(text, budget)
        budget -= len(kept[path])
        if cut:
            break
    return kept


# --- values any serializer can write ----------------------------------------------------------

CUT_DEEP = f"[cut: nested deeper than {ITEM_DEPTH} levels]"


def clean_text(text: str) -> str:
    """`text` with lone surrogates (a JSON escape such as "\\ud800") as U+FFFD: UTF-8 cannot
    hold them, so every serializer and SQLite would refuse the record."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        # Through UTF-16, so a pair written as two escapes becomes its one character again.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean(value: Any, notes: set[str] | None = None, depth: int = 0) -> Any:
    """`value` as any serializer can write it: lone surrogates replaced, NaN and infinities as
    null, containers nested deeper than ITEM_DEPTH cut to a mark. Models are copied field by
    field. What was changed is added to `notes`, in words."""
    if isinstance(value, str):
        fixed = clean_text(value)
        if fixed is not value and notes is not None:
            notes.add("lone surrogates replaced")
        return fixed
    if isinstance(value, float) and not math.isfinite(value):
        if notes is not None:
            notes.add("NaN or infinity dropped")
        return None
    if isinstance(value, (dict, list, tuple)) and depth >= ITEM_DEPTH:
        if notes is not None:
            notes.add(f"nested deeper than {ITEM_DEPTH} levels; cut")
        return CUT_DEEP
    if isinstance(value, dict):
        return {clean(k, notes, depth + 1): clean(v, notes, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v, notes, depth + 1) for v in value]
    if isinstance(value, BaseModel):
        # model_copy: frozen models (events) copy fine, and nested models stay models.
        return value.model_copy(update={name: clean(v, notes, depth + 1) for name, v in value})
    return value


def as_json_text(value: Any) -> str:
    """A cleaned value as JSON text, whatever it holds."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, TypeError, RecursionError):  # e.g. an int of more than 4300 digits
        return "[a value that cannot be written as JSON]"


def cap_input(value: Any, limit: int = TOOL_INPUT,
              cut: Callable[[str, int], tuple[str, bool]] = truncate) -> tuple[Any, bool]:
    """A toolCall's input within `limit` characters of JSON: as it is when it fits, else the
    start of its JSON text, marked (`cut`: `read_cut` while reading). Call it on a cleaned value."""
    text = value if isinstance(value, str) else as_json_text(value)
    if len(text) <= limit:
        return value, False
    return cut(text, limit)[0], True


_ITEM_CAPS = {"text": ITEM_TEXT, "output": ITEM_TEXT, "command": ITEM_TEXT,
              "role": ITEM_NAME, "name": ITEM_NAME, "path": ITEM_NAME, "change": ITEM_NAME}


def cap_item(item: TrajectoryItem) -> TrajectoryItem:
    """A copy of a (redacted) trajectory item within the caps, `truncated` when anything was cut."""
    update: dict[str, Any] = {}
    cut_any = item.truncated
    for name, limit in _ITEM_CAPS.items():
        value = getattr(item, name)
        if isinstance(value, str):
            update[name], cut = truncate(clean_text(value), limit)
            cut_any = cut_any or cut
    if item.input is not None:
        update["input"], cut = cap_input(clean(item.input))
        cut_any = cut_any or cut
    update["truncated"] = cut_any
    update["warnings"] = [clean_text(w) for w in item.warnings]
    return item.model_copy(update=update)


def cap_list(paths: list[str], limit: int = FILES_CHANGED) -> list[str]:
    """The first `limit` entries, and one that says how many more there were."""
    if len(paths) <= limit:
        return paths
    return [*paths[:limit], f"… {len(paths) - limit:,} more"]


# --- diffs ------------------------------------------------------------------------------------

_GIT = "diff --git "
# Room kept under a diff's limit for the line that says what was left out.
_LEFT_OUT_ROOM = 200


def too_large(path: str, size: int, header: str = "") -> str:
    """A file's section of a diff, its hunks replaced by one line: what a reader sees instead."""
    header = header or f"{_GIT}a/{path} b/{path}\n"
    return f"{header}diff of {path} too large ({size:,} bytes)\n"


def left_out(files: int, limit: int) -> str:
    return f"diffs of {files:,} more files left out: the diff passed {limit:,} characters\n"


def _sections(diff: str) -> list[str]:
    """A git-style diff cut into its files' sections, found with str.find (linear)."""
    starts = [0]
    at = diff.find("\n" + _GIT)
    while at >= 0:
        starts.append(at + 1)
        at = diff.find("\n" + _GIT, at + 1)
    return [diff[a:b] for a, b in zip(starts, starts[1:] + [len(diff)])]


def _section_header(section: str) -> tuple[str, str]:
    """(path, the header lines a reader needs: `diff --git` and the file mode) of a section."""
    first, _, rest = section.partition("\n")
    # "diff --git a/PATH b/PATH": both paths are the same, so the first half is the path.
    inner = first[len(_GIT):]
    path = inner[2:2 + (len(inner) - 5) // 2] if inner.startswith("a/") else inner
    header = first + "\n"
    mode = rest.partition("\n")[0]
    if mode.startswith(("new file mode", "deleted file mode")):
        header += mode + "\n"
    return path, header


def cap_diff(diff: str, limit: int = DIFF_TOTAL) -> tuple[str, bool]:
    """A git-style diff within the caps, and whether it was cut. A file's section longer than
    DIFF_FILE is replaced by one "too large" line; when the whole passes `limit`, the files
    after are left out and counted in a last line. Whole sections only: no cut falls inside
    a line, so none can leave half a key."""
    if len(diff) <= min(limit, DIFF_FILE):
        return diff, False
    if not diff.startswith(_GIT):  # not a diff Proctor made: keep its start
        return truncate(diff, max(limit, 0))
    kept: list[str] = []
    used, dropped, cut = 0, 0, False
    room = max(limit - _LEFT_OUT_ROOM, 0)
    for section in _sections(diff):
        if len(section) > DIFF_FILE:
            path, header = _section_header(section)
            section, cut = too_large(path, len(section.encode("utf-8", "replace")), header), True
        if dropped or used + len(section) > room:
            dropped += 1
            continue
        kept.append(section)
        used += len(section)
    if dropped:
        kept.append(left_out(dropped, limit))
    return "".join(kept), cut or bool(dropped)


def cap_diffs(diffs: list[str], cumulative: str) -> tuple[list[str], str]:
    """A trial's diffs within DIFF_TRIAL: the cumulative diff first (it is what a reader wants
    most), then each turn's in order, each within DIFF_TOTAL and what is left of the trial's."""
    cumulative, _ = cap_diff(cumulative, DIFF_TOTAL)
    budget = DIFF_TRIAL - len(cumulative)
    capped = []
    for diff in diffs:
        diff, _ = cap_diff(diff, max(min(DIFF_TOTAL, budget), 0))
        budget -= len(diff)
        capped.append(diff)
    return capped, cumulative
