"""What the MCP tools return, built from the store's records and bounded in size.

An agent reads these replies into its context, so none may grow with the record: a
trajectory of 10,000 items or a check's 64,000 characters of evidence. Every reply's JSON
stays within REPLY_BYTES (the SDK sends it twice, as structured content and as indented
text, so one message stays under 200 KB); long texts are cut with a marker saying how
much, and each reply's `cut` says what was left out and which call brings it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from ..models import BatchSummary, Failure, RunSummary, Timings, TrialRecord, TrajectoryItem, Usage
from ..store.search import SearchHit

REPLY_BYTES = 90_000  # one reply's JSON, whatever the record holds
ITEM_CHARS = 4_000  # a trajectory item's text, as the record keeps it (SPEC "Limits")
ITEM_BYTES = 12_000  # one trajectory item with all its fields (a tool call's input may be big)
TEXT_CHARS = 1_000  # a prompt, a final message, a failure reason
EVIDENCE_CHARS = 1_000  # one evidence value, in the trial's overview
CHECK_BYTES = 8_000  # one check with its evidence, in the overview
CHECKS_BYTES = 40_000  # every check with its evidence, in the overview
NAMES_BYTES = 12_000  # beyond that, checks listed without their evidence (then none)
CHECKS_SHOWN = 200  # checks listed in the overview (the rest by `check=`)
TURNS_BYTES = 20_000  # every turn's prompt, final message and files changed, in the overview
FILES_SHOWN = 20  # files changed, of one turn
GROUP_TRIALS = 20  # trial ids of one failure group
DEPTH = 12  # nesting kept of a stored value (evidence, a tool call's input)


def size(value: Any) -> int:
    """Bytes of `value`'s compact JSON, as a reply carries it."""
    if isinstance(value, BaseModel):
        return len(value.model_dump_json())
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def cut_text(text: str, chars: int) -> tuple[str, bool]:
    """`text` cut to `chars` characters with a marker saying how much went; whether it was cut."""
    if len(text) <= chars:
        return text, False
    return f"{text[:chars]}… [{len(text) - chars:,} more characters cut]", True


def cut_value(value: Any, chars: int, depth: int = 0) -> tuple[Any, bool]:
    """A stored JSON value with every string cut to `chars`, nesting past DEPTH replaced by a
    marker; whether anything was cut."""
    if isinstance(value, str):
        return cut_text(value, chars)
    if isinstance(value, (dict, list)) and depth >= DEPTH:
        return "[nested too deep: cut]", True
    if isinstance(value, dict):
        out, cut = {}, False
        for key, inner in value.items():
            out[str(key)[:200]], was = cut_value(inner, chars, depth + 1)
            cut |= was
        return out, cut
    if isinstance(value, list):
        pairs = [cut_value(inner, chars, depth + 1) for inner in value]
        return [v for v, _ in pairs], any(c for _, c in pairs)
    return value, False


# -- batches ----------------------------------------------------------------------------


class BatchView(BatchSummary):
    """A batch as `proctor run --json` prints it, and `cut`: what was left out to keep the
    reply bounded (a run's trial list past its first trials; its distribution counts all);
    `error`: why the engine ended a batch this server ran before its trials did (Docker gone)."""

    cut: str | None = None
    error: str | None = None


def batch_view(summary: BatchSummary, budget: int = REPLY_BYTES) -> BatchView:
    """`summary` whole if it fits `budget`, else each run's trial list (then its runs) cut."""
    view = BatchView(**summary.model_dump())
    if size(view) <= budget:
        return view
    trials = max(len(run.trials) for run in summary.runs)
    while trials > 0:
        trials //= 2
        runs = [_first_trials(run, trials) for run in summary.runs]
        view = BatchView(**summary.model_dump(exclude={"runs"}), runs=runs,
                         cut=f"each run lists its first {trials} trials; its distribution counts "
                             "them all; show_trial reads any trial by id")
        if size(view) <= budget:
            return view
    runs = []
    for run in summary.runs:  # thousands of runs: the first ones, without their trial lists
        runs.append(_first_trials(run, 0))
        if size(runs) > budget - 2_000:
            runs.pop()
            break
    return BatchView(**summary.model_dump(exclude={"runs"}), runs=runs,
                     cut=f"{len(runs)} of {len(summary.runs)} runs listed, without their trials: "
                         "the batch is too big for one reply; `proctor ls --batch` shows it whole")


