"""Colours, glyphs and fonts shared by every view (STUDIO.md "Colour and type"), light and dark.

Outcome colours never stand alone: each has a glyph too. Phases get one hue
per group: preparation cool greys and blues, agent violet, checks teal, judge
orange, teardown and record grey; waiting for a slot is pale.

`apply(choice)` sets the application's palette (Fusion; dark, light, or as the
desktop says) and swaps the colour tables below in place, so a view that reads
them when it paints draws the variant at once. The dark outcome colours keep a
WCAG contrast of at least 3:1 on the dark background (tests/studio/test_settings.py).
"""

from __future__ import annotations

from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

Choice = Literal["light", "dark", "system"]
Scheme = Literal["light", "dark"]
CHOICES: tuple[Choice, ...] = ("light", "dark", "system")

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


# The light tables as first written; apply("light") puts them back.
_LIGHT = {"outcome": dict(OUTCOME_COLOUR), "validation": dict(VALIDATION_COLOUR), "group": dict(GROUP_COLOUR)}
# Lifted a little from the light ones so each reads on DARK_WINDOW and DARK_BASE (>= 4:1) and
# white text on them stays >= 3:1; the void amber already does both, so AMBER is one colour.
_DARK = {
    "outcome": {"pass": "#37a85a", "fail": "#e5534b", "infra_error": AMBER, "skipped": "#8a909a",
                "running": "#4c8ee6", None: "#4c8ee6"},
    "validation": {"passed": "#37a85a", "failed": "#e5534b", "error": AMBER, "skipped": "#8a909a"},
    "group": {"wait": "#505661", "prep": "#6f8fb3", "agent": "#9b6fe0", "check": "#22a59f",
              "judge": "#e08a2c", "end": "#8a909a"},
}
DARK_WINDOW = "#202124"  # panels, the toolbar
DARK_BASE = "#1a1b1e"  # lists, tables, text and the timeline's plot
_DARK_ROLES = {
    "Window": DARK_WINDOW, "WindowText": "#e8eaed", "Base": DARK_BASE, "AlternateBase": "#25272b",
    "ToolTipBase": "#2d2f33", "ToolTipText": "#e8eaed", "PlaceholderText": "#9aa0a6", "Text": "#e8eaed",
    "Button": "#2d2f33", "ButtonText": "#e8eaed", "BrightText": "#ff6b6b", "Light": "#4a4d52",
    "Midlight": "#3a3c41", "Mid": "#303236", "Dark": "#151618", "Shadow": "#000000",
    "Highlight": "#3d6fb6", "HighlightedText": "#ffffff", "Link": "#8ab4f8", "LinkVisited": "#c58af9",
}
_DARK_DISABLED = {"WindowText": "#6f737a", "Text": "#6f737a", "ButtonText": "#6f737a",
                  "HighlightedText": "#9aa0a6", "Highlight": "#34373c"}


def dark_palette() -> QPalette:
    palette = QPalette()
    for role, colour in _DARK_ROLES.items():
        palette.setColor(QPalette.ColorRole[role], QColor(colour))
    for role, colour in _DARK_DISABLED.items():
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole[role], QColor(colour))
    return palette


def desktop_scheme() -> Scheme:
    """What the desktop asks for (Qt 6.5+ QStyleHints.colorScheme); light when it says nothing."""
    hints = QGuiApplication.styleHints()
    return "dark" if hints.colorScheme() == Qt.ColorScheme.Dark else "light"


def scheme_of(choice: str) -> Scheme:
    return desktop_scheme() if choice == "system" else ("dark" if choice == "dark" else "light")


_choice: Choice = "light"


def current_choice() -> Choice:
    return _choice


def apply(choice: Choice, app: QApplication | None = None) -> Scheme:
    """Make the whole studio light, dark or as the desktop says, now; returns the scheme drawn.

    Every widget gets the palette-change event, and views painting from the tables above
    draw the new colours at their next paint."""
    global _choice
    app = app or QApplication.instance()  # type: ignore[assignment]
    if app is None:
        raise RuntimeError("theme.apply needs a QApplication")
    _choice = choice if choice in CHOICES else "light"
    scheme = scheme_of(_choice)
    for name, table in (("outcome", OUTCOME_COLOUR), ("validation", VALIDATION_COLOUR),
                        ("group", GROUP_COLOUR)):
        table.clear()
        table.update((_DARK if scheme == "dark" else _LIGHT)[name])
    if app.style().name().lower() != "fusion":  # the one style that draws any palette faithfully
        app.setStyle("Fusion")
    app.setPalette(dark_palette() if scheme == "dark" else app.style().standardPalette())
    _follow_desktop(app)
    for widget in app.topLevelWidgets():  # custom-painted views repaint with the new tables
        widget.update()
    return scheme


_following: set[int] = set()


def _follow_desktop(app: QApplication) -> None:
    """Once per application: when the desktop switches and the choice is "system", follow it."""
    if id(app) in _following:
        return
    _following.add(id(app))

    def changed(_scheme: Qt.ColorScheme) -> None:
        if _choice == "system":
            apply("system", app)

    app.styleHints().colorSchemeChanged.connect(changed)


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of an sRGB colour."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    q = QColor(colour)
    return 0.2126 * linear(q.redF()) + 0.7152 * linear(q.greenF()) + 0.0722 * linear(q.blueF())


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio, 1 to 21."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


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
