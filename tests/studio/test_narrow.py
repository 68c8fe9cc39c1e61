"""Any laptop screen: the window at 1,024 x 700 and at half of a 1,280-px screen (640 px),
every tab's controls whole and reachable, the splitter where it was left, and `--size`
giving the size it asks for or one sentence that says why not."""

from __future__ import annotations

import argparse

import pytest
from PySide6.QtCore import QPoint, QRect, QSettings, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import (
    QAbstractButton, QAbstractScrollArea, QComboBox, QLabel, QLineEdit, QTabBar, QToolBar, QWidget,
)

from engine.store import Store
from studio.app import TABS, MainWindow, run
from studio.cli import add_arguments
from studio.pages.compare import ComparePage
from studio.views.browser import BrowserPanel
from studio.views.trajectory import TrajectoryView

HALF_LAPTOP = 640  # half of a 1,280-px laptop screen
CONTROLS = (QAbstractButton, QComboBox, QLineEdit, QLabel)


def _inside_scroll_area(widget: QWidget, top: QWidget) -> bool:
    """Whether the widget sits in a scroll area's viewport: it is reached by scrolling."""
    parent = widget.parentWidget()
    while parent is not None and parent is not top:
        grand = parent.parentWidget()
        if isinstance(grand, QAbstractScrollArea) and parent is grand.viewport():
            return True
        parent = grand
    return False


def cut_off(top: QWidget) -> list[str]:
    """The visible controls under `top` that a user cannot see whole: squeezed below their
    minimum, or lying partly outside the widgets that hold them."""
    found = []
    for widget in top.findChildren(QWidget):
        if not isinstance(widget, CONTROLS) or not widget.isVisibleTo(top) or widget.width() <= 0:
            continue
        if _inside_scroll_area(widget, top) or isinstance(widget.parentWidget(), QTabBar):
            continue  # reached by scrolling, or by the tab bar's own scroll buttons
        name = f"{type(widget).__name__} {widget.objectName() or widget.toolTip() or ''!r}" \
               f" {getattr(widget, 'text', lambda: '')()!r}"
        # An explicit minimum (a label that elides, a field that may shrink) is the real one.
        least = widget.minimumWidth() or widget.minimumSizeHint().width()
        if widget.width() < least:
            found.append(f"{name}: {widget.width()} px wide, needs {least}")
            continue
        seen = QRect(widget.mapTo(top, QPoint(0, 0)), widget.size())
        holder = widget.parentWidget()
        while holder is not None:
            seen = seen.intersected(QRect(holder.mapTo(top, QPoint(0, 0)), holder.size())
                                    if holder is not top else top.rect())
            if holder is top:
                break
            holder = holder.parentWidget()
        if seen.width() < widget.width() - 1 or seen.height() < widget.height() - 1:
            found.append(f"{name}: {seen.width()}x{seen.height()} of {widget.width()}x{widget.height()} shown")
    return found


def settled(qtbot, top: QWidget, name: str) -> None:
    """Nothing cut off once the layouts have settled (they settle over a few event-loop turns)."""
    try:
        qtbot.waitUntil(lambda: cut_off(top) == [], timeout=1000)
    except qtbot.TimeoutError:
        assert cut_off(top) == [], name


def show_each_tab(qtbot, window: MainWindow):
    """Each tab in turn, filled with the trial that has items of every kind."""
    for n, tab in enumerate(TABS):
        window._show_tab(n)
        qtbot.wait(20)
        yield tab.name


@pytest.fixture
def greet_window(window, recorded, qtbot):
    assert window.browser.select_id(recorded.trials["writes_greet"])
    qtbot.waitUntil(lambda: window.header.isVisible())
    return window


def test_the_window_fits_half_a_laptop_screen_on_every_tab(qtbot, greet_window):
    window = greet_window
    # Was 888 px here (the browser's filters 466, the trajectory's toolbar 386-402), 953 once
    # the Diff tab had been shown, and 1,339 px under the fonts of the X server.
    for name in show_each_tab(qtbot, window):
        assert window.minimumSizeHint().width() <= HALF_LAPTOP, name
    assert window.browser.minimumSizeHint().width() <= 260
    assert window.trajectory.minimumSizeHint().width() <= 360


@pytest.mark.parametrize("width", [HALF_LAPTOP, 1024])
def test_every_tab_at_640_and_1024_wide_shows_its_controls_whole(qtbot, greet_window, recorded, width):
    window = greet_window
    window.resize(width, 700)
    for name in show_each_tab(qtbot, window):
        assert window.width() == width, name
        settled(qtbot, window, name)
    # The batch: its header and Overview, at that width too.
    assert window.browser.select_id(recorded.batch_id)
    window._show_tab(0)
    assert window.width() == width
    settled(qtbot, window, "the batch's overview")


def test_the_main_toolbar_folds_what_does_not_fit_into_its_extension_menu(qtbot, greet_window):
    window = greet_window
    window.resize(HALF_LAPTOP, 700)
    qtbot.wait(20)
    [bar] = window.findChildren(QToolBar)
    assert bar.width() <= HALF_LAPTOP
    for action in bar.actions():  # each one a button shown whole, or in the extension menu
        button = bar.widgetForAction(action)
        assert button is not None and (not button.isVisible() or
                                       button.geometry().right() <= bar.width()), action.text()


