"""The Evidence panel: one card per validation, saying what ran and what came back.

Validations are few (at most 64), so plain widgets in a scroll area are enough.
The blocks it is built of (`TextBlock`, `card`, `tag`, `wrapped`) are the
panels' shared widgets in `studio.widgets`; `OutputBlock` and `Fold` are its own.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget,
)

from engine.models import TrialRecord, Validation
from engine.text import fmt_ms
from studio.theme import AMBER, VALIDATION_COLOUR, VALIDATION_GLYPH, amber_text
from studio.widgets import (
    MUTED, ElidedLabel, TextBlock, card, muted_colour, rich, scroll_area, tag, wrapped,
)


# --- blocks of this panel -----------------------------------------------------------------------

class OutputBlock(QWidget):
    """A caption ("stdout · 120 lines"), a TextBlock, and "Show all" when the text is longer."""

    def __init__(self, caption: str, text: str, *, lines: int = 10,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = TextBlock(text, lines=lines)
        count = text.rstrip("\n").count("\n") + 1
        self.caption = QLabel(f"{caption} · {count:,} line{'s' if count != 1 else ''}")
        self.caption.setStyleSheet(MUTED)
        self.toggle = QPushButton(f"Show all {count:,} lines")
        self.toggle.setFlat(True)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.setStyleSheet("QPushButton { color: palette(link); padding: 0 4px; }")
        self.toggle.clicked.connect(self._toggle)
        self._count = count
        self.toggle.setVisible(count > lines)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.caption)
        top.addStretch(1)
        top.addWidget(self.toggle)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.text)

    def _toggle(self) -> None:
        self.text.set_expanded(not self.text.expanded)
        expanded = self.text.expanded
        self.toggle.setText("Show less" if expanded else f"Show all {self._count:,} lines")


class Fold(QWidget):
    """A titled section that opens and closes on click; closed by default."""

    def __init__(self, title: str, content: QWidget, *, open: bool = False,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.button = QToolButton()
        self.button.setText(title)
        self.button.setCheckable(True)
        self.button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.button.setAutoRaise(True)
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.toggled.connect(self.set_open)
        self.content = content
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.button)
        layout.addWidget(content)
        self.button.setChecked(open)
        self.set_open(open)

    def set_open(self, open: bool) -> None:
        self.button.setArrowType(Qt.ArrowType.DownArrow if open else Qt.ArrowType.RightArrow)
        self.button.setChecked(open)
        self.content.setVisible(open)


# --- the judge's score --------------------------------------------------------------------------

class ScoreBar(QWidget):
    """Score as a filled bar from 0 to 1, the threshold as a tick across it."""

    def __init__(self, score: float, threshold: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.score, self.threshold = score, threshold
        self.setFixedHeight(14)
        self.setMinimumWidth(120)
        self.setMaximumWidth(260)

    def sizeHint(self) -> QSize:
        return QSize(220, 14)

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        track = QRectF(0, 3, self.width() - 1, self.height() - 6)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(self.palette().mid())
        p.drawRoundedRect(track, 3, 3)
        passed = self.score >= self.threshold
        p.setBrush(QColor(VALIDATION_COLOUR["passed" if passed else "failed"]))
        filled = track.width() * max(0.0, min(self.score, 1.0))
        p.drawRoundedRect(QRectF(track.left(), track.top(), filled, track.height()), 3, 3)
        x = track.left() + track.width() * max(0.0, min(self.threshold, 1.0))
        p.setPen(self.palette().text().color())
        p.drawLine(int(x), 0, int(x), self.height())
        p.end()


# --- cards -------------------------------------------------------------------------------------

_HANDLED = {
    "command": {"command", "stdout", "stderr", "exit_code", "assertions", "error"},
    "judge": {"criterion", "threshold", "prompt", "model", "responses", "metadata", "judgment",
              "error"},
    "check": {"exception", "message", "traceback", "error"},
}


class ValidationCard(QFrame):
    """One validation: status glyph and colour, kind, name; then what ran and what came back."""

    def __init__(self, validation: Validation, number: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.validation = validation
        self.blocks: dict[str, TextBlock] = {}  # by what they hold: stdout, traceback, prompt, …
        self.score_bar: ScoreBar | None = None  # judge cards with a verdict
        self.score_label: QLabel | None = None
        colour = VALIDATION_COLOUR[validation.status]
        frame, self.body = card(colour)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(frame)

        head = QHBoxLayout()
        head.setSpacing(8)
        glyph = QLabel(VALIDATION_GLYPH[validation.status])
        glyph.setStyleSheet(f"color: {colour}; font-size: 16px; font-weight: 700;")
        glyph.setToolTip(validation.status)
        head.addWidget(glyph)
        head.addWidget(tag(f"{number} · {validation.kind}", "palette(mid)", "palette(text)"))
        self.title = ElidedLabel(validation.name, code=False)
        bold = QFont(self.title.font())
        bold.setBold(True)
        self.title.setFont(bold)
        head.addWidget(self.title, 1)
        self.status = QLabel(validation.status)
        self.status.setStyleSheet(f"color: {colour}; font-weight: 600;")
        head.addWidget(self.status)
        if validation.truncated:
            head.addWidget(tag("truncated", AMBER, "#1f1f1f"))
        code = validation.evidence.get("exit_code") if validation.kind == "command" else None
        if code is not None:
            exit_colour = VALIDATION_COLOUR["passed" if code == 0 else "failed"]
            head.addWidget(tag(f"exit {code}", exit_colour))
        ms = QLabel(fmt_ms(validation.ms))
        ms.setStyleSheet(MUTED)
        head.addWidget(ms)
        self.body.addLayout(head)

        evidence = validation.evidence
        kinds = {"command": self._command, "judge": self._judge, "check": self._check}
        kinds[validation.kind](evidence)
        if evidence.get("error"):
            self.body.addWidget(wrapped(f"! {evidence['error']}",
                                        style=f"color: {amber_text()}; font-weight: 600;"))
        if evidence.get("truncated_entries"):
            dropped = evidence["truncated_entries"]
            self.body.addWidget(wrapped(f"{dropped:,} entries left out (at most 64 are kept).",
                                        style=MUTED))
        if "truncated_json" in evidence:
            self._output("evidence (cut to fit)", str(evidence["truncated_json"]))
        extra = {k: v for k, v in evidence.items()
                 if k not in _HANDLED[validation.kind] | {"truncated_entries", "truncated_json"}}
        if extra:
            self._fold("More evidence",
                       json.dumps(extra, indent=2, ensure_ascii=False, default=str))

    # --- kinds ---

    def _command(self, e: dict[str, Any]) -> None:
        command = e.get("command", self.validation.name)
        # The title already names the command; repeat it whole only when the title cuts it.
        if command != self.validation.name or len(command) > 70 or "\n" in command:
            self.blocks["command"] = TextBlock(f"$ {command}", lines=4)
            self.body.addWidget(self.blocks["command"])
        for a in e.get("assertions", []):
            ok = bool(a.get("passed"))
            colour = VALIDATION_COLOUR["passed" if ok else "failed"]
            glyph = VALIDATION_GLYPH["passed" if ok else "failed"]
            line = f"{glyph} `{a.get('matcher', '')}` — {a.get('message', '')}"
            self.body.addWidget(wrapped(line, style="" if ok else f"color: {colour};"))
        empty = [name for name in ("stdout", "stderr") if not e.get(name)]
        for name in ("stdout", "stderr"):
            if e.get(name):
                self._output(name, e[name])
        if empty:
            note = " · ".join(f"{name} empty" for name in empty)
            self.body.addWidget(wrapped(note, style=MUTED))

    def _judge(self, e: dict[str, Any]) -> None:
        self.body.addWidget(wrapped(f"Criterion: {e.get('criterion', self.validation.name)}"))
        judgment = e.get("judgment") or {}
        threshold = float(e.get("threshold", 0.5))
        if "score" in judgment:
            score = float(judgment["score"])
            row = QHBoxLayout()
            row.setSpacing(10)
            self.score_bar = ScoreBar(score, threshold)
            row.addWidget(self.score_bar)
            colour = VALIDATION_COLOUR["passed" if score >= threshold else "failed"]
            self.score_label = QLabel(f"<b style='color:{colour}'>{score:.2f}</b>"
                                      f" vs threshold {threshold:.2f}")
            self.score_label.setTextFormat(Qt.TextFormat.RichText)
            row.addWidget(self.score_label)
            row.addStretch(1)
            self.body.addLayout(row)
        if judgment.get("reasoning"):
            self.body.addWidget(wrapped(f"Reasoning: {judgment['reasoning']}"))
        meta = dict(e.get("metadata") or {})
        model = meta.pop("model", None) or e.get("model")
        parts = [f"model {model}"] if model else []
        parts += [f"{k} {json.dumps(v) if isinstance(v, (dict, list)) else v}"
                  for k, v in meta.items()]
        if parts:
            self.body.addWidget(wrapped(" · ".join(parts), style=MUTED, code=False))
        if e.get("prompt"):
            self._fold(f"Prompt ({e['prompt'].count(chr(10)) + 1} lines)", e["prompt"])
        responses = e.get("responses") or []
        if responses:
            text = "\n\n".join(_response_text(i, r) for i, r in enumerate(responses, 1))
            self._fold(f"Raw responses ({len(responses)})", text)

    def _check(self, e: dict[str, Any]) -> None:
        failed = VALIDATION_COLOUR["failed"]
        self.body.addWidget(wrapped(f"{e.get('exception', 'Exception')}: {e.get('message', '')}",
                                    style=f"color: {failed}; font-weight: 600;"))
        if e.get("traceback"):
            self._output("traceback", e["traceback"])

    # --- pieces ---

    def _output(self, name: str, text: str) -> None:
        block = OutputBlock(name, text)
        self.blocks[name] = block.text
        self.body.addWidget(block)

    def _fold(self, title: str, text: str) -> None:
        block = TextBlock(text, lines=16)
        self.blocks[title.split(" (")[0].lower()] = block
        self.body.addWidget(Fold(title, block))


def _response_text(i: int, r: dict[str, Any]) -> str:
    head = f"#{i} " + (f"HTTP {r['status']}" if "status" in r else "no answer")
    for key in ("problem", "error"):
        if r.get(key):
            head += f" — {r[key]}"
    return head + ("\n" + r["raw"] if r.get("raw") else "")


def summary_text(validations: list[Validation]) -> str:
    """"3 validations · 2 passed · 1 failed"; error and skipped counts only when there are any."""
    counts = {s: sum(v.status == s for v in validations)
              for s in ("passed", "failed", "error", "skipped")}
    parts = [f"{len(validations)} validation{'s' if len(validations) != 1 else ''}",
             f"{counts['passed']} passed", f"{counts['failed']} failed"]
    parts += [f"{counts[s]} {s}" for s in ("error", "skipped") if counts[s]]
    return " · ".join(parts)


class EvidenceView(QWidget):
    """`show_record(record)`; None shows an empty state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.cards: list[ValidationCard] = []
        self.setup_log: TextBlock | None = None
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setContentsMargins(12, 8, 12, 4)
        self.note = wrapped("", style=MUTED)
        self.note.setContentsMargins(12, 0, 12, 0)
        self.scroll = scroll_area()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.summary)
        layout.addWidget(self.note)
        layout.addWidget(self.scroll, 1)
        self.show_record(None)

    def show_record(self, record: TrialRecord | None) -> None:
        self.cards = []
        self.setup_log = None
        inner = QWidget()
        column = QVBoxLayout(inner)
        column.setContentsMargins(12, 6, 12, 12)
        column.setSpacing(8)
        self.note.setVisible(False)
        if record is None:
            self.summary.setText("")
            self.note.setText("Select a trial to see what its checks and judges ran and saw.")
            self.note.setVisible(True)
        else:
            self.summary.setText(self._summary_html(record.validations))
            if not record.validations:
                why = f": {record.failure.reason}" if record.failure else ""
                self.note.setText(rich(("No validations ran; the trial was void"
                                        if record.outcome == "infra_error"
                                        else "No checks or judges ran in this trial") + why + "."))
                self.note.setVisible(True)
            for i, validation in enumerate(record.validations, 1):
                c = ValidationCard(validation, i)
                self.cards.append(c)
                column.addWidget(c)
            if record.setup_log:
                frame, body = card()
                title = QLabel("<b>setup.log</b>")
                body.addWidget(title)
                block = OutputBlock("setup steps' output", record.setup_log, lines=14)
                self.setup_log = block.text
                body.addWidget(block)
                column.addWidget(frame)
        column.addStretch(1)
        self.scroll.setWidget(inner)  # the old cards go with the old widget

    def _summary_html(self, validations: list[Validation]) -> str:
        head, *counts = summary_text(validations).split(" · ")
        parts = [f"<b>{head}</b>"]
        if not validations:
            return parts[0]
        for part in counts:
            n, status = part.split(" ", 1)
            colour = VALIDATION_COLOUR[status] if n != "0" else muted_colour(self)
            parts.append(f"<span style='color:{colour}'>{VALIDATION_GLYPH[status]} {part}</span>")
        return " · ".join(parts)
