"""The caps of SPEC.md "Limits on what is stored", each cut marked visibly.

Callers redact first (`engine.redact`) and cap after: a key cut in half would
no longer match a pattern, and its first half would be stored readable.
Truncation never changes a verdict; checks read the uncut data.
"""

from __future__ import annotations

import json
from typing import Any

ITEM_TEXT = 4000  # one trajectory item's text
EVIDENCE_TOTAL = 64000  # one validator's evidence, serialised as JSON
EVIDENCE_VALUE = 16000  # one string in the evidence
EVIDENCE_ENTRIES = 64  # one list in the evidence (calls, log entries)
SOURCE_FILES = 100  # the eval's source snapshot
SOURCE_CHARS = 1_000_000

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
