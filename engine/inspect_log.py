"""Inspect AI logs read as Proctor batches, without inspect-ai: its `.eval` zip (header.json,
samples/ID_epoch_N.json, _journal/start.json for a log whose eval never finished) or its `.json`
log (one document), read with `zipfile`, `zstandard` (Inspect compresses members with zstd,
which Python 3.11's zipfile cannot open) and `msgspec`, which decodes only the fields named
below and skips the rest: a 10,000-step sample is 44 MB of JSON, most of it the events' copies
of the conversation.

The mapping (README "Inspect AI logs"): one log, one batch; each sample under the log's model
a run (variant = the model), its epochs the run's trials; scores become outcomes; the sample's
messages become the trajectory, its events the phases and each item's time. Ids are derived
from the log's eval id, so importing a log twice adds nothing the second time.

A log is untrusted input, read as the engine reads agent output: every text is cut while
reading, redacted, then cut to the caps of engine/limits.py; members are bounded in size and
compression ratio; whatever does not fit is refused with one line (importer.ImportRefused).
"""

from __future__ import annotations

import gc
import hashlib
import re
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import zstandard
from pydantic import TypeAdapter

from . import limits
from .models import (Failure, PhaseSpan, Timings, TrajectoryItem, TrialRecord, TurnRecord,
                     Usage, Validation)
from .portable import Portable, PortableBatch, PortableRun
from .redact import Redactor
from .safezip import ZSTD, SafeZip, ZipLimits, ZipRefused, size_words
from .text import iso_ms_or_none, read_iso

Progress = Callable[[int, int], None]

# Log format versions this reader knows: Inspect's own reader refuses any above 2.
VERSIONS = (1, 2)
# A score that is not pass/fail by itself (C/I, True/False, 1/0) passes at this value or above.
DEFAULT_THRESHOLD = 1.0
# Tools whose calls are shell commands: their `cmd` or `command` argument becomes a command item.
COMMAND_TOOLS = frozenset({"bash", "bash_session", "shell", "sh", "zsh", "exec"})

# Bounds on what a log may make this reader inflate and hold. Looser than a bundle's
# (engine/bundle.py): an Inspect sample with images passes 128 MiB, and samples are read one
# at a time, each inflated member checked against its size as it inflates.
MEMBER_MAX = 512 * 2**20  # one JSON document: a sample, a header or a whole `.json` log
TOTAL_MAX = 2 * 2**30  # all members read from one log (its records are held until stored)
RATIO_MAX = 1000  # decompressed / compressed, for members over RATIO_FLOOR
RATIO_FLOOR = 2**20
MEMBERS_MAX = 200_000
# Items of one imported trial. Inspect's agents take more steps than a Proctor turn keeps
# (ITEMS_PER_TURN): a 10,000-step sample is 20,001 items; its text still meets every item cap.
ITEMS_MAX = 4 * limits.ITEMS_PER_TRIAL
ITEM_CHARS_MAX = 4 * limits.TRAJECTORY_CHARS
TAGS_MAX = 100
PROMPT_MAX = limits.EVIDENCE_VALUE

LIMITS = ZipLimits(member=MEMBER_MAX, total=TOTAL_MAX, members=MEMBERS_MAX, ratio=RATIO_MAX,
                   methods=frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, ZSTD}),
                   ratio_floor=RATIO_FLOOR)  # the methods Inspect writes
_SAMPLE = re.compile(r"samples/[^/]+\.json")
_ATTACHMENT = "attachment://"


# --- what is read of a log: msgspec skips every field not named here ---------------------------


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    input_tokens_cache_write: int | None = None
    input_tokens_cache_read: int | None = None
    reasoning_tokens: int | None = None


class _Content(msgspec.Struct):
    type: Any = ""
    text: Any = None


class _ToolCall(msgspec.Struct):
    id: Any = None
    function: Any = None
    arguments: Any = None
    parse_error: Any = None


class _ToolError(msgspec.Struct):
    type: Any = None
    message: Any = None


class _Message(msgspec.Struct):
    role: str = ""
    id: Any = None
    content: str | list[_Content] = ""
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: Any = None
    function: Any = None
    error: _ToolError | None = None


class _Output(msgspec.Struct):
    completion: Any = ""
    usage: _Usage | None = None


class _MessageId(msgspec.Struct):
    id: Any = None


class _Choice(msgspec.Struct):
    message: _MessageId | None = None


class _ModelOutput(msgspec.Struct):
    choices: list[_Choice] = msgspec.field(default_factory=list)