def _first_trials(run: RunSummary, count: int) -> RunSummary:
    return run.model_copy(update={"trials": run.trials[:count]})


class BatchList(BaseModel):
    """The newest batches, as `proctor ls --json` lists them."""

    batches: list[BatchView]
    cut: str | None = None


def batch_list(summaries: list[BatchSummary]) -> BatchList:
    """As many of `summaries` as fit one reply, each bounded."""
    views: list[BatchView] = []
    used = 0
    for summary in summaries:
        view = batch_view(summary, budget=REPLY_BYTES - used - 1_000)
        used += size(view)
        if used > REPLY_BYTES - 1_000 or (view.cut and views):
            break
        views.append(view)
    cut = None
    if len(views) < len(summaries):
        cut = (f"{len(views)} of the {len(summaries)} batches asked for fit one reply: "
               "wait_batch shows any one of them by id")
    return BatchList(batches=views, cut=cut)


# -- a trial ----------------------------------------------------------------------------


class TurnView(BaseModel):
    index: int
    prompt: str
    status: str
    ms: int
    files_changed: list[str]
    final_message: str
    exit_code: int | None
    finished_reason: str | None


class CheckView(BaseModel):
    """A validation (`c.exec`, `c.judge`, a Python check) with its evidence as stored,
    long values cut; `evidence` is None when it was left out (see the reply's `cut`)."""

    index: int  # its place among the trial's checks, for show_trial(check=…)
    kind: str
    name: str
    status: str
    ms: int
    truncated: bool  # the record itself keeps the evidence cut (SPEC "Limits")
    evidence: dict[str, Any] | None
    evidence_cut: bool = False  # values in this reply were cut


class TrajectoryPage(BaseModel):
    """Items `offset` up to `next_offset` of `total`, in turn order, as `proctor show --json`
    prints them, with `index` added; an item whose text was cut here says `cut: true`."""

    total: int
    offset: int
    items: list[dict[str, Any]]
    next_offset: int | None = Field(
        description="pass as offset to read on; null when this page reaches the end")


class TrialView(BaseModel):
    """One trial's stored (redacted) record: outcome, failure, turns, checks with evidence,
    and one page of its trajectory. `cut` says what this reply left out and how to get it."""

    id: str
    batch_id: str
    run_id: str
    case_id: str
    variant: str
    trial: int
    attempt: int
    trigger: str
    outcome: str | None
    failure: Failure | None
    void_fields: list[str]
    started_at: str | None
    finished_at: str | None
    timings: Timings
    usage: Usage
    command_count: int
    turns: list[TurnView] | None  # None: left out of this page (see `cut`)
    validations: list[CheckView] | None
    trajectory: TrajectoryPage
    cut: list[str] = Field(default_factory=list)


