"""Failure groups: a batch's (or a filter's) failed and void trials grouped by cause.

A trial's signature is its failure kind, its first failing check (the failure's
`where`, e.g. "check 1 of 2") and its failure reason with the volatile parts
masked: what engine.compare.mask masks (times, UUIDs, temporary folders, ids,
hex, durations, long numbers), then paths and every number. A quoted value
('…' or "…") is masked where it varies: among the trials whose signatures are
otherwise equal, when it takes at least QUOTE_MIN different values and more
than half of them differ (a random file name, a port in words), never when a
few values each recur (those are different causes). Backquoted text names a
check's command and is kept.

Equal signatures make one group; near-identical ones of the same kind and first
failing check are then joined (largest first, each joining the largest group it
resembles): rapidfuzz's ratio reaches SIMILAR, and word by word (rapidfuzz's
Levenshtein opcodes over the words) they differ only in words spelt a little
differently (test, tests) and in a cut at the end (a long reason quoted to a
length). A different word ("greet", "numpy") is a different cause, however alike
the rest reads. A group's key is a short hash of its largest signature and names its
note ("group:<key>", Note). As a batch grows another of its signatures may become the
largest, and the key changes; `keys` holds every member signature's key, so a note made
under an earlier key is still found (`note_target`).

Only the trial table's short columns are read (one statement, as the browser
reads them), never a record; 10,000 failed trials with 7,400 different reasons
group in about 0.5 s, most of it the masking's regular expressions (bench/groups.py).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict
from rapidfuzz import fuzz, process
from rapidfuzz.distance import Levenshtein
from sqlalchemy import text

from .compare import mask as mask_volatile
from .store.browse import BrowseFilter, Source, read_connection, trial_filter

SIMILAR = 90.0  # rapidfuzz ratio (0–100) at which two signatures of one kind are one cause
WORD_SIMILAR = 75.0  # rapidfuzz ratio at which two words are one spelt differently (test, tests)
QUOTE_MIN = 3  # distinct values a quoted slot needs before it counts as volatile
KEY_CHARS = 10  # hex digits of a group's key
MAX_KEYS = 100  # member signatures' keys a group keeps for finding its note
FAILED = ("fail", "infra_error")

# After engine.compare's rules: paths (absolute, ~/…, or relative with a slash; a placeholder
# inside one is swallowed), then every number left (exit codes, counts, ports, addresses).
_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.@%+=,<>-]+){1,}/?|\b[\w.@%+=-]+(?:/[\w.@%+=,<>-]+)+/?")
_NUMBER = re.compile(r"(?<![\w<])[-+]?\d+(?:[.,]\d+)*(?![\w>])|(?<=[a-zA-Z_])\d+\b")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|m|h|sec|secs|seconds|min|mins|minutes|hours?)\b")
_WORD = re.compile(r"<\w+>|\w+|[^\w\s]")
_QUOTED = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"")
_SPACE = re.compile(r"\s+")


class FailedTrial(NamedTuple):
    """A failed or void trial as the trial table's short columns hold it."""

    id: str
    batch_id: str
    case_id: str
    variant: str
    trial: int
    outcome: str
    kind: str
    reason: str
    where: str | None


class FailureGroup(BaseModel):
    """Failed or void trials that failed the same way."""

    model_config = ConfigDict(frozen=True)

    key: str  # the largest signature's: a new note's target is "group:" + key
    keys: list[str]  # every member signature's key, largest first (key among them)
    kind: str  # the failure kind: assertion, judge, timeout, limit, infra (void)
    outcome: str  # fail, or infra_error for void trials
    signature: str  # the masked reason of its largest member signature
    reason: str  # one member's reason, as recorded
    where: str | None  # the first failing check, e.g. "check 1 of 2"
    count: int
    variants: list[str]
    cases: list[str]
    trial_ids: list[str]  # in batch, case, variant and trial order

    @property
    def target(self) -> str:
        """The note target of this group (engine.models.Note)."""
        return f"group:{self.key}"

    @property
    def targets(self) -> list[str]:
        """Every target a note on this group may have been made under, its own first."""
        return [f"group:{k}" for k in self.keys]


@functools.lru_cache(maxsize=4096)  # a batch's failures often repeat one reason word for word
def mask(reason: str) -> str:
    """A failure reason with its volatile parts replaced by placeholders (the rules above,
    but for quoted values, which depend on the other trials)."""
    masked = mask_volatile(reason)
    masked = _PATH.sub("<path>", masked)
    masked = _DURATION.sub("<dur>", masked)
    masked = _NUMBER.sub("<n>", masked)
    return _SPACE.sub(" ", masked).strip()