class _Event(msgspec.Struct):
    event: str = ""
    timestamp: str | None = None
    completed: Any = None
    working_start: float | None = None
    span_id: Any = None
    id: Any = None
    type: Any = None
    name: Any = None
    action: Any = None
    result: Any = None  # a sandbox exec's exit code; a tool's result is read from its message
    message_id: Any = None
    output: msgspec.Raw = msgspec.Raw()  # a model event's output, decoded only for those


class _Score(msgspec.Struct):
    value: Any = None
    answer: Any = None
    explanation: Any = None


class _Error(msgspec.Struct):
    message: Any = ""


class _Limit(msgspec.Struct):
    type: Any = None
    limit: Any = None


class _Sample(msgspec.Struct):
    id: int | str
    epoch: int = 1
    input: str | list[_Message] = ""
    target: Any = None
    messages: list[_Message] = msgspec.field(default_factory=list)
    output: _Output = msgspec.field(default_factory=_Output)
    scores: dict[str, _Score] | None = None
    events: list[_Event] = msgspec.field(default_factory=list)
    model_usage: dict[str, _Usage] = msgspec.field(default_factory=dict)
    started_at: str | None = None
    completed_at: str | None = None
    total_time: float | None = None
    working_time: float | None = None
    error: _Error | None = None
    limit: _Limit | None = None
    attachments: dict[str, str] = msgspec.field(default_factory=dict)


class _Summary(msgspec.Struct):
    """A sample as summaries.json keeps it: all a log written without its samples holds."""

    id: int | str
    epoch: int = 1
    input: str | list[_Message] = ""
    target: Any = None
    scores: dict[str, _Score] | None = None
    model_usage: dict[str, _Usage] = msgspec.field(default_factory=dict)
    started_at: str | None = None
    completed_at: str | None = None
    total_time: float | None = None
    working_time: float | None = None
    error: Any = None  # the error's message
    limit: Any = None  # the limit's type
    completed: bool = True

    def as_sample(self) -> _Sample:
        return _Sample(
            id=self.id, epoch=self.epoch, input=self.input, target=self.target,
            scores=self.scores, model_usage=self.model_usage, started_at=self.started_at,
            completed_at=self.completed_at, total_time=self.total_time,
            working_time=self.working_time,
            error=None if self.error is None else _Error(message=self.error),
            limit=None if self.limit is None else _Limit(type=self.limit))


class _Spec(msgspec.Struct):
    eval_id: str
    task: str
    model: str
    run_id: str = ""
    created: str | None = None
    tags: list[str] | None = None
    packages: dict[str, str] = msgspec.field(default_factory=dict)
    dataset: Any = None


class _Stats(msgspec.Struct):
    started_at: str | None = None
    completed_at: str | None = None


class _Log(msgspec.Struct):
    version: Any
    eval: _Spec
    status: str = "started"
    stats: _Stats | None = None
    error: _Error | None = None
    samples: list[_Sample] | None = None  # a `.json` log holds its samples; a `.eval` its members


class _Version(msgspec.Struct):
    version: Any = None


# --- the one entry point --------------------------------------------------------------------


