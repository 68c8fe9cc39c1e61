"""The browser's search box over the full-text index (issue 17): hits with the match
highlighted, Enter opening the trial at the item, scopes, a malformed query and no hits.
In a real window over the recorded batch (real trials, a real store and its index)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from studio.models.search_hits import HitRole
from studio.theme import OUTCOME_COLOUR
from studio.views.browser import HITS_ONLY_TEXT, NO_MATCH_TEXT
from studio.views.search_hits import NO_HITS, segments


def search(window, qtbot, query: str):
    """Type `query` into the browser's search box, as a user does, and wait for its hits."""
    box, hits = window.browser.search, window.hits
    box.setFocus()
    box.clear()
    qtbot.keyClicks(box, query)
    qtbot.waitUntil(lambda: hits.model.query == query.strip() and not hits.model.busy, timeout=5000)
    return hits


def shown(hits) -> list:
    return [hits.model.index(row).data(HitRole) for row in range(hits.model.rowCount())]


def highlighted(hit) -> list[str]:
    """The parts of a hit's snippet the panel paints as matches."""
    return [text for text, match in segments(hit.snippet, hit.marks) if match]


def amber_pixels(image: QImage, right: float = 1.0) -> int:
    """Pixels of the match highlight (amber over a light row) in a picture, left of `right`."""
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), np.uint32).reshape(image.height(), -1)
    pixels = pixels[:, :int(right * image.width())]
    r, g, b = (pixels >> 16) & 0xFF, (pixels >> 8) & 0xFF, pixels & 0xFF
    return int(((r > 225) & (g > 195) & (g < 235) & (b > 110) & (b < 175)).sum())


def test_a_word_from_a_commands_output_shows_a_hit_with_the_match_highlighted(window, qtbot, recorded):
    hits = search(window, qtbot, "return")
    assert hits.isVisible() and hits.list.isVisible()
    [output] = [h for h in shown(hits) if h.where == "item" and h.field == "output"]
    assert output.trial_id == recorded.trials["adds_numbers"] and output.case_id == "adds_numbers"
    assert highlighted(output) == ["return"]
    assert "def add(a, b): return a - b" in output.snippet
    assert hits.status.text().startswith(f"{len(shown(hits))} hits")
    assert amber_pixels(hits.list.viewport().grab().toImage()) > 100  # the match, highlighted


def test_down_then_enter_opens_the_trial_with_that_item_selected_and_escape_clears(window, qtbot, recorded):
    hits = search(window, qtbot, "return")
    target = next(row for row, h in enumerate(shown(hits)) if h.field == "output")
    qtbot.keyClick(window.browser.search, Qt.Key.Key_Down)
    assert hits.list.hasFocus() and hits.list.currentIndex().row() == 0
    for _ in range(target):
        qtbot.keyClick(hits.list, Qt.Key.Key_Down)
    qtbot.keyClick(hits.list, Qt.Key.Key_Return)

    assert window.selected_trial == recorded.trials["adds_numbers"]
    assert window.tabs.currentWidget() is window.trajectory
    trajectory = window.trajectory
    current = trajectory.list.currentIndex()
    row = trajectory.model.rows[trajectory.proxy.mapToSource(current).row()]
    assert (row.kind, row.title) == ("command", "cat calc.py")
    assert trajectory.list.viewport().rect().intersects(trajectory.list.visualRect(current))

    qtbot.keyClick(hits.list, Qt.Key.Key_Escape)  # back to the box, which is cleared
    assert window.browser.search.text() == "" and window.browser.search.hasFocus()
    qtbot.waitUntil(lambda: not hits.isVisible(), timeout=2000)


def test_in_message_narrows_to_messages(window, qtbot):
    everywhere = shown(search(window, qtbot, "done"))
    messages = shown(search(window, qtbot, "in:message done"))
    assert {h.field for h in everywhere} > {"message"}
    assert messages and {h.field for h in messages} == {"message"}
    assert len(messages) < len(everywhere)
    assert all(highlighted(h) == ["done"] for h in messages)


def test_a_click_on_an_evidence_hit_opens_its_card_and_a_prompt_hit_its_turn(window, qtbot, recorded):
    hits = search(window, qtbot, "in:evidence return")
    evidence = shown(hits)[0]
    qtbot.mouseClick(hits.list.viewport(), Qt.MouseButton.LeftButton,
                     pos=hits.list.visualRect(hits.model.index(0)).center())
    assert window.selected_trial == evidence.trial_id == recorded.trials["writes_greet"]
    assert window.tabs.currentWidget() is window.evidence
    assert window.evidence.cards[evidence.position].validation.kind == "command"

    hits = search(window, qtbot, "in:prompt Hello")
    [prompt] = shown(hits)
    window.open_hit(prompt)
    assert window.tabs.currentWidget() is window.trajectory
    current = window.trajectory.list.currentIndex()
    header = window.trajectory.model.rows[window.trajectory.proxy.mapToSource(current).row()]
    assert header.kind == "turn" and header.title.startswith("Turn 2 · Now make greet say")


