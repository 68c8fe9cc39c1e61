"""The line on top of the right side: what you are looking at and why it ended.

    writes_greet #2 · scripted                          ✗ FAIL assertion
    python3 -c '…' exited 1: AssertionError: -1 (check 1 of 2)

Also the small text helpers the other panels share: rich text with `[redacted]`
badges and `code` spans, outcome words, and a label that elides instead of
pushing its layout wider.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QFont, QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from engine.models import BatchSummary, Failure, TrialRecord
from engine.text import plural
from studio.theme import OUTCOME_COLOUR, OUTCOME_GLYPH, fmt_ms, mono_font, redacted_html

_CODE = re.compile(r"`([^`]*)`?")
_OUTCOME_WORD = {"pass": "PASS", "fail": "FAIL", "infra_error": "INFRA ERROR", "skipped": "SKIPPED",
                 None: "RUNNING"}


def rich(text: str, *, code: bool = True) -> str:
    """Plain text as Qt rich text: escaped, `code` spans in monospace, `[redacted]` as badges."""
    escaped = html.escape(text)
    if code and "`" in escaped:
        family = html.escape(mono_font().family())
        escaped = _CODE.sub(lambda m: f"<span style=\"font-family:'{family}'\">{m.group(1)}</span>",
                            escaped)
    return redacted_html(escaped).replace("\n", "<br>")


def muted_colour(widget: QWidget) -> str:
    """Half way from the text colour to the background: readable, and clearly secondary.

    Rich text cannot use QSS's palette(placeholder-text), and the palette's own
    placeholder colour carries an alpha that a colour name drops.
    """
    palette = widget.palette()
    text, base = palette.text().color(), palette.window().color()
    return QColor((text.red() + base.red()) // 2, (text.green() + base.green()) // 2,
                  (text.blue() + base.blue()) // 2).name()


def outcome_words(outcome: str | None, failure: Failure | None = None) -> str:
    """"✗ FAIL assertion", "✓ PASS", "○ INFRA ERROR", "● RUNNING": read without colour too."""
    word = f"{OUTCOME_GLYPH[outcome]} {_OUTCOME_WORD.get(outcome, str(outcome).upper())}"
    if failure is not None and outcome == "fail":
        word += f" {failure.kind}"
    return word


def outcome_pill(outcome: str | None, failure: Failure | None = None) -> str:
    """The outcome as a filled pill, in rich text."""
    # Amber is too light behind white text; dark text keeps it readable.
    fg = "#1f1f1f" if outcome == "infra_error" else "#ffffff"
    bg = OUTCOME_COLOUR[outcome]
    return (f"<span style='background-color:{bg}; color:{fg}; font-weight:700;'>"
            f"&nbsp;{html.escape(outcome_words(outcome, failure))}&nbsp;</span>")


def failure_line(record: TrialRecord) -> str:
    """Why the trial ended, in one line: the failure's reason and where it happened."""
    f = record.failure
    if f is not None:
        where = f" ({f.where})" if f.where else ""
        void = " · void" if record.outcome == "infra_error" else ""
        return f"{f.reason}{where}{void}"
    if record.outcome == "pass":
        passed = sum(v.status == "passed" for v in record.validations)
        parts = [f"{passed} of {len(record.validations)} validations passed",
                 plural(len(record.turns), "turn"), plural(record.command_count, "command")]
        if record.phases:
            parts.append(fmt_ms(max(p.end_ms for p in record.phases)))
        return " · ".join(parts)
    if record.outcome == "skipped":
        return "never started: the batch ended before this trial ran"
    return "running"


class ElidedLabel(QLabel):
    """One line of text cut with "…" to fit its width, the whole of it in the tooltip.

    A long failure reason or command would otherwise widen the whole panel.
    """

    def __init__(self, text: str = "", parent: QWidget | None = None, *, code: bool = True) -> None:
        super().__init__(parent)
        self._full = ""
        self._code = code
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.set_full_text(text)

    def full_text(self) -> str:
        return self._full

    def set_full_text(self, text: str) -> None:
        self._full = text.replace("\n", " ")
        self.setToolTip(self._full if len(self._full) > 40 else "")
        self._refit()

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        width = self.fontMetrics().horizontalAdvance(self._full) + 24
        return QSize(width, super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._refit()

    def _refit(self) -> None:
        # Badges and monospace spans run a little wider than the plain text measured here.
        width = max(0, self.width() - 16)
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width)
        text = rich(shown, code=self._code)
        if text != self.text():
            self.setText(text)


class TrialHeader(QWidget):
    """`show_record(record)` for a stored trial, `show_live(...)` for one that is running."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
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

    def show_record(self, record: TrialRecord | None) -> None:
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
        self.title.set_full_text(f"{trial_id} · damaged record")
        self.outcome.setText("")
        self.reason.set_full_text(message)

    def show_batch(self, summary: BatchSummary) -> None:
        """A batch: what it ran and how it went, run by run."""
        trials = [t for run in summary.runs for t in run.trials]
        counts = {o: sum(t.outcome == o for t in trials) for o in ("pass", "fail", "infra_error", "skipped")}
        scored = counts["pass"] + counts["fail"]
        rate = f"{counts['pass'] / scored:.0%} passed" if scored else "nothing scored"
        self.title.set_full_text(f"{summary.batch_id} · {summary.trigger} · {plural(len(summary.runs), 'run')}"
                                 f" · {plural(len(trials), 'trial')}")
        running = summary.status == "running"
        self.outcome.setText(outcome_pill(None) if running else "")
        parts = [rate, f"{counts['pass']} pass", f"{counts['fail']} fail", f"{counts['infra_error']} void"]
        if counts["skipped"]:
            parts.append(f"{counts['skipped']} skipped")
        self.reason.set_full_text(" · ".join(parts) + f" · {summary.status}")

    def show_live(self, case: str, trial: int, variant: str, phase: str, elapsed_ms: int) -> None:
        self.title.set_full_text(f"{case} #{trial} · {variant}")
        self.outcome.setText(outcome_pill(None))
        self.reason.set_full_text(f"{phase} · {fmt_ms(elapsed_ms)} elapsed")