def is_inspect_log(path: str | Path) -> bool:
    """An Inspect AI log by its look: a zip holding header.json or _journal/start.json (and no
    manifest.json: that is a Proctor bundle), or a JSON document that opens with Inspect's
    first fields, `version` then `status`."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            head = f.read(256)
        if head.startswith(b"PK"):
            with zipfile.ZipFile(path) as zf:
                names = set(zf.namelist())
            return "manifest.json" not in names and bool(
                {"header.json", "_journal/start.json"} & names)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, NotImplementedError):
        return False
    return re.match(rb'\s*\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:', head) is not None


def read_inspect(path: str | Path, *, threshold: float | None = None,
                 progress: Progress | None = None) -> Portable:
    """The batch an Inspect AI log holds, every text redacted and capped; ImportRefused, with
    one line naming the file, for a log that is corrupt, truncated, too large or of a version
    this reader does not know."""
    from .importer import ImportRefused  # importer imports this module: no cycle at load

    path = Path(path)
    try:
        with _no_cyclic_gc():
            return _read(path, DEFAULT_THRESHOLD if threshold is None else threshold, progress)
    except (_Refused, ZipRefused) as exc:
        raise ImportRefused(f"{path}: {exc}") from None
    except msgspec.DecodeError as exc:  # syntax or shape, with where: "… - at `$.events[3]`"
        raise ImportRefused(f"{path}: not an Inspect AI log Proctor can read "
                            f"({_one_line(str(exc))})") from None
    except (zipfile.BadZipFile, zstandard.ZstdError, zlib.error, EOFError, UnicodeDecodeError,
            NotImplementedError) as exc:  # zipfile's words for a name or a version it cannot read
        raise ImportRefused(f"{path}: a corrupt or truncated Inspect AI log "
                            f"({_one_line(str(exc))})") from None
    except OSError as exc:
        raise ImportRefused(f"{path}: cannot be read ({exc.strerror or exc})") from None


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The collector paused: a sample makes a million objects and no cycle, and collections
    that walk them all took a third of the read."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Refused(Exception):
    """What is wrong with the log, in words; read_inspect names the file."""


def _one_line(text: str, limit: int = 300) -> str:
    return limits.quote(" ".join(text.split()), limit)


# --- reading members ------------------------------------------------------------------------


def _read(path: Path, threshold: float, progress: Progress | None) -> Portable:
    with path.open("rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if not zipped:
        if path.stat().st_size > MEMBER_MAX:
            raise _Refused(f"larger than {size_words(MEMBER_MAX)}, the most a log may hold")
        log = _decode(path.read_bytes(), _Log)
        _check_version(log.version)
        samples = log.samples or []
        if progress:
            progress(1, 1)
        return _portable(path, log, iter(samples), threshold)
    with zipfile.ZipFile(path) as zf:
        members = SafeZip(zf, LIMITS)
        header = members.get("header.json") or members.get("_journal/start.json")
        if header is None:
            raise _Refused("no header.json or _journal/start.json: not an Inspect AI log, "
                           "or one cut short")
        header_json = members.read(header)
        _check_version(_decode(header_json, _Version).version)
        # _journal/start.json has no status: its eval never wrote a header, it stopped part way.
        log = _decode(header_json, _Log)
        names = [i for i in members.infos if _SAMPLE.fullmatch(i.filename)]
        if not names:  # logged without its samples (log_samples=False): their summaries
            return _portable(path, log, _summaries(members), threshold)
        total = sum(i.compress_size for i in names) or 1

        def samples() -> Iterator[_Sample]:
            done = 0
            for info in names:
                yield _decode(members.read(info), _Sample)
                done += info.compress_size
                if progress:
                    progress(done, total)

        return _portable(path, log, samples(), threshold)


def _decode(data: bytes | bytearray, kind: type[Any]) -> Any:
    """`data` decoded as `kind`. Inspect writes NaN and infinities as bare words (a metric's
    stderr of one sample), which JSON has not: those are read as null."""
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError:
        if b"NaN" not in data and b"Infinity" not in data:
            raise
    return msgspec.json.decode(_NON_FINITE.sub(_as_null, data), type=kind)


# A JSON string, taken whole so that no word inside one is touched, or a bare NaN or infinity.
_NON_FINITE = re.compile(rb'"(?:[^"\\]|\\.)*+"|(-?Infinity|NaN)', re.DOTALL)


def _as_null(match: re.Match[bytes]) -> bytes:
    return b"null" if match.group(1) else match.group(0)


def _summaries(members: SafeZip) -> Iterator[_Sample]:
    """The samples summaries.json (or, for an eval that never finished, the journal's
    summaries) names, as samples without messages or events: outcomes, usage and times."""
    final = members.get("summaries.json")
    infos = [final] if final is not None else [
        i for i in members.infos if _JOURNAL_SUMMARY.fullmatch(i.filename)]
    for info in infos:
        for summary in _decode(members.read(info), list[_Summary]):
            if summary.completed:
                yield summary.as_sample()


_JOURNAL_SUMMARY = re.compile(r"_journal/summaries/\d+\.json")


def _check_version(version: Any) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version not in VERSIONS:
        known = " and ".join(str(v) for v in VERSIONS)
        raise _Refused(f"Inspect AI log version {_one_line(repr(version), 40)} is not one "
                       f"Proctor reads (it reads versions {known})")


# --- the mapping ------------------------------------------------------------------------------


def _portable(path: Path, log: _Log, samples: Iterator[_Sample], threshold: float) -> Portable:
    spec = log.eval
    task, model = _name(spec.task), _name(spec.model)
    batch_id = _id("b", spec.eval_id)
    redactor = Redactor()
    origin = f"Inspect AI log {_name(path.name)} · task {task} · model {model}"
    runs: dict[str, PortableRun] = {}
    trials: list[TrialRecord] = []
    seen: set[tuple[str, int]] = set()
    order = _sample_order(spec.dataset)
    for sample in samples:
        key = (repr(sample.id), sample.epoch)
        if key in seen:
            raise _Refused(f"sample {_one_line(str(sample.id), 100)} epoch {sample.epoch} "
                           "is in the log twice")
        seen.add(key)
        run_id = _id("r", spec.eval_id, repr(sample.id))
        case_id = _case_id(sample.id)
        if run_id not in runs:
            runs[run_id] = PortableRun(id=run_id, case_id=case_id, variant=model,
                                       position=order.get(repr(sample.id), len(order) + len(runs)))
        trials.append(_Trial(sample, redactor, threshold).record(
            id=_id("t", spec.eval_id, repr(sample.id), str(sample.epoch)), batch_id=batch_id,
            run_id=run_id, case_id=case_id, variant=model,
            tags=[_name(t, 100) for t in (spec.tags or [])[:TAGS_MAX]]))
    trials.sort(key=lambda t: (runs[t.run_id].position, t.trial))
    stats = log.stats or _Stats()
    started = (_iso(stats.started_at) or _iso(spec.created)
               or min((t.started_at for t in trials if t.started_at), default=None)
               or "1970-01-01T00:00:00.000Z")
    finished = _iso(stats.completed_at) or max(
        (t.finished_at for t in trials if t.finished_at), default=None)
    config = {"origin": origin, "inspect": {
        "log": _name(path.name), "task": task, "model": model, "eval_id": _name(spec.eval_id),
        "run_id": _name(spec.run_id), "status": _name(log.status),
        "version": _name(spec.packages.get("inspect_ai", "")), "threshold": threshold}}
    batch = PortableBatch(id=batch_id, trigger="api", status=_STATUS.get(log.status, "interrupted"),
                          started_at=started, finished_at=finished, config=config,
                          runs=sorted(runs.values(), key=lambda r: r.position), trials=trials)
    return Portable(batches=[batch])


# Inspect's eval status → a Proctor batch's; "started" is a log whose eval stopped part way.
_STATUS = {"success": "finished", "error": "failed", "cancelled": "interrupted"}


def _sample_order(dataset: Any) -> dict[str, int]:
    ids = dataset.get("sample_ids") if isinstance(dataset, dict) else None
    if not isinstance(ids, list):
        return {}
    return {repr(i): n for n, i in enumerate(ids[:MEMBERS_MAX])}


def _id(prefix: str, *parts: str) -> str:
    """An id made from the log's own ids, the same each time the log is read."""
    digest = hashlib.sha256("\x00".join(("inspect_ai", *parts)).encode("utf-8", "replace"))
    return f"{prefix}_{digest.hexdigest()[:10]}"


