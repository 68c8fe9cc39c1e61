"""Under GitHub Actions (`GITHUB_ACTIONS=true`): a Markdown summary of the batch appended to
`$GITHUB_STEP_SUMMARY`, an `::error` annotation per failed trial (a `::warning` per void one)
at its case's line, and the workflow run's link for the batch's record.

An agent writes part of every failure's reason, and the runner reads each line a step prints
for workflow commands (`::add-mask::`, `::stop-commands::`, ...). So a reason goes into an
annotation with GitHub's own escaping (`%`, CR and LF; also `:` and `,` in properties) and
can never start a line of its own; the batch's live output is printed between
`::stop-commands::TOKEN` and `::TOKEN::`, so nothing an agent put in it is read as a command;
and in the summary every text is a code span, which GitHub renders with no markup, no HTML
and no link.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Mapping
from urllib.parse import urlsplit

from ..models import BatchSummary, RunSummary, TrialSummary
from . import ReportError, Site, last_attempts

MAX_ANNOTATIONS = 10  # of each kind: GitHub keeps 10 errors and 10 warnings of a step
MAX_REASON = 1_000  # characters of a reason in an annotation
MAX_SUMMARY_REASON = 300  # in the summary's table
MAX_RUNS = 200  # rows of the summary's runs table
MAX_WORST = 10  # failed or void trials the summary lists

_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def active(environ: Mapping[str, str]) -> bool:
    return environ.get("GITHUB_ACTIONS") == "true"


def workflow_link(environ: Mapping[str, str]) -> str | None:
    """`GITHUB_SERVER_URL/GITHUB_REPOSITORY/actions/runs/GITHUB_RUN_ID`, or None when a part
    is missing or is not what GitHub sets (a link is shown and opened: no odd one is kept)."""
    server = environ.get("GITHUB_SERVER_URL", "").rstrip("/")
    repository = environ.get("GITHUB_REPOSITORY", "")
    run_id = environ.get("GITHUB_RUN_ID", "")
    try:
        url = urlsplit(server)
    except ValueError:
        return None
    if (url.scheme not in ("https", "http") or url.path or url.query or url.fragment
            or "@" in url.netloc or not _HOST.fullmatch(url.netloc)):
        return None
    name = repository.partition("/")[2]
    if not _REPOSITORY.fullmatch(repository) or name in (".", ".."):
        return None
    if not re.fullmatch(r"[0-9]{1,20}", run_id):
        return None
    return f"{url.scheme}://{url.netloc}/{repository}/actions/runs/{run_id}"


# --- annotations -------------------------------------------------------------------------


def escape_data(text: str) -> str:
    """A workflow command's message as the runner unescapes it (actions/toolkit's escapeData)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (actions/toolkit's escapeProperty)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _plain(text: str, limit: int) -> str:
    """Control characters (escapes, lone surrogates) out, line breaks kept, cut to `limit`."""
    text = _CONTROL.sub(lambda m: m.group() if m.group() in "\n\r" else "", text[: limit * 4])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def annotations(summary: BatchSummary, sites: dict[str, Site]) -> list[str]:
    """One `::error` line per failed trial and one `::warning` per void one, at most
    MAX_ANNOTATIONS of each: past that, the last one says how many more there are."""
    lines: list[str] = []
    for outcome, command, what in (("fail", "error", "failed"), ("infra_error", "warning", "void")):
        found = [(run, trial) for run in summary.runs for trial in last_attempts(run)
                 if trial.outcome == outcome]
        shown = found if len(found) <= MAX_ANNOTATIONS else found[: MAX_ANNOTATIONS - 1]
        lines += [_annotation(run, trial, sites.get(run.case_id)) for run, trial in shown]
        if len(found) > len(shown):
            more = len(found) - len(shown)
            lines.append(f"::{command} title={escape_property(f'{more} more {what} trials')}::"
                         + escape_data(f"… and {more} more {what} trials: "
                                       f"`proctor ls --batch {summary.batch_id}` lists them"))
    return lines


def _annotation(run: RunSummary, trial: TrialSummary, site: Site | None) -> str:
    failed = trial.outcome == "fail"
    command = "error" if failed else "warning"
    what = "failed" if failed else "void (infra_error)"
    title = _plain(f"{run.case_id}#{trial.trial} {run.variant} {what}", 200)
    failure = trial.failure
    message = f"{failure.kind}: {failure.reason}" if failure else what
    properties = [f"title={escape_property(title)}"]
    if site is not None:
        properties[:0] = [f"file={escape_property(site.file)}", f"line={site.line}"]
    return f"::{command} {','.join(properties)}::{escape_data(_plain(message, MAX_REASON))}"


@contextmanager
def commands_stopped(stream: IO[str]) -> Iterator[None]:
    """Inside, the runner takes no workflow command from what the step prints: the batch's
    live lines quote what agents wrote. The token is random, so no agent can resume it."""
    token = f"proctor-{secrets.token_hex(16)}"
    _flush_all()
    print(f"::stop-commands::{token}", file=stream, flush=True)
    try:
        yield
    finally:
        try:
            _flush_all()  # what was printed inside reaches the log before commands resume
            print(f"::{token}::", file=stream, flush=True)
        except OSError:  # the step's output went away (a cancelled job)
            pass


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


class JsonOut(io.TextIOBase):
    """stdout for a `--json` command under GitHub Actions: JSON text in which `##[` (the old
    command syntax, which the runner takes anywhere in a line, and which JSON holds only
    inside a string) is written `##\\u005b`, the same JSON. Its guard lines are on stderr, a
    stream the runner may read out of order with this one."""

    def __init__(self, out: IO[str]) -> None:
        super().__init__()
        self._out = out
        self._held = ""  # a write's trailing '#'s: the next write may begin with '['

    def write(self, text: str) -> int:
        joined = self._held + text
        kept = joined.rstrip("#")
        self._held = joined[len(kept):]
        self._out.write(kept.replace("##[", "##\\u005b"))
        return len(text)

    def flush(self) -> None:
        if self._held:
            self._out.write(self._held)
            self._held = ""
        self._out.flush()


def json_text(data: object) -> str:
    """`data` as indented JSON in which no line is a workflow command: each line starts with
    a space, a quote or a bracket (never `::`), and the old syntax `##[`, which the runner takes
    anywhere in a line, can only be inside a string, where `\u005b` is the same `[`."""
    return json.dumps(data, indent=2).replace("##[", "##\\u005b")


# --- the step summary ---------------------------------------------------------------------


def code(text: str, limit: int = 200) -> str:
    """`text` as a Markdown code span that fits a table cell: rendered as it is, with no
    emphasis, HTML or link; `|` escaped (a table's cell ends at a bare one), line breaks spaces."""
    text = _plain(" ".join(text.split()), limit).replace("|", "\\|")
    if not text:
        return "—"
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def step_summary(summary: BatchSummary) -> str:
    """The batch in Markdown: a table of its runs, then the worst failures with their reasons."""
    rate_of = {run.run_id: run.distribution.pass_rate for run in summary.runs}
    lines = ["", f"### Proctor batch {code(summary.batch_id, 60)} · {summary.status}", "",
             "| case | variant | trials | passed | failed | void | pass rate | deterministic |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    for run in summary.runs[:MAX_RUNS]:
        d = run.distribution
        rate = "—" if d.pass_rate is None else f"{d.pass_rate:.0%}"
        lines.append(f"| {code(run.case_id)} | {code(run.variant)} | {d.trials} | {d.passed} | "
                     f"{d.failed} | {d.voided} | {rate} | {'yes' if d.deterministic else 'no'} |")
    if len(summary.runs) > MAX_RUNS:
        lines.append(f"\n… and {len(summary.runs) - MAX_RUNS} more runs: "
                     f"`proctor ls --batch {summary.batch_id}` lists them all")
    # Worst first: the runs passing least (a run with no rate last), a fail before a void trial.
    def badness(rt: tuple[RunSummary, TrialSummary]) -> tuple[float, bool]:
        rate = rate_of[rt[0].run_id]
        return (2.0 if rate is None else rate, rt[1].outcome != "fail")

    worst = sorted(((run, t) for run in summary.runs for t in last_attempts(run)
                    if t.outcome in ("fail", "infra_error")), key=badness)
    if worst:
        lines += ["", "#### Worst failures", "",
                  "| trial | case | variant | outcome | reason |", "|---|---|---|---|---|"]
        for run, t in worst[:MAX_WORST]:
            kind = f" ({t.failure.kind})" if t.failure else ""
            reason = code(t.failure.reason, MAX_SUMMARY_REASON) if t.failure else "—"
            lines.append(f"| {code(t.id, 60)} #{t.trial} | {code(run.case_id)} | "
                         f"{code(run.variant)} | {t.outcome}{kind} | {reason} |")
        if len(worst) > MAX_WORST:
            lines.append(f"\n… and {len(worst) - MAX_WORST} more: "
                         f"`proctor groups {summary.batch_id}` groups them by cause")
    return "\n".join(lines) + "\n\n"


def append_step_summary(path: Path, summary: BatchSummary) -> None:
    """Append the batch's Markdown to the step's summary file (other steps write there too)."""
    try:
        with path.open("a", encoding="utf-8", errors="replace") as out:
            out.write(step_summary(summary))
    except OSError as e:
        raise ReportError(f"GITHUB_STEP_SUMMARY {path}: could not be written "
                          f"({e.strerror or e})") from None


def report(summary: BatchSummary, sites: dict[str, Site], environ: Mapping[str, str],
           stream: IO[str]) -> None:
    """Everything but the link, which the batch's record took when it started: the summary
    (when the step has a summary file) and the annotations on `stream`."""
    for line in annotations(summary, sites):
        print(line, file=stream)
    stream.flush()
    if environ.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(Path(environ["GITHUB_STEP_SUMMARY"]), summary)
