"""`proctor run --junit FILE`: the batch as JUnit XML, the test report any CI system shows.

One <testsuite> per run (case × variant), one <testcase> per trial by its last attempt,
its time the trial's own. A fail is <failure message=reason type=kind>, a void trial
(infra_error) is <error>, a skipped one <skipped/>. The shape is the one Jenkins'
junit-4.xsd allows (tests/data/junit.xsd validates it), so e.g. the root <testsuites> has no
`skipped` count: that schema has none there.

Reasons are redacted records, but an agent writes part of them: each is bounded and loses
the characters XML 1.0 cannot hold (control characters, lone surrogates), so no reason
makes the file unreadable. The file is written whole or not at all (a temporary file renamed).
"""

from __future__ import annotations

import os
import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from ..models import BatchSummary, RunSummary, TrialSummary
from . import ReportError, Site, last_attempts

MAX_REASON = 2_000  # characters of a failure's reason kept
MAX_NAME = 300  # of a case id, variant name or file name
# Everything XML 1.0's Char production leaves out.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str, limit: int = MAX_REASON) -> str:
    """`text` as XML 1.0 can hold it, cut to `limit` characters (the cut marked)."""
    text = _NOT_XML.sub("", text[: limit * 8])  # what is past even this much is cut anyway
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_writable(path: Path) -> None:
    """Before the batch: the report's folder exists and takes a file (a typo found at once,
    not after an hour of trials)."""
    folder = path.parent  # "." for a bare file name
    if path.is_dir():
        raise ReportError(f"--junit {path}: is a folder; name a file such as report.xml")
    if not folder.is_dir():
        raise ReportError(f"--junit {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ReportError(f"--junit {path}: the folder {folder} is not writable")


def junit_tree(summary: BatchSummary, sites: dict[str, Site]) -> ET.ElementTree:
    root = ET.Element("testsuites", name=f"proctor batch {xml_text(summary.batch_id, MAX_NAME)}")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    seconds = 0.0
    for run in summary.runs:
        suite, counts, took = _suite(run, summary, sites.get(run.case_id))
        root.append(suite)
        for key in totals:
            totals[key] += counts[key]
        seconds += took
    root.attrib.update({k: str(v) for k, v in totals.items()})
    root.set("time", f"{seconds:.3f}")
    return ET.ElementTree(root)


def _suite(run: RunSummary, summary: BatchSummary,
           site: Site | None) -> tuple[ET.Element, dict[str, int], float]:
    case, variant = xml_text(run.case_id, MAX_NAME), xml_text(run.variant, MAX_NAME)
    classname = xml_text(site.file, MAX_NAME) if site else case
    trials = last_attempts(run)
    counts = {"tests": len(trials),
              "failures": sum(t.outcome == "fail" for t in trials),
              "errors": sum(t.outcome in ("infra_error", None) for t in trials),
              "skipped": sum(t.outcome == "skipped" for t in trials)}
    seconds = sum((t.duration_ms or 0) / 1000 for t in trials if t.outcome != "skipped")
    suite = ET.Element("testsuite", name=f"{case} [{variant}]",
                       **{k: str(v) for k, v in counts.items()}, time=f"{seconds:.3f}")
    if summary.started_at:
        suite.set("timestamp", xml_text(summary.started_at, 40))
    properties = ET.SubElement(suite, "properties")
    for name, value in (("batch", summary.batch_id), ("run", run.run_id), ("case", run.case_id),
                        ("variant", run.variant), ("trigger", summary.trigger),
                        ("line", str(site.line) if site else None), ("link", summary.link)):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=xml_text(value, MAX_NAME))
    for trial in trials:
        suite.append(_case(trial, case, variant, classname))
    return suite, counts, seconds


def _case(trial: TrialSummary, case: str, variant: str, classname: str) -> ET.Element:
    took = 0.0 if trial.outcome == "skipped" else (trial.duration_ms or 0) / 1000
    element = ET.Element("testcase", name=f"{case}#{trial.trial} {variant}", classname=classname,
                         time=f"{took:.3f}")
    failure = trial.failure
    reason = xml_text(failure.reason) if failure else ""
    kind = failure.kind if failure else ""
    if trial.outcome == "fail":
        ET.SubElement(element, "failure", message=reason, type=kind).text = _body(trial)
    elif trial.outcome == "infra_error":
        error = ET.SubElement(element, "error", message=reason or "void", type=kind or "infra")
        error.text = _body(trial)
    elif trial.outcome is None:  # the batch ended and left it unfinished: no pass
        ET.SubElement(element, "error", message="the trial never finished", type="infra")
    elif trial.outcome == "skipped":
        ET.SubElement(element, "skipped")  # junit-4.xsd: a plain text element, no attributes
    attempt = f", attempt {trial.attempt}" if trial.attempt > 1 else ""
    trial_id = xml_text(trial.id, MAX_NAME)
    ET.SubElement(element, "system-out").text = (
        f"trial {trial_id}{attempt}: `proctor show {trial_id}` prints its record\n")
    return element


def _body(trial: TrialSummary) -> str:
    """A failure's text: its reason and where it happened."""
    failure = trial.failure
    if failure is None:
        return ""
    where = f" ({xml_text(failure.where, MAX_NAME)})" if failure.where else ""
    return f"{failure.kind}{where}: {xml_text(failure.reason)}"


def write_junit(path: Path, summary: BatchSummary, sites: dict[str, Site]) -> None:
    """Write the batch's JUnit XML to `path` whole, replacing what was there."""
    tree = junit_tree(summary, sites)
    ET.indent(tree)
    folder = path.parent  # "." for a bare file name
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise ReportError(f"--junit {path}: cannot write in {folder} ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as out:
            tree.write(out, encoding="utf-8", xml_declaration=True)
            out.write(b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o644)  # a CI artifact other steps read; mkstemp makes it 0600
        os.replace(temp, path)
    except OSError as e:
        Path(temp).unlink(missing_ok=True)
        raise ReportError(f"--junit {path}: could not be written ({e.strerror or e})") from None
