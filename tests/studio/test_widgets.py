"""The widgets every panel shares (studio/widgets.py), as a user sees them: elided labels that
keep the whole text in a tooltip, outcome pills in the documented colours (STUDIO.md "Colour
and type"), redaction marks as badges, truncation marks in amber, read-only tables."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QTextDocument
from PySide6.QtWidgets import QAbstractItemView

from engine.models import Failure
from engine.redact import MARK
from studio.widgets import (
    ElidedLabel, TextBlock, fmt_bytes, make_table, marked_spans, outcome_pill, rich, table_item,
)

LONG = "python3 -c 'from greet import greet; assert greet(\"Ada\") == \"Hello, Ada!\"' exited 1"


def fragments(rich_text: str) -> list[tuple[str, QColor, QColor]]:
    """The runs of text Qt draws from `rich_text`: (text, background, foreground)."""
    doc = QTextDocument()
    doc.setHtml(rich_text)
    runs = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            f = it.fragment()
            fmt = f.charFormat()
            runs.append((f.text(), fmt.background().color(), fmt.foreground().color()))
            it += 1
        block = block.next()
    return runs


def contrast(a: QColor, b: QColor) -> float:
    """WCAG 2's contrast ratio of two colours, 1 to 21."""
    def luminance(c: QColor) -> float:
        linear = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
                  for v in (c.redF(), c.greenF(), c.blueF())]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_an_elided_label_cuts_to_its_width_and_keeps_the_whole_text_in_its_tooltip(qtbot):
    label = ElidedLabel(LONG + "\nsecond line")
    qtbot.addWidget(label)
    label.resize(160, 30)
    label.show()
    qtbot.waitExposed(label)
    shown = QTextDocument()
    shown.setHtml(label.text())
    text = shown.toPlainText()
    assert text.endswith("…") and len(text) < len(LONG) // 2
    assert label.toolTip() == label.full_text() == LONG + " second line"  # one line, all of it
    label.resize(2000, 30)
    shown.setHtml(label.text())
    assert shown.toPlainText() == LONG + " second line"
    label.set_full_text("short")
    assert label.toolTip() == ""  # nothing hidden, nothing to hover for


def test_an_elided_label_does_not_widen_its_layout(qtbot):
    label = ElidedLabel(LONG * 10)
    qtbot.addWidget(label)
    assert label.minimumSizeHint().width() == 0


@pytest.mark.parametrize("outcome, failure, words, hue", [
    ("pass", None, "✓ PASS", "green"),
    ("fail", Failure(kind="assertion", reason="exit 1"), "✗ FAIL assertion", "red"),
    ("fail", Failure(kind="timeout", reason="15m"), "✗ FAIL timeout", "red"),
    ("infra_error", Failure(kind="infra", reason="no image"), "○ INFRA ERROR", "amber"),
    ("skipped", None, "– SKIPPED", "grey"),
    (None, None, "● RUNNING", "blue"),
])
def test_an_outcome_pill_says_its_outcome_in_words_and_colour(qtbot, outcome, failure, words, hue):
    [(text, bg, fg)] = [run for run in fragments(outcome_pill(outcome, failure)) if run[0].strip()]
    assert text.replace("\xa0", " ").strip() == words  # a glyph too: never colour alone
    r, g, b = bg.red(), bg.green(), bg.blue()
    assert {"green": g > r + 40 and g > b + 40, "red": r > g + 80 and r > b + 80,
            "amber": r > b + 80 and g > b + 60 and r >= g, "grey": max(r, g, b) - min(r, g, b) < 20,
            "blue": b > r + 80 and b > g + 40}[hue], (hue, bg.name())
    # Readable: WCAG's 3:1 for bold text (white on the light amber would be 2.7:1).
    assert contrast(fg, bg) >= 3, (fg.name(), bg.name())


def test_rich_text_escapes_and_draws_marks_as_badges(qtbot):
    runs = fragments(rich(f"<b>key</b> {MARK} in `cat .env`"))
    plain = "".join(text for text, _, _ in runs).replace("\xa0", " ")
    assert plain == "<b>key</b>  redacted  in cat .env"  # the markup is text, the mark a badge
    [badge] = [run for run in runs if "redacted" in run[0]]
    assert badge[1].red() > 150 and badge[1].green() < 80 and badge[2].lightness() > 200


def test_marked_spans_count_as_qt_does_past_the_basic_plane():
    text = f"😀 {MARK} x\n… [truncated 12 chars] and [truncated 3"
    assert list(marked_spans(text)) == [(3, 13)]  # the emoji is two UTF-16 units
    assert list(marked_spans(text, "[truncated ", "]")) == [(18, 38), (43, len(text) + 1)]


def test_a_text_block_badges_marks_after_wide_characters(qtbot):
    block = TextBlock(f"😀😀 token={MARK}\nlog… [truncated 1,204 chars]\n")
    qtbot.addWidget(block)
    assert block.badge_spans() == [MARK]
    assert block.badge_spans("#c9952b") == ["[truncated 1,204 chars]"]


def test_a_table_is_read_only_and_a_long_cell_keeps_its_text_in_a_tooltip(qtbot):
    table = make_table(["path", "bytes"])
    qtbot.addWidget(table)
    table.setRowCount(1)
    long_path = "src/" + "deep/" * 12 + "module.py"
    table.setItem(0, 0, table_item(long_path, mono=True))
    table.setItem(0, 1, table_item("12", align_right=True, tip="12 bytes"))
    assert table.editTriggers() == QAbstractItemView.EditTrigger.NoEditTriggers
    assert table.item(0, 0).toolTip() == long_path and table.item(0, 1).toolTip() == "12 bytes"
    assert table_item("short").toolTip() == ""


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KB"),
                                     (5 * 1024**2, "5.0 MB"), (3 * 1024**4, "3072.0 GB")])
def test_byte_counts_read_in_the_largest_unit_up_to_gigabytes(n, text):
    assert fmt_bytes(n) == text


def test_a_skipped_trial_says_whether_it_ever_ran():
    """Proctor skips a trial the batch never started; an imported log's sample can run and
    be left unscored. The header said 'never started' of a 39 s Inspect sample."""
    from engine.models import PhaseSpan, TrialRecord
    from studio.widgets import failure_line

    never = TrialRecord(id="t_1", batch_id="b", run_id="r", case_id="c", variant="v", trial=1,
                        trigger="cli", outcome="skipped")
    assert failure_line(never) == "never started: the batch ended before this trial ran"
    ran = never.model_copy(update=dict(phases=[PhaseSpan(phase="turn", index=1, status="ok",
                                                          start_ms=4, end_ms=39_227)]))
    assert failure_line(ran).startswith("not scored: it ran")
