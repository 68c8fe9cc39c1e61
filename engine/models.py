"""The record of a trial and the batch summaries, as SPEC.md "The record" fixes them.

These are the shapes stored in SQLite and printed by `proctor show --json` and
`proctor run --json`. Names follow SPEC.md exactly; fields beyond it are
additions, never renames.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from .limits import USAGE_MAX

SCHEMA_VERSION = 1
# A trial's first try and up to ten more by `--retry-void`; a file saying more is refused.
MAX_ATTEMPT = 11

Outcome = Literal["pass", "fail", "infra_error", "skipped"]
FailureKind = Literal["assertion", "judge", "timeout", "infra", "limit"]
PhaseName = Literal[
    "slot", "image", "container", "env", "workspace", "files", "setup", "snapshot",
    "harness", "turn", "diff", "check", "judge", "teardown", "record",
]
PhaseStatus = Literal["ok", "failed", "error", "skipped", "aborted"]
TurnStatus = Literal["completed", "aborted", "failed"]
ValidationStatus = Literal["passed", "failed", "error", "skipped"]
Trigger = Literal["studio", "cli", "ci", "api", "mcp"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


NOTE_TEXT_MAX = 2_000  # a note is a sentence or two, not a report
NOTE_LABEL_MAX = 40
NOTE_TARGET_MAX = 200


class Note(_Model):
    """A person's short note and label on a trial (its id) or a failure group (`group:` and
    the group's key), such as "env problem" or "agent gave up"."""

    target: str = Field(min_length=1, max_length=NOTE_TARGET_MAX)
    label: str | None = Field(default=None, max_length=NOTE_LABEL_MAX)
    text: str = Field(default="", max_length=NOTE_TEXT_MAX)
    updated_at: str

    @field_validator("label")
    @classmethod
    def _one_line(cls, label: str | None) -> str | None:
        """A label is a word or a few, one line, searchable as it is written; blank is none."""
        if label is None:
            return None
        label = " ".join(label.split())
        return label or None


class Failure(_Model):
    kind: FailureKind
    reason: str
    # Where it happened, e.g. "check 1 of 2" or "setup step 2"; for the studio's header.
    where: str | None = None


class Timings(_Model):
    slot_ms: int = 0
    setup_ms: int = 0
    agent_ms: int = 0
    diff_ms: int = 0
    checks_ms: int = 0
    judge_ms: int = 0
    teardown_ms: int = 0


class Usage(_Model):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int | None = None

    @field_validator("input", "output", "cache_read", "cache_write", "reasoning")
    @classmethod
    def _in_range(cls, value: int | None) -> int | None:
        # Whatever a harness or a provider reports, and any sum: the store keeps counts in
        # 64-bit columns, and a number past them would lose the whole record.
        return None if value is None else min(max(value, 0), USAGE_MAX)

    def add(self, other: "Usage") -> "Usage":
        reasoning = None
        if self.reasoning is not None or other.reasoning is not None:
            reasoning = (self.reasoning or 0) + (other.reasoning or 0)
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            reasoning=reasoning,
        )


class PhaseSpan(_Model):
    phase: PhaseName
    status: PhaseStatus
    start_ms: int
    end_ms: int
    detail: str = ""
    index: int | None = None  # turn number, check number, …


class TurnRecord(_Model):
    """One turn as the record keeps it (what `c.send` returns is `engine.context.Turn`)."""

    index: int
    prompt: str
    status: TurnStatus
    ms: int
    diff: str = ""
    cumulative_diff: str = ""
    files_changed: list[str] = Field(default_factory=list)
    final_message: str = ""
    exit_code: int | None = None
    raw_output: str = ""
    finished_reason: str | None = None
    usage: Usage | None = None  # what this turn reported; the trial's usage is their sum
    model: str | None = None  # the model that served the turn, when the harness says
    cost_usd: float | None = None  # its usage at that model's price (engine.cost); None: unknown