def _quotes(masked: str) -> tuple[str, list[str]]:
    """The masked reason with each quoted value replaced by a slot mark, and the values."""
    values: list[str] = []

    def slot(m: re.Match[str]) -> str:
        values.append(m.group(0))
        return "\x00"

    return _QUOTED.sub(slot, masked), values


def _signatures(trials: list[FailedTrial]) -> list[str]:
    """Each trial's masked reason, its quoted values masked where they vary (see the module)."""
    skeletons = []
    buckets: dict[tuple[str, str | None, str], list[int]] = {}
    for i, t in enumerate(trials):
        skeleton, values = _quotes(mask(t.reason))
        skeletons.append((skeleton, values))
        buckets.setdefault((t.kind, t.where, skeleton), []).append(i)
    signatures = [""] * len(trials)
    for (_kind, _where, skeleton), members in buckets.items():
        slots = len(skeletons[members[0]][1])
        volatile = set()
        for s in range(slots):
            distinct = {skeletons[i][1][s] for i in members}
            if len(distinct) >= QUOTE_MIN and len(distinct) * 2 > len(members):
                volatile.add(s)
        for i in members:
            values = iter(skeletons[i][1])
            pieces = skeleton.split("\x00")
            out = [pieces[0]]
            for s, piece in enumerate(pieces[1:]):
                value = next(values)
                out.append(("'<value>'" if s in volatile else value) + piece)
            signatures[i] = "".join(out)
    return signatures


def _words(signature: str) -> list[str]:
    return _WORD.findall(signature)


def _near(head: str, other: str) -> bool:
    """Whether two signatures say the same words in the same order, but for a word spelt a
    little differently (test, tests) and a cut at the end (a long reason quoted to a length)."""
    a, b = _words(head), _words(other)
    # A cut at the end: the longer is compared only as far as the shorter goes. (Left to the
    # opcodes, "…after Hel" against "…after Hello and an" aligned as an insert in the middle.)
    a, b = a[:len(b)], b[:len(a)]
    for tag, i1, i2, j1, j2 in Levenshtein.opcodes(a, b):
        at_end = i2 == len(a) and j2 == len(b)
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1 and all(
                fuzz.ratio(x, y) >= WORD_SIMILAR or (at_end and (x.startswith(y) or y.startswith(x)))
                for x, y in zip(a[i1:i2], b[j1:j2])):
            continue
        return False
    return True


def _key(kind: str, where: str | None, signature: str) -> str:
    digest = hashlib.blake2b(f"{kind}\x1f{where or ''}\x1f{signature}".encode(), digest_size=8)
    return digest.hexdigest()[:KEY_CHARS]


def group(trials: Iterable[FailedTrial], similar: float = SIMILAR) -> list[FailureGroup]:
    """Failed and void trials grouped by signature, near-identical ones joined; largest first."""
    trials = list(trials)
    exact: dict[tuple[str, str, str | None, str], list[FailedTrial]] = {}
    for t, signature in zip(trials, _signatures(trials)):
        exact.setdefault((t.outcome, t.kind, t.where, signature), []).append(t)
    # Largest first, so each signature joins the largest group it resembles.
    ordered = sorted(exact.items(), key=lambda kv: (-len(kv[1]), kv[0][1], kv[0][2] or "", kv[0][3]))
    joined: list[tuple[tuple[str, str, str | None, str], list[FailedTrial], list[str]]] = []
    # Only signatures of one outcome, kind and first failing check are compared: a different
    # check that fails is a different cause, however alike the reasons read.
    heads: dict[tuple[str, str, str | None], list[str]] = {}  # the groups' signatures
    where_of: dict[tuple[str, str, str | None], list[int]] = {}  # … and their index in `joined`
    for (outcome, kind, where, signature), members in ordered:
        choices = heads.setdefault((outcome, kind, where), [])
        indexes = where_of.setdefault((outcome, kind, where), [])
        found = next((i for _sig, _score, i in process.extract(
            signature, choices, scorer=fuzz.ratio, score_cutoff=similar, limit=None)
            if _near(choices[i], signature)), None) if choices else None
        if found is not None:
            joined[indexes[found]][1].extend(members)
            joined[indexes[found]][2].append(_key(kind, where, signature))
            continue
        choices.append(signature)
        indexes.append(len(joined))
        joined.append(((outcome, kind, where, signature), list(members), [_key(kind, where, signature)]))
    groups = [_failure_group(head, members, keys) for head, members, keys in joined]
    return sorted(groups, key=lambda g: (-g.count, g.kind, g.key))


