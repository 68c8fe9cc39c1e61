"""Colours, glyphs and fonts shared by every view (STUDIO.md "Colour and type").

Outcome colours never stand alone: each has a glyph too. Phases get one hue
per group: preparation cool greys and blues, agent violet, checks teal, judge
orange, teardown and record grey; waiting for a slot is pale.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QFontDatabase, QPalette
from PySide6.QtWidgets import QApplication

OUTCOME_COLOUR = {
    "pass": "#2e9d4f",
    "fail": "#d1453b",
    "infra_error": "#c9952b",  # void: grey-amber
    "skipped": "#8a8f98",
    "running": "#3a7bd5",
    None: "#3a7bd5",
}
AMBER = OUTCOME_COLOUR["infra_error"]  # warnings and truncation marks share the void colour
OUTCOME_GLYPH = {"pass": "✓", "fail": "✗", "infra_error": "○", "skipped": "–", "running": "●", None: "●"}

VALIDATION_COLOUR = {"passed": "#2e9d4f", "failed": "#d1453b", "error": "#c9952b", "skipped": "#8a8f98"}
VALIDATION_GLYPH = {"passed": "✓", "failed": "✗", "error": "!", "skipped": "–"}

PHASE_GROUP = {
    "slot": "wait",
    "image": "prep", "container": "prep", "env": "prep", "workspace": "prep", "files": "prep",
    "setup": "prep", "snapshot": "prep",
    "harness": "agent", "turn": "agent", "diff": "agent",
    "check": "check",
    "judge": "judge",
    "teardown": "end", "record": "end",
}
GROUP_COLOUR = {
    "wait": "#d9dde3",
    "prep": "#6f8fb3",
    "agent": "#8a5cd1",
    "check": "#1f9e98",
    "judge": "#e08a2c",
    "end": "#9aa0a6",
}
# The row order of a trial's timeline: SPEC.md's phase order.
PHASE_ORDER = ["slot", "image", "container", "env", "workspace", "files", "setup", "snapshot",
               "harness", "turn", "diff", "check", "judge", "teardown", "record"]

# A redaction mark (`engine.redact.MARK`) is drawn as a badge of these colours.
REDACTED_BADGE_BG = "#b3261e"
REDACTED_BADGE_FG = "#ffffff"


def phase_colour(phase: str) -> QColor:
    return QColor(GROUP_COLOUR[PHASE_GROUP.get(phase, "end")])


def mono_font(size_delta: int = 0) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    if size_delta:
        font.setPointSize(max(6, font.pointSize() + size_delta))
    return font


def is_dark() -> bool:
    app = QApplication.instance()
    if app is None:
        return False
    window = app.palette().color(QPalette.ColorRole.Window)  # type: ignore[attr-defined]
    return window.lightness() < 128


def amber_text() -> str:
    """Amber for text: the void colour is too light to read as text on a light background."""
    return AMBER if is_dark() else QColor(AMBER).darker(135).name()