def _case_id(sample_id: int | str) -> str:
    """A sample id as a case id: a Python name of at most 100 characters, as case ids are."""
    name = re.sub(r"\W+", "_", str(sample_id), flags=re.ASCII).strip("_")
    if not name or not (name[0].isalpha() or name[0] == "_"):
        name = f"sample_{name}"
    return name[:100]


def _name(value: Any, limit: int = limits.ITEM_NAME) -> str:
    text = value if isinstance(value, str) else str(value)
    return limits.truncate(limits.clean_text(text), limit)[0]


def _epoch_ms(stamp: Any) -> float | None:
    return read_iso(stamp) if isinstance(stamp, str) and stamp else None


def _iso(stamp: Any) -> str | None:
    """An Inspect time as the record writes times; most are UTC with microseconds already."""
    if (isinstance(stamp, str) and len(stamp) == 32 and stamp.endswith("+00:00")
            and _UTC_MICROS.fullmatch(stamp)):
        return stamp[:23] + "Z"
    return iso_ms_or_none(_epoch_ms(stamp))


_UTC_MICROS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00")


# --- one sample epoch as a trial ------------------------------------------------------------------


@dataclass
class _Verdict:
    scorer: str
    passed: bool | None  # None: a value Proctor cannot read as pass or fail
    value: Any
    answer: Any
    explanation: Any


def _score(value: Any) -> float | None:
    """A score's value as a number, as Inspect counts it (C 1, I 0, P 0.5); None for a dict,
    a list or a word it does not know."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if value == value and abs(value) != float("inf") else None
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _WORDS:
            return float(_WORDS[word])
        try:
            return _score(float(word))
        except ValueError:
            return None
    return None


def verdict(value: Any, threshold: float) -> bool | None:
    """A score's value as pass (True), fail (False) or unreadable (None). C/I, True/False and
    1/0 are pass/fail by themselves; Inspect's other letters count as it counts them (P 0.5,
    N 0); other numbers, numeric strings among them, pass at `threshold` or above; a dict or a
    list passes when all its values do."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if value in (0, 1):
            return value == 1
        return value >= threshold if value == value else None
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _WORDS:
            return _WORDS[word] if isinstance(_WORDS[word], bool) else _WORDS[word] >= threshold
        try:
            return verdict(float(word), threshold)
        except ValueError:
            return None
    if isinstance(value, (dict, list)):
        members = list(value.values() if isinstance(value, dict) else value)
        members = members[:limits.EVIDENCE_ENTRIES]
        verdicts = [verdict(v, threshold) for v in members if not isinstance(v, (dict, list))]
        if not verdicts or None in verdicts:
            return None
        return all(verdicts)
    return None