def _failure_group(head: tuple[str, str, str | None, str], members: list[FailedTrial],
                   keys: list[str]) -> FailureGroup:
    outcome, kind, where, signature = head
    members.sort(key=lambda t: (t.batch_id, t.case_id, t.variant, t.trial, t.id))
    return FailureGroup(
        key=keys[0], keys=keys[:MAX_KEYS], kind=kind, outcome=outcome, signature=signature,
        reason=members[0].reason, where=where, count=len(members),
        variants=sorted({t.variant for t in members}), cases=sorted({t.case_id for t in members}),
        trial_ids=[t.id for t in members])


# -- reading the store ------------------------------------------------------------------

_FAILED_SQL = """
    SELECT t.id, t.batch_id, t.case_id, t.variant, t.trial, t.outcome, t.failure_kind,
           t.failure_reason, t.failure_where
    FROM trial t
    WHERE t.outcome IN ('fail', 'infra_error') AND {where}"""


def failed_trials(source: Source, batch_id: str | None = None,
                  flt: BrowseFilter = BrowseFilter()) -> list[FailedTrial]:
    """The failed and void trials of a batch, of a filter, or of both, from short columns."""
    params: dict[str, Any] = {}
    where = [trial_filter(flt, params)]
    if batch_id is not None:
        params["batch"] = batch_id
        where.append("t.batch_id = :batch")
    with read_connection(source) as conn:
        rows = conn.execute(text(_FAILED_SQL.format(where=" AND ".join(where))), params)
        return [FailedTrial(id_, batch, case, variant, trial if type(trial) is int else 0,
                            outcome, kind or ("infra" if outcome == "infra_error" else "assertion"),
                            reason or "no reason recorded", where_ or None)
                for id_, batch, case, variant, trial, outcome, kind, reason, where_ in rows]


def failure_groups(source: Source, batch_id: str | None = None,
                   flt: BrowseFilter = BrowseFilter()) -> list[FailureGroup]:
    """The failure groups of a batch's (or a filter's) failed and void trials, largest first."""
    return group(failed_trials(source, batch_id, flt))


def note_target(store: Any, group: FailureGroup) -> str:
    """Where this group's note is: the first of its targets that holds one (a note made
    while another signature was its largest), else its own."""
    held = store.notes(group.targets)
    return next((t for t in group.targets if t in held), group.target)


# -- "compare a pass with one of these" ---------------------------------------------------

CANDIDATES = 50  # passing trials whose commands are read to pick the nearest

_TRIAL_SQL = "SELECT batch_id, case_id, variant FROM trial WHERE id = :id"
_PASSES_SQL = """
    SELECT id, batch_id, variant FROM trial
    WHERE case_id = :case AND outcome = 'pass'
    ORDER BY batch_id = :batch DESC, variant = :variant DESC, trial, id
    LIMIT :limit"""
_COMMANDS_SQL = """
    SELECT json_extract(json, '$.command') FROM trajectory_item
    WHERE trial_id = :id AND kind = 'command' ORDER BY position"""


def _commands(conn: Any, trial_id: str) -> list[str]:
    return [mask_volatile(c) for (c,) in conn.execute(text(_COMMANDS_SQL), {"id": trial_id})
            if isinstance(c, str)]


def nearest_pass(store: Source, trial_id: str) -> str | None:
    """The passing trial to compare a failed one with: of the same case, in the same batch
    when it has one, of the same variant first, then the one whose commands are most alike
    (rapidfuzz over the command sequences); None when no trial of the case passed."""
    with read_connection(store) as conn:
        found = conn.execute(text(_TRIAL_SQL), {"id": trial_id}).first()
        if found is None:
            return None
        batch_id, case_id, variant = found
        passes = list(conn.execute(text(_PASSES_SQL), {"case": case_id, "batch": batch_id,
                                                        "variant": variant, "limit": CANDIDATES}))
        if not passes:
            return None
        # The closest circle that holds a pass: same batch and variant, then same batch, then any.
        best = (passes[0].batch_id == batch_id, passes[0].variant == variant)
        circle = [p for p in passes if (p.batch_id == batch_id, p.variant == variant) == best]
        if len(circle) == 1:
            return circle[0].id
        failed = _commands(conn, trial_id)
        scored = [(Levenshtein.normalized_similarity(failed, _commands(conn, p.id)), -i, p.id)
                  for i, p in enumerate(circle)]
    return max(scored)[2]