def test_a_malformed_query_says_why_in_the_panel_not_a_dialog(window, qtbot):
    hits = search(window, qtbot, "nosuch:thing pip")
    assert hits.isVisible() and not hits.list.isVisible()
    assert hits.status.text().startswith("unknown filter nosuch:")
    assert OUTCOME_COLOUR["fail"] in hits.status.styleSheet()
    assert QApplication.activeModalWidget() is None


def test_a_query_with_no_hits_says_so(window, qtbot):
    hits = search(window, qtbot, "zyzzyva")
    assert hits.isVisible() and not hits.list.isVisible()
    assert hits.status.text() == NO_HITS
    browser = window.browser
    qtbot.waitUntil(lambda: browser.empty.isVisible(), timeout=5000)
    assert browser.empty.text() == NO_MATCH_TEXT


def test_words_found_only_inside_records_point_the_empty_tree_at_the_hits(window, qtbot):
    """The tree filters by id, case and reason; a word only in a command's output has hits
    above it, and the empty tree says where they are instead of "no trial matches"."""
    hits = search(window, qtbot, "return")
    assert shown(hits)
    browser = window.browser
    qtbot.waitUntil(lambda: browser.empty.isVisible(), timeout=5000)
    assert browser.empty.text() == HITS_ONLY_TEXT


@pytest.mark.parametrize("page", [3])
def test_more_reads_the_next_page_of_hits(window, qtbot, page):
    window.hits.model.page = page
    hits = search(window, qtbot, "greet")
    assert len(shown(hits)) == page and hits.more.isVisible()
    assert hits.status.text().startswith(f"{page} hits so far")
    qtbot.mouseClick(hits.more, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not hits.model.busy, timeout=5000)
    more = shown(hits)
    assert len(more) == 2 * page and len({(h.trial_id, h.where, h.position, h.field) for h in more}) == 2 * page


@pytest.mark.slow  # a studio started and drawn
def test_a_screenshot_with_search_shows_the_hits_highlighted(recorded, tmp_path):
    out = tmp_path / "search.png"
    done = subprocess.run([sys.executable, "-m", "engine.cli", "studio",
                           "--store", str(recorded.store_path), "--search", "add",
                           "--screenshot", str(out), "--size", "1024x700"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert amber_pixels(QImage(str(out)), right=0.45) > 500  # in the browser, on the left


def test_a_store_being_indexed_says_how_many_trials_search_cannot_find_yet(qtbot, tmp_path):
    """An older store opens at once; the hits panel says the search is partial while its
    trials are indexed, and stops saying it once they are."""
    from engine.store import Store
    from studio.models.search_hits import SearchHits
    from studio.views.search_hits import SearchHitsView
    from tests.engine.test_search import unindexed_store

    path, done, word = unindexed_store(tmp_path)
    with Store(path) as store:
        model = SearchHits(store)
        panel = SearchHitsView(model)
        qtbot.addWidget(panel)
        model.search(word)
        qtbot.waitUntil(lambda: not model.busy, timeout=5000)
        assert f"{done:,} trials not searchable yet (being indexed)" in panel.status.text()
        store.index_for_search()
        model.search("")
        model.search(word)
        qtbot.waitUntil(lambda: not model.busy and bool(model.hits), timeout=5000)
        assert "not searchable" not in panel.status.text()


def test_a_store_whose_index_cannot_be_written_says_why(qtbot, tmp_path, monkeypatch):
    """Not "being indexed" forever: once the index's step has failed, the panel says why."""
    from engine.store import Store
    from studio.models.search_hits import SearchHits
    from studio.views.search_hits import SearchHitsView
    from tests.engine.test_mcp import read_only_store
    from tests.engine.test_search import unindexed_store

    path, done, word = unindexed_store(tmp_path, trials=60)
    with Store(path):
        pass  # migrated: the index is there and empty
    store = read_only_store(path, monkeypatch)
    try:
        model = SearchHits(store)
        panel = SearchHitsView(model)
        qtbot.addWidget(panel)
        model.search(word)
        qtbot.waitUntil(lambda: store.index_error is not None, timeout=10000)
        model.search("")
        model.search(word)
        qtbot.waitUntil(lambda: not model.busy, timeout=5000)
        assert f"{done:,} trials not searchable: the store" in panel.status.text()
        assert "read-only" in panel.status.text()
    finally:
        store.close()