class TrajectoryItem(_Model):
    kind: Literal["message", "command", "toolCall", "fileChange"]
    turn: int
    at: str | None = None
    truncated: bool = False
    # message
    role: str | None = None
    text: str | None = None
    # command
    command: str | None = None
    exit_code: int | None = None
    output: str | None = None
    # toolCall
    name: str | None = None
    input: Any = None
    # fileChange
    path: str | None = None
    change: str | None = None
    # What the engine changed in what the agent printed ("exitCode: NaN dropped"); addition.
    warnings: list[str] = Field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Only the fields this kind has, as SPEC.md lists them (and warnings, when any)."""
        keep = {"kind", "turn", "at", "truncated"} | _KIND_FIELDS[self.kind]
        if self.warnings:
            keep.add("warnings")
        return {k: v for k, v in self.model_dump().items() if k in keep}


_KIND_FIELDS = {
    "message": {"role", "text"},
    "command": {"command", "exit_code", "output"},
    "toolCall": {"name", "input", "output"},
    "fileChange": {"path", "change"},
}


class Validation(_Model):
    kind: Literal["command", "judge", "check"]
    name: str
    status: ValidationStatus
    evidence: dict[str, Any] = Field(default_factory=dict)
    ms: int = 0
    truncated: bool = False


class EgressEntry(_Model):
    method: str
    host: str
    path: str
    allowed: bool
    brokered: list[str] = Field(default_factory=list)
    status: int | None = None
    bytes: int = 0
    ms: int = 0
    # Why the gateway refused the request, in one sentence; None when it let it through.
    reason: str | None = None


class Artifact(_Model):
    path: str
    bytes: int
    sha256: str
    text: str | None = None


class TrialRecord(_Model):
    schema_version: int = SCHEMA_VERSION
    id: str
    batch_id: str
    run_id: str
    case_id: str
    variant: str
    trial: int
    # 1, or 2, 3, … for a void trial run again by `--retry-void`: a new record, same `trial`.
    attempt: StrictInt = Field(default=1, ge=1, le=MAX_ATTEMPT)
    trigger: Trigger
    outcome: Outcome | None = None  # None while the trial runs
    failure: Failure | None = None
    void_fields: list[str] = Field(default_factory=list)
    # When it began waiting for a concurrency slot; `started_at` is its first phase's start,
    # after that wait, and phase spans count from it (a slot wait's span ends at 0).
    queued_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None  # the turns' costs summed as saved (engine.cost); None: unknown
    usage_warnings: list[str] = Field(default_factory=list)
    phases: list[PhaseSpan] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)
    trajectory: list[TrajectoryItem] = Field(default_factory=list)
    command_count: int = 0
    validations: list[Validation] = Field(default_factory=list)
    egress: list[EgressEntry] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(default_factory=list)
    setup_log: str = ""
    image: str | None = None
    host: str | None = None  # the Docker host it ran on (a pool has several)
    tags: list[str] = Field(default_factory=list)
    source: dict[str, str] = Field(default_factory=dict)  # eval file snapshot: path -> text

    def to_json(self) -> dict[str, Any]:
        # The trajectory is dumped once, item by item with only its kind's fields, in its place.
        data = self.model_dump(mode="json", exclude={"trajectory"})
        trajectory = [item.to_json() for item in self.trajectory]
        return {name: trajectory if name == "trajectory" else data[name]
                for name in type(self).model_fields if name == "trajectory" or name in data}


class Distribution(_Model):
    trials: int
    scored: int
    passed: int
    failed: int
    voided: int
    pass_rate: float | None
    deterministic: bool
    command_min: int | None
    command_median: float | None
    command_max: int | None


class TrialSummary(_Model):
    id: str
    trial: int
    attempt: int = 1
    outcome: Outcome | None
    failure: Failure | None
    command_count: int = 0
    duration_ms: int | None = None


class RunSummary(_Model):
    run_id: str
    case_id: str
    variant: str
    distribution: Distribution
    trials: list[TrialSummary]


class BatchSummary(_Model):
    batch_id: str
    trigger: Trigger
    status: Literal["running", "finished", "interrupted", "failed"]
    started_at: str | None = None
    finished_at: str | None = None
    runs: list[RunSummary] = Field(default_factory=list)
    origin: str | None = None  # where an imported batch came from, in words; None for Proctor's own
    link: str | None = None  # the CI run that started it (a GitHub Actions workflow run), if any


def distribution(trials: list[TrialSummary]) -> Distribution:
    """A run's distribution by SPEC.md's rules: void and skipped trials never count."""
    scored = [t for t in trials if t.outcome in ("pass", "fail")]
    passed = sum(t.outcome == "pass" for t in scored)
    counts = sorted(t.command_count for t in scored)
    median: float | None = None
    if counts:
        mid = len(counts) // 2
        median = counts[mid] if len(counts) % 2 else (counts[mid - 1] + counts[mid]) / 2
    deterministic = (
        len(scored) >= 2
        and len({t.outcome for t in scored}) == 1
        and counts[-1] - counts[0] <= 4
    )
    return Distribution(
        trials=len(trials),
        scored=len(scored),
        passed=passed,
        failed=len(scored) - passed,
        voided=sum(t.outcome == "infra_error" for t in trials),
        pass_rate=round(passed / len(scored), 3) if scored else None,
        deterministic=deterministic,
        command_min=counts[0] if counts else None,
        command_median=median,
        command_max=counts[-1] if counts else None,
    )