def trial_head(record: TrialRecord, check: int | None = None, overview: bool = True) -> TrialView:
    """Everything but the trajectory page, bounded. `overview`: with the turns and every check
    (evidence cut), else without them (None), leaving the page the room; `check`: with that
    check alone, its evidence as whole as a reply allows."""
    cut: list[str] = []
    failure = record.failure
    if failure is not None:
        failure = failure.model_copy(update={"reason": cut_text(failure.reason, TEXT_CHARS)[0]})
    turns: list[TurnView] | None = None
    validations: list[CheckView] | None = None
    if check is not None:
        if not record.validations:
            raise IndexError(f"trial {record.id} has no checks: leave check out")
        if not 0 <= check < len(record.validations):
            raise IndexError(f"trial {record.id} has {len(record.validations)} checks: "
                             f"check must be from 0 to {len(record.validations) - 1}")
        validations = [_check(record, check, chars=16_000, most=REPLY_BYTES // 2)]
        cut.append(f"validations: only check {check}; turns: left out "
                   "(show_trial with offset=0 and no check shows them all)")
    elif overview:
        turns = _turns(record, cut)
        validations = _checks(record, cut)
    else:
        cut.append("turns and validations: left out of pages past the first "
                   "(show_trial with offset=0 shows them)")
    return TrialView(
        id=record.id, batch_id=record.batch_id, run_id=record.run_id, case_id=record.case_id,
        variant=record.variant, trial=record.trial, attempt=record.attempt, trigger=record.trigger,
        outcome=record.outcome, failure=failure, void_fields=record.void_fields[:50],
        started_at=record.started_at, finished_at=record.finished_at, timings=record.timings,
        usage=record.usage, command_count=record.command_count, turns=turns,
        validations=validations, trajectory=TrajectoryPage(total=0, offset=0, items=[], next_offset=None),
        cut=cut)


def _turns(record: TrialRecord, cut: list[str]) -> list[TurnView]:
    """The turns while TURNS_BYTES lasts."""
    turns: list[TurnView] = []
    used = 0
    for turn in record.turns:
        view = _turn(turn)
        used += size(view)
        if used > TURNS_BYTES:
            cut.append(f"turns: the first {len(turns)} of {len(record.turns)} (the trajectory's "
                       "items say their turn)")
            break
        turns.append(view)
    return turns


def _turn(turn: Any) -> TurnView:
    return TurnView(index=turn.index, prompt=cut_text(turn.prompt, TEXT_CHARS)[0], status=turn.status,
                    ms=turn.ms, files_changed=[f[:200] for f in turn.files_changed[:FILES_SHOWN]],
                    final_message=cut_text(turn.final_message, TEXT_CHARS)[0],
                    exit_code=turn.exit_code, finished_reason=turn.finished_reason)


def _check(record: TrialRecord, index: int, chars: int, most: int) -> CheckView:
    """Check `index` with its evidence's values cut to `chars`, then halved until it fits `most`."""
    v = record.validations[index]
    name = cut_text(v.name, TEXT_CHARS)[0]
    while True:
        evidence, was = cut_value(v.evidence, chars)
        view = CheckView(index=index, kind=v.kind, name=name, status=v.status, ms=v.ms,
                         truncated=v.truncated, evidence=evidence, evidence_cut=was)
        if size(view) <= most or chars <= 50:
            return view if size(view) <= most else view.model_copy(update={"evidence": None})
        chars //= 2


def _checks(record: TrialRecord, cut: list[str]) -> list[CheckView]:
    """The first CHECKS_SHOWN checks, their evidence while CHECKS_BYTES lasts."""
    views: list[CheckView] = []
    used = 0
    left_out = []
    listed = min(len(record.validations), CHECKS_SHOWN)
    for index in range(listed):
        view = _check(record, index, EVIDENCE_CHARS, CHECK_BYTES)
        if view.evidence is None or used + size(view) > CHECKS_BYTES:
            left_out.append(index)
            view = view.model_copy(update={"evidence": None, "evidence_cut": True})
        if used + size(view) > CHECKS_BYTES + NAMES_BYTES:  # long names, evidence gone: list no more
            listed = index
            break
        used += size(view)
        views.append(view)
    if any(v.evidence_cut for v in views):
        where = f" (of checks {left_out[0]}…{left_out[-1]} all of it)" if left_out else ""
        cut.append(f"validations: long evidence values cut{where}; "
                   "show_trial(trial_id, check=N) shows check N's evidence whole")
    if len(record.validations) > listed:
        cut.append(f"validations: the first {listed} of {len(record.validations)}; "
                   "show_trial(trial_id, check=N) shows any one")
    return views


def item_json(index: int, item: TrajectoryItem) -> tuple[dict[str, Any], bool]:
    """A trajectory item for a page: `index` (its place in turn order, what `offset` counts)
    and its kind's fields, texts cut to ITEM_CHARS (then everything to ITEM_BYTES); whether
    anything was cut."""
    data = {"index": index, **item.to_json()}
    chars = ITEM_CHARS
    while True:
        value, was = cut_value(data, chars)
        if size(value) <= ITEM_BYTES or chars <= 50:
            break
        chars //= 2
    if was:
        value["cut"] = True
    return value, was


class SearchReply(BaseModel):
    """Texts in stored trials that match the query, newest trials first."""

    hits: list[SearchHit]
    unindexed: int = 0  # finished trials search cannot find yet (being indexed now)
    cut: str | None = None


class GroupView(BaseModel):
    """Failed or void trials that failed the same way (engine.groups.FailureGroup), their
    trial ids cut to the first GROUP_TRIALS."""

    key: str
    kind: str
    outcome: str
    reason: str
    where: str | None
    count: int
    variants: list[str]
    cases: list[str]
    trial_ids: list[str]


class GroupList(BaseModel):
    batch_id: str
    groups: list[GroupView]
    cut: str | None = None