def test_the_browser_filters_wrap_onto_more_rows_when_narrow(qtbot, recorded):
    store = Store(recorded.store_path)
    panel = BrowserPanel(store, poll_ms=0, tick_ms=0)
    qtbot.addWidget(panel)
    try:
        combos = [panel.outcome, panel.failure_kind, panel.case, panel.variant, panel.tag]
        panel.resize(1000, 500)
        panel.show()
        qtbot.wait(20)
        assert len({c.y() for c in combos}) == 1, "one row when there is room"
        panel.resize(panel.minimumSizeHint().width(), 500)
        qtbot.wait(20)
        assert len({c.y() for c in combos}) > 1, "more rows when narrow"
        assert cut_off(panel) == []
        assert panel.tree.y() > max(c.geometry().bottom() for c in combos), "the tree below them all"
        panel.outcome.setCurrentIndex(panel.outcome.findData("fail"))  # still works as a filter
        assert panel.model.filter.outcomes == {"fail"}
    finally:
        panel.close()
        store.close()


def test_the_trajectory_toolbar_shows_labels_only_where_they_fit(qtbot, records):
    view = TrajectoryView()
    qtbot.addWidget(view)
    view.show_record(records["writes_greet"])
    view.resize(1000, 500)
    view.show()
    qtbot.wait(20)
    styles = {chip.toolButtonStyle() for chip in view.chips.values()}
    assert styles == {Qt.ToolButtonStyle.ToolButtonTextBesideIcon}
    assert cut_off(view) == []
    view.resize(view.minimumSizeHint().width(), 500)
    qtbot.wait(20)
    assert {chip.toolButtonStyle() for chip in view.chips.values()} == {Qt.ToolButtonStyle.ToolButtonIconOnly}
    assert cut_off(view) == [], "search and its arrows stay whole"
    # The labels come back at the width they need with the counts shown now, and fit there.
    labelled = next(w for w in range(view.width(), 1000) if (view.resize(w, 500), qtbot.wait(5),
                    view.chips["message"].toolButtonStyle() == Qt.ToolButtonStyle.ToolButtonTextBesideIcon)[2])
    assert cut_off(view) == [], f"labels shown at {labelled} px"
    assert labelled < 1000


def _sizes_close(a: list[int], b: list[int]) -> bool:
    return all(abs(x - y) <= 2 for x, y in zip(a, b, strict=True))


def test_the_splitter_is_where_it_was_left_after_a_restart_and_after_compare(qtbot, recorded, tmp_path,
                                                                             monkeypatch):
    """The offscreen screen is 800 px wide: the window stays inside it, as restoreGeometry keeps it."""
    # Two trials whose sides need more room than the right pane has (wide commands, big fonts).
    monkeypatch.setattr(ComparePage, "needed_width", lambda page: 640)
    ini = str(tmp_path / "splitter.ini")

    def open_window() -> MainWindow:
        window = MainWindow(Store(recorded.store_path), QSettings(ini, QSettings.Format.IniFormat),
                            watch_docker=False)
        qtbot.addWidget(window)
        window.show()
        qtbot.waitExposed(window)
        return window

    def close(window: MainWindow) -> list[int]:
        sizes = window.splitter.sizes()
        window.close()
        window.store.close()
        return sizes

    window = open_window()
    window.resize(760, 640)
    qtbot.wait(20)
    window.splitter.setSizes([300, 455])
    left = window.splitter.sizes()
    assert left[0] == 300
    close(window)

    window = open_window()
    assert window.width() == 760 and _sizes_close(window.splitter.sizes(), left)
    # Compare takes room from the browser, and closing while it shows keeps the user's place.
    trials = list(recorded.trials.values())
    assert window.open_compare(trials[0], trials[1]) is None
    qtbot.wait(20)
    widened = window.splitter.sizes()
    close(window)
    assert widened[0] < left[0], "compare widened its side (else this test proves nothing)"

    window = open_window()
    assert _sizes_close(window.splitter.sizes(), left)
    close(window)


def _studio_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("size", ["1024x700", "640x700"])
def test_size_gives_a_screenshot_of_that_size(qtbot, recorded, tmp_path, size):
    out = tmp_path / f"{size}.png"
    args = _studio_args("--store", str(recorded.store_path), "--open", recorded.trials["writes_greet"],
                        "--view", "trajectory", "--screenshot", str(out), "--size", size)
    assert run(args) == 0
    image = QImage(str(out))
    assert f"{image.width()}x{image.height()}" == size


def test_a_size_the_window_cannot_take_is_one_sentence_and_exit_2(qtbot, recorded, tmp_path, capsys):
    out = tmp_path / "tiny.png"
    args = _studio_args("--store", str(recorded.store_path), "--screenshot", str(out), "--size", "200x150")
    assert run(args) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and error.startswith("proctor: ") and "200x150" in error
    assert "at least" in error and not out.exists()
    with pytest.raises(SystemExit) as exited:
        _studio_args("--size", "big")
    assert exited.value.code == 2
    assert "--size takes WxH" in capsys.readouterr().err


@pytest.mark.parametrize("width", [HALF_LAPTOP, 1024])
def test_the_trial_overview_cards_fit_the_width_they_scroll_in(qtbot, make_window, recorded, width):
    """The Overview scrolls down only: a card wider than its viewport was cut off for good (the
    Trial card at 1,024 px, beside the Outcome). Narrow, the cards stack."""
    window = make_window(recorded.store_path)
    window.resize(width, 700)
    qtbot.waitExposed(window)
    for case in ("needs_a_lockfile", "writes_greet"):
        assert window.browser.select_id(recorded.trials[case])
        window._show_tab(0)
        scroll = window.overview.scroll
        qtbot.waitUntil(lambda: scroll.widget().width() <= scroll.viewport().width(), timeout=3000)
        for card in scroll.widget().findChildren(QWidget):
            if card.isVisibleTo(scroll.widget()):
                right = card.mapTo(scroll.widget(), QPoint(card.width(), 0)).x()
                assert right <= scroll.viewport().width(), (case, width, type(card).__name__)