# Inspect's score letters and words (value_to_float); a bool is pass/fail whatever the threshold.
_WORDS: dict[str, bool | float] = {"c": True, "i": False, "yes": True, "no": False,
                                   "true": True, "false": False, "p": 0.5, "n": 0.0}


class _Trial:
    """One sample epoch read into a trial record: every text cut while reading, redacted, then
    cut to the caps, as the recorder keeps what an agent prints."""

    def __init__(self, sample: _Sample, redactor: Redactor, threshold: float):
        self.s = sample
        self.redactor = redactor
        self.threshold = threshold
        self.attachments = sample.attachments
        self.pending: list[tuple[dict[str, Any], str, str, int]] = []

    # -- texts --

    def _head(self, value: Any, limit: int) -> tuple[str, bool]:
        if not isinstance(value, str):
            value = "" if value is None else str(value)
        if value.startswith(_ATTACHMENT):
            value = self.attachments.get(value[len(_ATTACHMENT):], value)
        return limits.read_cut(limits.clean_text(value), limits.READ_FACTOR * limit)

    def text(self, value: Any, limit: int) -> tuple[str, bool]:
        """A text of the log as stored: attachments resolved, cleaned, cut while reading,
        redacted, then cut to `limit`, and whether anything was cut."""
        head, cut = self._head(value, limit)
        safe = limits.redacted(self.redactor, head) if cut else self.redactor.text(head)
        out, cut_again = limits.truncate(safe, limit)
        return out, cut or cut_again

    def later(self, item: dict[str, Any], key: str, value: Any, limit: int) -> None:
        """`item[key] = text(value, limit)`, marking the item truncated when cut; redacted in
        `settle`, with all the trajectory's other texts."""
        head, cut = self._head(value, limit)
        if cut:  # what only the dropped rest could decide is left out, now
            item[key], _ = limits.truncate(limits.redacted(self.redactor, head), limit)
            item["truncated"] = True
        else:
            self.pending.append((item, key, head, limit))

    def settle(self) -> None:
        """The texts `later` kept, redacted and capped. One pass over all of them joined says
        whether any holds a secret (a line break between two meets every pattern as the end of
        a text does); only then is each redacted alone."""
        joined = "\n".join(text for _, _, text, _ in self.pending)
        clean = self.redactor.text(joined) == joined
        for item, key, text, limit in self.pending:
            item[key], cut = limits.truncate(text if clean else self.redactor.text(text), limit)
            if cut:
                item["truncated"] = True
        self.pending = []

    def content(self, content: str | list[_Content]) -> str:
        if isinstance(content, str):
            return content
        parts = []
        for part in content:
            if isinstance(part.text, str):
                parts.append(part.text if not part.text.startswith(_ATTACHMENT)
                             else self.attachments.get(part.text[len(_ATTACHMENT):], part.text))
            elif part.type and part.type not in ("reasoning", "text"):
                parts.append(f"[{_name(part.type, 40)}]")  # an image, audio, …: named, not kept
        return "\n".join(parts)

    def value(self, value: Any, limit: int) -> tuple[Any, bool]:
        """A JSON value of the log (a tool call's arguments) within `limit` characters."""
        value = limits.clean(value)
        value, cut = limits.cap_input(value, limits.READ_FACTOR * limit, limits.read_cut)
        value = limits.redact(self.redactor, value)
        value, cut_again = limits.cap_input(limits.clean(value), limit)
        return value, cut or cut_again

    # -- the record --

    def record(self, **ids: Any) -> TrialRecord:
        s = self.s
        times = _Times(s)
        items = self.trajectory(times)
        usage = self.usage()
        verdicts = self.verdicts()
        outcome, failure = self.outcome(verdicts)
        commands = sum(item.kind == "command" for item in items)
        final, _ = self.text(s.output.completion, limits.FINAL_MESSAGE)
        prompt = s.input if isinstance(s.input, str) else "\n".join(
            self.content(m.content) for m in s.input if m.role == "user")
        turn = TurnRecord(index=1, prompt=self.text(prompt, PROMPT_MAX)[0],
                          status="failed" if s.error is not None else "completed",
                          ms=times.timings.agent_ms, final_message=final, usage=usage,
                          model=self.model())
        return TrialRecord(
            **ids, trial=s.epoch, trigger="api", outcome=outcome, failure=failure,
            started_at=iso_ms_or_none(times.t0), finished_at=iso_ms_or_none(times.end), timings=times.timings,
            usage=usage, phases=times.phases, turns=[turn], trajectory=items,
            command_count=commands, validations=[self.validation(v) for v in verdicts])

    def model(self) -> str | None:
        """The model that served the sample, as a price table names it (Inspect's
        `openai/gpt-4o-mini` is `gpt-4o-mini`); None when several did, or none is named."""
        names = list(self.s.model_usage)
        if len(names) != 1:
            return None
        name = names[0].split("/", 1)[-1]
        return name if 0 < len(name) <= 200 and name.isprintable() else None

    def usage(self) -> Usage:
        """All models' tokens. Inspect counts cache reads and writes apart from input tokens;
        Proctor's input holds them (its cost takes them out again)."""
        total = Usage()
        for u in self.s.model_usage.values():
            read, write = u.input_tokens_cache_read or 0, u.input_tokens_cache_write or 0
            total = total.add(Usage(input=u.input_tokens + read + write, output=u.output_tokens,
                                    cache_read=read, cache_write=write,
                                    reasoning=u.reasoning_tokens))
        return total

    def verdicts(self) -> list[_Verdict]:
        return [_Verdict(_name(name, limits.ITEM_NAME), verdict(score.value, self.threshold),
                         score.value, score.answer, score.explanation)
                for name, score in list((self.s.scores or {}).items())[:limits.EVIDENCE_ENTRIES]]

    def outcome(self, verdicts: list[_Verdict]) -> tuple[str, Failure | None]:
        """A sample error voids the trial; any failed score fails it, a passed one (and none
        failed) passes it; no readable score leaves it skipped."""
        s = self.s
        if s.error is not None:
            said = _one_line(str(s.error.message or ""), limits.FAILURE_REASON)
            reason = self.text(said, limits.FAILURE_REASON)[0]
            return "infra_error", Failure(kind="infra", reason=reason or "the sample failed",
                                          where="Inspect sample error")
        failed = [v for v in verdicts if v.passed is False]
        if failed:
            v = failed[0]
            shown = limits.quote(_shown(v.value), 200)
            answer = f", answered {limits.quote(_shown(v.answer), 200)}" if v.answer else ""
            target = self.s.target
            wanted = f" (target {limits.quote(_shown(target), 200)})" if target else ""
            why = f"score {shown} from {v.scorer}{answer}{wanted}"
            kind = "judge"  # a verdict below its threshold
            if s.limit is not None:
                kind = "timeout" if s.limit.type in ("time", "working") else "limit"
                why += f"; the {_name(s.limit.type, 40)} limit {_shown(s.limit.limit)} was reached"
            reason = self.text(limits.quote(why, limits.FAILURE_REASON), limits.FAILURE_REASON)[0]
            return "fail", Failure(kind=kind, reason=reason, where=f"scorer {v.scorer}")
        if any(v.passed for v in verdicts):
            return "pass", None
        return "skipped", None

    def validation(self, v: _Verdict) -> Validation:
        """A scorer's verdict as a judge's: its score against the threshold, and its reasoning
        (the explanation) where the studio shows a judge's."""
        judgment: dict[str, Any] = {"reasoning": v.explanation}
        score = _score(v.value)
        if score is not None:
            judgment["score"] = score
        criterion = f"Inspect scorer {v.scorer}"
        if self.s.target:
            criterion += f", target {limits.quote(_shown(self.s.target), 1000)}"
        evidence: dict[str, Any] = {"criterion": criterion, "value": v.value, "answer": v.answer,
                                    "judgment": judgment, "threshold": self.threshold}
        evidence = limits.redact(self.redactor, limits.clean(evidence))
        evidence, cut = limits.cap_evidence(evidence)
        status = {True: "passed", False: "failed", None: "error"}[v.passed]
        if v.passed is None:
            evidence["error"] = "a score Proctor cannot read as pass or fail"
        return Validation(kind="judge", name=v.scorer, status=status, evidence=evidence,
                          truncated=cut)

    def trajectory(self, times: _Times) -> list[TrajectoryItem]:
        """Messages in order: an assistant's text is a message item and each of its tool calls
        a command (COMMAND_TOOLS) or toolCall item, with the output of the tool message that
        answers it; later user messages are message items too. The first user message is the
        turn's prompt; system messages are left out."""
        answers = {m.tool_call_id: m for m in self.s.messages
                   if m.role == "tool" and m.tool_call_id is not None}
        answered: set[Any] = set()
        items: list[dict[str, Any]] = []
        dropped, prompt_seen = 0, False
        for m in self.s.messages:
            if len(items) >= ITEMS_MAX:  # counted, not built
                dropped += _items_of(m, answered)
                continue
            if m.role == "assistant":
                text = self.content(m.content)
                if text.strip():
                    item = dict(kind="message", turn=1, at=times.at(m.id), role="assistant",
                                truncated=False)
                    self.later(item, "text", text, limits.ITEM_TEXT)
                    items.append(item)
                for call in m.tool_calls or []:
                    answer = answers.get(call.id)
                    if answer is not None:
                        answered.add(call.id)
                    items.append(self.call_item(call, answer, times))
            elif m.role == "tool" and m.tool_call_id not in answered:
                # A tool message no call asked for: shown as its own call.
                call = _ToolCall(id=m.tool_call_id, function=m.function)
                items.append(self.call_item(call, m, times))
            elif m.role == "user":
                if not prompt_seen:
                    prompt_seen = True
                    continue
                item = dict(kind="message", turn=1, at=times.at(m.id), role="user", truncated=False)
                self.later(item, "text", self.content(m.content), limits.ITEM_TEXT)
                items.append(item)
        self.settle()
        chars = 0
        for kept, item in enumerate(items):
            chars += _size(item)
            if chars > ITEM_CHARS_MAX:
                dropped += len(items) - kept
                del items[kept:]
                break
        if dropped:
            why = (f"an imported trial keeps {ITEMS_MAX:,} items or {ITEM_CHARS_MAX:,} "
                   "characters of them")
            items.append(dict(kind="message", turn=1, role="proctor", truncated=True,
                              text=f"{dropped:,} items dropped: {why}",
                              warnings=[f"{dropped:,} items dropped"]))
        return _ITEMS.validate_python(items)  # one call: a model per item costs twice as much

    def call_item(self, call: _ToolCall, answer: _Message | None, times: _Times) -> dict[str, Any]:
        """A tool call's item, with the output of the tool message that answers it (and its
        error, which Inspect keeps apart from the output) and when the tool finished."""
        args = call.arguments
        line = args.get("cmd", args.get("command")) if isinstance(args, dict) else None
        item: dict[str, Any] = dict(turn=1, at=times.tool_at.get(call.id), truncated=False)
        if call.function in COMMAND_TOOLS and isinstance(line, str):
            item.update(kind="command", exit_code=times.exit_codes.get(call.id))
            self.later(item, "command", line, limits.ITEM_TEXT)
        else:
            item["kind"] = "toolCall"
            self.later(item, "name", call.function or "", limits.ITEM_NAME)
            item["input"], item["truncated"] = self.value(args, limits.TOOL_INPUT)
            if call.parse_error:
                item["warnings"] = [f"arguments not parsed: {self.text(call.parse_error, 200)[0]}"]
        if answer is not None:
            output = self.content(answer.content)
            error = answer.error
            if error is not None:
                kind = f" ({error.type})" if error.type else ""
                said = f"error{kind}: {error.message}"
                output = f"{output}\n{said}" if output else said
            self.later(item, "output", output, limits.ITEM_TEXT)
            item["at"] = item["at"] or times.at(answer.id)
        return item


