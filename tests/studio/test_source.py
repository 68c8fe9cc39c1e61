"""The Source tab: the eval file the record keeps, read-only, with the case's lines marked;
"Source unavailable" when the record keeps none (as Sphynx says)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from studio.views.source import UNAVAILABLE, SourceView, case_lines


def lines_of(text: str, *starts: str) -> list[int]:
    lines = text.split("\n")
    return [next(i for i, line in enumerate(lines, 1) if line.startswith(s)) for s in starts]


def test_ctrl_7_shows_the_eval_file_with_the_cases_lines_highlighted(window, recorded, records, qtbot):
    record = records["adds_numbers"]
    eval_path, eval_text = next(iter(record.source.items()))
    assert window.browser.select_id(record.id)
    qtbot.waitUntil(lambda: window.header.isVisible())
    qtbot.keyClick(window, Qt.Key.Key_7, Qt.KeyboardModifier.ControlModifier)
    view = window.views["source"]
    assert window.tabs.currentWidget() is view and window.tabs.tabText(6) == "Source"
    assert view.text() == eval_text and view.edit.isReadOnly()
    first, last = lines_of(eval_text, "@evaluation(workspace=git(init=True), files=AGENT, tags=[\"math\"])",
                           "def adds_numbers(c):")
    assert view.edit.highlighted_lines() == list(range(first, last + 1))
    assert view.where.full_text().startswith(f"case adds_numbers · line {first}")
    # The case's lines are on screen, and the gutter is wide enough for the line numbers.
    assert view.edit.verticalScrollBar().value() <= first - 1
    assert view.edit.viewportMargins().left() >= view.edit.fontMetrics().horizontalAdvance("999")
    # proctor.toml too, as a second file; the eval file first.
    assert [view.files.tabText(i) for i in range(view.files.count())] == ["suite.eval.py", "proctor.toml"]
    view.files.setCurrentIndex(1)
    assert view.text() == record.source[list(record.source)[1]] and view.edit.highlighted_lines() == []
    window.grab().save("/tmp/source-tab.png")


def test_a_record_without_source_says_source_unavailable(qtbot, records):
    view = SourceView()
    qtbot.addWidget(view)
    view.show_record(records["writes_greet"].model_copy(update={"source": {}}))
    assert view.pages.currentWidget() is view.empty and view.empty.text() == UNAVAILABLE
    assert UNAVAILABLE.startswith("Source unavailable")
    view.show_record(None)
    assert view.empty.text().startswith("Select a trial") and view.text() == ""


def test_a_bidirectional_control_in_the_source_is_a_marker(qtbot, records):
    trojan = 'access = "user\u202e \u2066# admin\u2069 \u2066"\n\n@evaluation()\ndef writes_greet(c):\n    pass\n'
    record = records["writes_greet"].model_copy(update={"source": {"/s/x.eval.py": trojan}})
    view = SourceView()
    qtbot.addWidget(view)
    view.show_record(record)
    assert view.text().split("\n")[0] == 'access = "user⟨U+202E⟩ ⟨U+2066⟩# admin⟨U+2069⟩ ⟨U+2066⟩"'
    assert view.edit.highlighted_lines() == [3, 4] and not view.files.isVisibleTo(view)


def test_case_lines_spans_its_decorators_and_stops_at_a_blank_line():
    text = "x = 1\n\n@other\n@evaluation(\n    trials=2,\n)\nasync def case_a(c):\n    pass\n"
    assert case_lines(text, "case_a") == (3, 7)
    assert case_lines(text, "case_b") is None
    assert case_lines("def case_ab(c): pass\ndef case_a (c): pass", "case_a") == (2, 2)
