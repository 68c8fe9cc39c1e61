"""The line on top of the right side: what you are looking at and why it ended.

    writes_greet #2 · scripted                          ✗ FAIL assertion
    python3 -c '…' exited 1: AssertionError: -1 (check 1 of 2)
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from engine.models import BatchSummary, TrialRecord
from engine.text import fmt_ms, plural
from studio.models.live import LiveTrials
from studio.theme import OUTCOME_COLOUR
from studio.widgets import ElidedLabel, failure_line, outcome_pill, pill


class TrialHeader(QWidget):
    """`show_record(record)` for a trial; while it runs, its phase and clock from the live model.
    Over a replay (`replay=True`) the same, said to be a replay: nothing runs."""

    def __init__(self, live: LiveTrials | None = None, parent: QWidget | None = None,
                 replay: bool = False) -> None:
        super().__init__(parent)
        self.live = live
        self.replay = replay
        self._following: str | None = None  # the running trial shown, by id
        self._title: tuple[str, int, str] = ("", 0, "")  # its case, number and variant
        self.title = ElidedLabel(code=False)
        font = QFont(self.title.font())
        font.setPointSizeF(font.pointSizeF() * 1.2)
        font.setBold(True)
        self.title.setFont(font)
        self.outcome = QLabel()
        self.outcome.setTextFormat(Qt.TextFormat.RichText)
        self.outcome.setFont(font)
        self.reason = ElidedLabel()
        self.reason.setStyleSheet("color: palette(placeholder-text);")

        top = QHBoxLayout()
        top.setSpacing(12)
        top.addWidget(self.title, 1)
        top.addWidget(self.outcome, 0, Qt.AlignmentFlag.AlignRight)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.reason)
        layout.addStretch(1)  # stays a two-line strip, whatever height it is given
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.show_record(None)
        if live is not None:
            # On the clock only, 5 times a second, however many batches of events arrive.
            live.ticked.connect(self._show_clock)
            live.trial_finished.connect(self._on_trial_finished)

    def show_record(self, record: TrialRecord | None) -> None:
        self._following = None
        if record is not None and record.outcome is None and self.live is not None \
                and self.live.trial(record.id) is not None:
            self._following, self._title = record.id, (record.case_id, record.trial, record.variant)
            self._show_clock()
            return
        if record is None:
            self.title.set_full_text("No trial selected")
            self.outcome.setText("")
            self.reason.set_full_text("Pick a trial on the left, or run a suite (Ctrl+R).")
            return
        self.title.set_full_text(f"{record.case_id} #{record.trial} · {record.variant}")
        self.outcome.setText(outcome_pill(record.outcome, record.failure))
        self.reason.set_full_text(failure_line(record))

    def show_damaged(self, trial_id: str, message: str) -> None:
        """A trial whose stored record cannot be read: the sentence that says so."""
        self._following = None
        self.title.set_full_text(f"{trial_id} · damaged record")
        self.outcome.setText("")
        self.reason.set_full_text(message)

    def show_batch(self, summary: BatchSummary) -> None:
        """A batch: what it ran and how it went, run by run."""
        self._following = None
        trials = [t for run in summary.runs for t in run.trials]
        counts = {o: sum(t.outcome == o for t in trials) for o in ("pass", "fail", "infra_error", "skipped")}
        scored = counts["pass"] + counts["fail"]
        rate = f"{counts['pass'] / scored:.0%} passed" if scored else "nothing scored"
        how = summary.trigger if summary.origin is None else "imported"  # it ran elsewhere
        self.title.set_full_text(f"{summary.batch_id} · {how} · {plural(len(summary.runs), 'run')}"
                                 f" · {plural(len(trials), 'trial')}")
        running = summary.status == "running"
        self.outcome.setText(outcome_pill(None) if running else "")
        parts = [rate, f"{counts['pass']} pass", f"{counts['fail']} fail", f"{counts['infra_error']} void"]
        if counts["skipped"]:
            parts.append(f"{counts['skipped']} skipped")
        origin = f" · from {summary.origin}" if summary.origin is not None else ""
        self.reason.set_full_text(" · ".join(parts) + f" · {summary.status}{origin}")

    def show_live(self, case: str, trial: int, variant: str, phase: str, elapsed_ms: int) -> None:
        self.title.set_full_text(f"{case} #{trial} · {variant}")
        if self.replay:
            self.outcome.setText(pill("▶ REPLAY", OUTCOME_COLOUR["skipped"]))
            self.reason.set_full_text(f"{phase} · {fmt_ms(elapsed_ms)} into the recording")
            return
        self.outcome.setText(outcome_pill(None))
        self.reason.set_full_text(f"{phase} · {fmt_ms(elapsed_ms)} elapsed")

    def _show_clock(self) -> None:
        trial = self.live.trial(self._following) if self.live and self._following else None
        if trial is not None:
            elapsed = trial.spans.now_ms(self.live.now_ms())
            self.show_live(*self._title, trial.spans.running_label, elapsed)

    def _on_trial_finished(self, trial_id: str, _outcome: str) -> None:
        if trial_id == self._following:  # its record follows; until then, as it last was
            self._following = None
