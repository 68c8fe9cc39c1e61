"""The reports `proctor run` leaves for CI, in the order a run needs them: checked before the
batch (a --junit folder that is missing fails at once), the workflow link for the batch's
record, the live output guarded, and the files and annotations once the batch has ended."""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Mapping

from ..models import BatchSummary
from ..spec import Case
from . import ReportError, case_sites, github
from .junit import check_writable, write_junit


class CiReports:
    def __init__(self, junit: Path | None, cases: list[Case], environ: Mapping[str, str],
                 json_out: bool = False):
        if junit is not None:
            check_writable(junit)
        self.junit = junit
        self.environ = environ
        self.github = github.active(environ)
        self.link = github.workflow_link(environ) if self.github else None
        # Annotations name files as the repository does: from the workspace the job checked out.
        root = Path(environ.get("GITHUB_WORKSPACE") or ".") if self.github else Path(".")
        self.sites = case_sites(cases, root)
        # `--json` keeps stdout for the JSON; the runner reads workflow commands on both.
        self.stream = sys.stderr if json_out else sys.stdout

    def guarded(self) -> AbstractContextManager[None]:
        """Around everything printed that quotes an agent: no workflow command is read there."""
        return github.commands_stopped(self.stream) if self.github else nullcontext()

    def json_text(self, summary: BatchSummary) -> str:
        """`run --json`'s text; under GitHub Actions with no line the runner reads as a command."""
        data = summary.model_dump(mode="json")
        return github.json_text(data) if self.github else json.dumps(data, indent=2)

    def write(self, summary: BatchSummary) -> None:
        """The JUnit file and GitHub's summary and annotations; each is tried, then the first
        that failed is raised (ReportError)."""
        errors: list[ReportError] = []
        if self.junit is not None:
            try:
                write_junit(self.junit, summary, self.sites)
            except ReportError as e:
                errors.append(e)
        if self.github:
            try:
                github.report(summary, self.sites, self.environ, self.stream)
            except ReportError as e:
                errors.append(e)
        if errors:
            raise errors[0]