_ITEMS = TypeAdapter(list[TrajectoryItem])


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else limits.as_json_text(limits.clean(value))


def _items_of(m: _Message, answered: set[Any]) -> int:
    """How many items a message would make (past ITEMS_MAX they are only counted); the calls
    it makes are noted as answered, as the items would be."""
    if m.role == "assistant":
        answered.update(call.id for call in m.tool_calls or [])
        return (1 if _has_text(m.content) else 0) + len(m.tool_calls or [])
    if m.role == "tool":
        return 0 if m.tool_call_id in answered else 1
    return 1 if m.role == "user" else 0


def _has_text(content: str | list[_Content]) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    return any(isinstance(p.text, str) and p.text.strip() or p.type and p.type not in ("reasoning", "text")
               for p in content)


def _size(item: dict[str, Any]) -> int:
    """About what the item takes stored, as JSON, without writing it."""
    size = 120
    for name in ("text", "command", "output", "name", "role"):
        text = item.get(name)
        if text:
            size += len(text)
    value = item.get("input")
    if value is not None:
        size += len(value) if isinstance(value, str) else limits.TOOL_INPUT // 4
    return size


@dataclass
class _Span:
    kind: str
    name: str
    start: float
    working_start: float | None
    end: float | None = None
    working_end: float | None = None


