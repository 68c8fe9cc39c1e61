"""What a finished batch leaves for a CI system: a JUnit XML file (`junit`), GitHub Actions'
step summary, annotations and run link (`github`), and the pass-rate gate (`gate`).

Every report reads the batch as the store gives it (`BatchSummary`): reasons there are
redacted already, but an agent still writes part of them, so each report bounds them and
escapes them for its own format.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..models import RunSummary, TrialSummary
from ..spec import Case


class ReportError(Exception):
    """A report could not be written: one sentence naming the file and what to do."""


class Site(BaseModel):
    """Where a case is written: its eval file as CI names it, and the line of its function."""

    model_config = ConfigDict(frozen=True)
    file: str
    line: int


def case_sites(cases: list[Case], root: Path) -> dict[str, Site]:
    """Each case's eval file relative to `root` (the workspace a CI checks out; an absolute
    path when outside it) and line, by case id (ids are unique in a batch)."""
    root = root.resolve()
    sites = {}
    for case in cases:
        path = Path(case.file).resolve()
        try:
            shown = path.relative_to(root).as_posix()
        except ValueError:
            shown = path.as_posix()
        sites[case.id] = Site(file=shown, line=case.line)
    return sites


def last_attempts(run: RunSummary) -> list[TrialSummary]:
    """A run's trials by their last attempt: a void trial `--retry-void` ran again to a score is
    that score, as the exit status counts it."""
    last: dict[int, TrialSummary] = {}
    for trial in run.trials:  # the store lists a trial number's attempts in the order they ran
        last[trial.trial] = trial
    return [last[n] for n in sorted(last)]