@dataclass
class _Times:
    """What the sample's events say about time: its phases, its timings and when each message
    and tool call happened; from the sample's own times where it has no events."""

    s: _Sample
    t0: float | None = None
    end: float | None = None
    phases: list[PhaseSpan] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    message_at: dict[Any, str] = field(default_factory=dict)
    tool_at: dict[Any, str | None] = field(default_factory=dict)
    exit_codes: dict[Any, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.s
        spans: dict[Any, _Span] = {}
        tool_span_call: dict[Any, Any] = {}  # a tool's span → the call it ran
        open_tool_spans: list[Any] = []
        span_exit: dict[Any, int] = {}
        outputs: list[tuple[str, msgspec.Raw]] = []  # (when, a model event's output)
        for e in s.events:
            kind = e.event
            if kind == "span_begin":
                at = _epoch_ms(e.timestamp)
                if at is not None and e.type in _PHASE_SPANS:
                    spans[e.id] = _Span(e.type, _name(e.name or e.type, 200), at, e.working_start)
                if e.type == "tool":
                    open_tool_spans.append(e.id)
            elif kind == "span_end":
                span = spans.get(e.id)
                if span is not None:
                    span.end, span.working_end = _epoch_ms(e.timestamp), e.working_start
                if open_tool_spans and open_tool_spans[-1] == e.id:
                    open_tool_spans.pop()
            elif kind == "model":
                done = _iso(e.completed or e.timestamp)
                if done is not None and len(e.output):
                    outputs.append((done, e.output))
            elif kind == "tool":
                done = _iso(e.completed or e.timestamp)
                if done is not None:
                    self.tool_at[e.id] = done
                    if e.message_id is not None:
                        self.message_at[e.message_id] = done
                if open_tool_spans and open_tool_spans[-1] not in tool_span_call:
                    tool_span_call[open_tool_spans[-1]] = e.id
            elif kind == "sandbox" and e.action == "exec":
                if isinstance(e.result, int) and not isinstance(e.result, bool):
                    span_exit[e.span_id] = e.result  # the last exec in a tool's span is its code
        self._answered_at(outputs)
        self.exit_codes = {call: span_exit[span] for span, call in tool_span_call.items()
                           if span in span_exit}
        starts = [sp.start for sp in spans.values()]
        ends = [sp.end for sp in spans.values() if sp.end is not None]
        started, completed = _epoch_ms(s.started_at), _epoch_ms(s.completed_at)
        if completed is None and started is not None and s.total_time is not None:
            completed = started + s.total_time * 1000
        self.t0 = min([t for t in (started, *starts) if t is not None], default=None)
        self.end = max([t for t in (completed, *ends) if t is not None], default=self.t0)
        self._phases(list(spans.values()))

    def _answered_at(self, outputs: list[tuple[str, msgspec.Raw]]) -> None:
        """When each model answer came: the message id of every model event's output, decoded
        in one call (one per event costs three times as much)."""
        try:
            decoded = msgspec.json.decode(b"[" + b",".join(raw for _, raw in outputs) + b"]",
                                          type=list[_ModelOutput])
        except msgspec.DecodeError:  # only an id is wanted: an odd output goes without its time
            decoded = []
        for (done, _), output in zip(outputs, decoded):
            for choice in output.choices[:1]:
                if choice.message is not None and choice.message.id is not None:
                    self.message_at[choice.message.id] = done

    def at(self, message_id: Any) -> str | None:
        return self.message_at.get(message_id)

    def _phases(self, spans: list[_Span]) -> None:
        t0 = self.t0 or 0
        setup = agent = judged = 0
        agent_span = False
        scorer_index = 0
        for sp in sorted(spans, key=lambda sp: sp.start):
            phase, index, detail = _PHASE_SPANS[sp.kind], None, sp.name
            end = sp.end if sp.end is not None else self.end or sp.start
            start_ms, end_ms = max(int(sp.start - t0), 0), max(int(end - t0), 0)
            ms = max(end_ms - start_ms, 0)
            if phase == "container":
                detail, setup = "sandbox set-up (Inspect init)", setup + ms
            elif phase == "turn":
                index, detail, agent_span = 1, "solvers", True
                working = (sp.working_end - sp.working_start
                           if sp.working_end is not None and sp.working_start is not None else None)
                agent += int(working * 1000) if working is not None and working >= 0 else ms
            else:
                scorer_index += 1
                index, judged = scorer_index, judged + ms
                detail = f"scorer {sp.name}"
            self.phases.append(PhaseSpan(phase=phase, status="ok", start_ms=start_ms,
                                         end_ms=end_ms, detail=detail, index=index))
        if not agent_span and self.s.working_time is not None:
            agent = int(self.s.working_time * 1000)
        if self.s.error is not None:
            for i, span in enumerate(self.phases):
                if span.phase == "turn":
                    self.phases[i] = span.model_copy(update={"status": "failed"})
        self.timings = Timings(setup_ms=setup, agent_ms=max(agent, 0), judge_ms=judged)


# Inspect's span types that are Proctor phases: sandbox set-up, the solvers (the agent's one
# turn), and each scorer (a judge: a verdict with a score; the "scorers" span is left out).
_PHASE_SPANS = {"init": "container", "solvers": "turn", "scorer": "judge"}
