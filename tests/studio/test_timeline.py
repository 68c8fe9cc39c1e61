"""The timeline over real recorded trials: one bar item per colour, a bar per span,
live growth from a trial's real events, hover text and clicks."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt
from PySide6.QtGui import QFontMetrics, QPainter, QPicture, QWheelEvent
from PySide6.QtWidgets import QApplication

from engine.events import PhaseEnded, PhaseStarted
from engine.models import PhaseSpan
from engine.store import Store
from engine.store.browse import TrialSpans
from engine.text import fmt_ms
from studio.spans import LiveSpans, spans_from_record
from studio.theme import PHASE_GROUP, PHASE_ORDER
from studio.views.timeline import OUTLINE, TimelineView, batch_rows

import pyqtgraph as pg


@pytest.fixture
def timeline(qtbot):
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(1000, 400)
    view.show()
    qtbot.waitExposed(view)
    return view


def bars(item: pg.BarGraphItem) -> list[tuple[float, float, float]]:
    """(x0, width, y) of every bar an item draws."""
    o = item.opts
    return list(zip(np.atleast_1d(o["x0"]), np.atleast_1d(o["width"]), np.atleast_1d(o["y"])))


def plotted_bar_items(view: TimelineView) -> list[pg.BarGraphItem]:
    return [i for i in view.plot.getPlotItem().items if isinstance(i, pg.BarGraphItem)]


def test_one_bar_item_per_colour_and_a_bar_per_span(timeline, records):
    record = records["writes_greet"]
    timeline.show_record(record)
    groups = {PHASE_GROUP[p.phase] for p in record.phases}
    items = timeline.bar_items()
    assert set(items) == groups  # nothing failed here, so no outline item
    assert sorted(map(id, plotted_bar_items(timeline))) == sorted(map(id, items.values()))
    colours = [i.opts["brush"] for i in items.values()]
    assert len({str(c) for c in colours}) == len(colours)
    assert sum(len(bars(i)) for i in items.values()) == len(record.phases)
    order = [p for p in PHASE_ORDER if any(s.phase == p for s in record.phases)]
    assert timeline.row_labels == order

    turn_row = timeline.row_labels.index("turn")
    turn_bars = [b for b in bars(items["agent"]) if b[2] == turn_row]
    assert len(turn_bars) == 2
    assert [t.index for t in record.turns] == [1, 2]
    timeline.grab().save("/tmp/timeline.png")


def test_the_timed_out_turn_is_outlined(timeline, records):
    record = records["sleeps"]
    timeline.show_record(record)
    turn = next(p for p in record.phases if p.phase == "turn")
    assert turn.status == "aborted"
    outlined = bars(timeline.bar_items()[OUTLINE])
    row = timeline.row_labels.index("turn")
    assert outlined == [pytest.approx((turn.start_ms / 1000, (turn.end_ms - turn.start_ms) / 1000, row))]
    timeline.grab().save("/tmp/timeline-timeout.png")


def test_live_spans_from_real_events_grow_the_bars(timeline, recorded, records):
    store = Store(recorded.store_path)
    try:
        events = [e for _, e in store.events(trial_id=recorded.trials["writes_greet"])]
    finally:
        store.close()
    live = LiveSpans()
    counts, running_seen = [], False
    for event in events:
        if not live.apply(event):
            continue
        now = live.now_ms(event.at)
        timeline.show_spans(live.spans, now_ms=now)
        counts.append(sum(len(bars(i)) for i in timeline.bar_items().values()))
        if isinstance(event, PhaseStarted) and event.phase == "turn":
            running_seen = True
            span = timeline.span_at(now / 1000, timeline.row_labels.index("turn"))
            assert span is not None and "running" in timeline.describe(span)
    assert running_seen
    assert counts == sorted(counts) and counts[0] == 1
    assert counts[-1] == len(records["writes_greet"].phases)
    ended = sum(isinstance(e, PhaseEnded) for e in events)
    assert ended == len(records["writes_greet"].phases)


def test_hover_names_the_span_with_status_and_duration(timeline, records, qtbot):
    record = records["writes_greet"]
    timeline.show_record(record)
    turn2 = next(p for p in record.phases if p.phase == "turn" and p.index == 2)
    row = timeline.row_labels.index("turn")
    middle = (turn2.start_ms + turn2.end_ms) / 2000
    span = timeline.span_at(middle, row)
    assert span is not None
    duration = turn2.end_ms - turn2.start_ms
    assert timeline.describe(span).splitlines()[0] == f"turn 2 · ok · {duration}ms"
    assert timeline.span_at(middle, row + 0.45) is None  # between rows

    # A real mouse move over the bar's middle.
    scene = timeline.vb.mapViewToScene(pg.Point(middle, row))
    where = timeline.plot.mapFromScene(scene)
    qtbot.mouseMove(timeline.plot.viewport(), where)
    qtbot.waitUntil(lambda: timeline.hover_text.startswith("turn 2 · ok"), timeout=2000)


def test_click_emits_the_span(timeline, records, qtbot):
    record = records["writes_greet"]
    timeline.show_record(record)
    check = next(p for p in record.phases if p.phase == "check" and p.index == 1)
    row = timeline.row_labels.index("check")
    scene = timeline.vb.mapViewToScene(pg.Point((check.start_ms + check.end_ms) / 2000, row))
    where = timeline.plot.mapFromScene(scene)
    with qtbot.waitSignal(timeline.span_clicked, timeout=2000) as blocker:
        qtbot.mouseMove(timeline.plot.viewport(), where)
        qtbot.mouseClick(timeline.plot.viewport(), Qt.MouseButton.LeftButton, pos=where)
    assert blocker.args == ["check", 1]


def test_zoom_is_kept_while_live_unless_reset(timeline, records):
    spans = spans_from_record(records["writes_greet"])
    timeline.show_spans(spans[:5], now_ms=spans[4].end_ms)
    timeline.vb.setXRange(0.1, 0.2, padding=0)
    timeline.vb.sigRangeChangedManually.emit([True, False])  # what a wheel turn reports
    timeline.show_spans(spans, now_ms=spans[-1].end_ms)
    assert timeline.vb.viewRange()[0] == pytest.approx([0.1, 0.2])
    timeline.reset_zoom()
    assert timeline.vb.viewRange()[0][1] >= spans[-1].end_ms / 1000


def test_batch_mode_has_a_row_per_trial_in_the_same_colours(timeline, records):
    rows = batch_rows(list(records.values()))
    timeline.show_batch(rows)
    assert timeline.row_labels == [f"{r.case_id}#1 scripted" for r in records.values()]
    assert "outline" in timeline.bar_items()  # the failed setup and the aborted turn
    assert sum(len(bars(i)) for k, i in timeline.bar_items().items() if k != OUTLINE) == \
        sum(len(r.phases) for r in records.values())
    timeline.grab().save("/tmp/timeline-batch.png")


def test_the_batch_timeline_from_the_phases_alone_is_the_one_the_records_draw(recorded, records):
    from engine.store.browse import batch_spans

    store = Store(recorded.store_path)
    try:
        trials = batch_spans(store, recorded.batch_id)
    finally:
        store.close()
    assert [t.id for t in trials] == [r.id for r in records.values()]  # in run order
    assert batch_rows(trials) == batch_rows(list(records.values()))


def test_a_damaged_record_is_left_out_of_the_batch_timeline_with_its_sentence(tmp_path):
    import sqlite3

    from engine.models import PhaseSpan, TrialRecord
    from engine.store.browse import batch_spans

    path = tmp_path / "damaged.db"
    phases = [PhaseSpan(phase="image", status="ok", start_ms=0, end_ms=3),
              PhaseSpan(phase="setup", status="failed", start_ms=3, end_ms=9)]
    with Store(path) as store:
        store.create_batch("b_damaged01", "cli", "", "2026-11-29T17:40:47.120Z")
        for n, case in enumerate(["reads_fine", "bad_json", "bad_phase", "not_an_object"]):
            store.create_run(f"r_{n}", "b_damaged01", case, "scripted", n)
            store.save_trial(TrialRecord(id=f"t_{case}", batch_id="b_damaged01", run_id=f"r_{n}",
                                         case_id=case, variant="scripted", trial=1, trigger="cli",
                                         outcome="pass", started_at="2026-11-29T17:40:47.120Z",
                                         phases=phases))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE trial SET record = '{\"id\": broken' WHERE id = 't_bad_json'")
        conn.execute("UPDATE trial SET record = json_set(record, '$.phases[1].status', 'exploded') "
                     "WHERE id = 't_bad_phase'")
        conn.execute("UPDATE trial SET record = '[1, 2]' WHERE id = 't_not_an_object'")
    damaged: list[str] = []
    with Store(path) as store:
        trials = batch_spans(store, "b_damaged01", damaged)
    assert [t.id for t in trials] == ["t_reads_fine"] and trials[0].phases == phases
    assert [d.split(" is damaged")[0] for d in damaged] == \
        [f"the record of trial t_{case} in {path}" for case in ("bad_json", "bad_phase", "not_an_object")]
    assert "field phases.1.status" in damaged[1] and "not a JSON object" in damaged[2]


# --- batches of hundreds (issue 11, item 2) ------------------------------------------------

CASES = ["writes_greet", "refactors_the_configuration_loader_for_speed", "fixes_parser", "adds_numbers"]
VARIANTS = ["scripted", "claude-sonnet", "mini-4.1"]
SLOTS = 8  # trials running at once, so later trials wait for a slot first


def synthetic_batch(n: int, prefix: str = "t_") -> list[TrialSpans]:
    """`n` trials as `batch_spans` reads them: 8 at a time, each a slot wait (from the second
    wave on), preparation, two turns and a check; every seventh fails its check."""
    t0 = datetime(2026, 11, 29, 17, 40, tzinfo=timezone.utc)
    trials = []
    for i in range(n):
        wave = i // SLOTS
        wait = wave * 9_000 + (i % SLOTS) * 40
        phases = [PhaseSpan(phase="slot", status="ok", start_ms=0, end_ms=wait)] if wait else []
        at = wait
        for phase, index, length in (("image", None, 300), ("container", None, 900), ("setup", None, 1200),
                                     ("turn", 1, 2500 + 7 * (i % 13)), ("turn", 2, 1800), ("check", 1, 1100)):
            failed = phase == "check" and i % 7 == 3
            phases.append(PhaseSpan(phase=phase, index=index, status="failed" if failed else "ok",
                                    start_ms=at, end_ms=at + length))
            at += length
        case, variant = CASES[i % len(CASES)], VARIANTS[(i // len(CASES)) % len(VARIANTS)]
        trials.append(TrialSpans(f"{prefix}{i:05d}", case, variant, i // 12 + 1, "fail" if i % 7 == 3 else "pass",
                                 t0.isoformat().replace("+00:00", "Z"), phases))
    return trials


@pytest.fixture
def tab(qtbot):
    """A timeline the size of the window's Timeline tab at 1,024x700."""
    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(600, 520)
    view.show()
    qtbot.waitExposed(view)
    return view


def painted_labels(view: TimelineView) -> list[tuple[QRectF, str]]:
    """The row labels the y axis paints, with their rects, as pyqtgraph's axis makes them."""
    picture = QPicture()
    painter = QPainter(picture)
    try:
        _axis, _ticks, texts = view.axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(QRectF(rect), text) for rect, _flags, text in texts]


def visible_rows(view: TimelineView) -> tuple[float, float]:
    return tuple(view.vb.viewRange()[1])


def row_point(view: TimelineView, x_s: float, row: float) -> QPoint:
    return view.plot.mapFromScene(view.vb.mapViewToScene(pg.Point(x_s, row)))


def mid_x(view: TimelineView) -> float:
    left, right = view.vb.viewRange()[0]
    return (left + right) / 2


def wheel(view: TimelineView, where: QPoint, notches: int, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    """A real wheel turn over the plot (negative: towards the user, down the list)."""
    viewport = view.plot.viewport()
    event = QWheelEvent(QPointF(where), QPointF(viewport.mapToGlobal(where)), QPoint(0, 0),
                        QPoint(0, 120 * notches), Qt.MouseButton.NoButton, modifiers,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(viewport, event)


@pytest.mark.parametrize("n", [201, 1000])
def test_a_big_batch_paints_row_labels_that_never_overlap_and_fit_their_row(tab, n):
    tab.show_batch(batch_rows(synthetic_batch(n)))
    fm = QFontMetrics(tab.axis.font())
    for width in (567, 820, 600):  # the label column follows the width; elided text must fit each
        tab.resize(width, 520)
        tab.grab()
        labels = painted_labels(tab)
        assert len(labels) >= 15, "rows at a readable height show a screenful of labels"
        for i, (rect, text) in enumerate(labels):
            for other, other_text in labels[i + 1:]:
                assert not rect.intersects(other), f"{text!r} overlaps {other_text!r}"
        for rect, text in labels:
            assert rect.height() >= fm.height(), f"{text!r} is squeezed into {rect.height()} px"
            assert fm.horizontalAdvance(text) <= rect.width(), f"{text!r} is cut at {width} px"
    rows = tab.row_labels
    shown = [text for _, text in labels]
    assert shown[0] == rows[0]  # the top of the batch, the short names whole
    assert rows[1].startswith("refactors_the_configuration") and shown[1] != rows[1]
    assert re.fullmatch(r"\w+…\w+#1 scripted", shown[1])  # the long case elided, "#n variant" kept


@pytest.mark.parametrize("n", [201, 1000])
def test_a_big_batch_scrolls_vertically_at_a_readable_row_height(tab, n, qtbot):
    tab.show_batch(batch_rows(synthetic_batch(n)))
    top, bottom = visible_rows(tab)
    fm = QFontMetrics(tab.axis.font())
    assert tab.vb.height() / (bottom - top) >= fm.height() + 2, "rows are readable"
    assert top == pytest.approx(-0.5)

    wheel(tab, row_point(tab, mid_x(tab), (top + bottom) / 2), -3)  # the wheel scrolls the rows
    moved = visible_rows(tab)
    assert moved[0] > top + 2 and moved[1] - moved[0] == pytest.approx(bottom - top)
    assert tab.scrollbar.value() > 0 and tab.scrollbar.isVisible()

    tab.scrollbar.setValue(tab.scrollbar.maximum())  # the scroll bar reaches the last trial
    last = visible_rows(tab)
    assert last[1] == pytest.approx(n - 0.5)
    assert painted_labels(tab)[-1][1] == tab.row_labels[-1]

    x_before = tab.vb.viewRange()[0]
    ctrl = Qt.KeyboardModifier.ControlModifier
    wheel(tab, row_point(tab, mid_x(tab), last[0] + 3), 2, ctrl)  # Ctrl+wheel zooms time instead
    assert visible_rows(tab) == pytest.approx(last)
    assert tab.vb.viewRange()[0][1] - tab.vb.viewRange()[0][0] < x_before[1] - x_before[0]


def test_hover_over_a_batch_row_names_its_trial_outcome_and_duration(tab, qtbot):
    trials = synthetic_batch(1000)
    tab.show_batch(batch_rows(trials))
    tab.scrollbar.setValue(500)
    row = 507  # a failed trial, its row in the middle of the scrolled view
    trial = trials[row]
    assert trial.outcome == "fail"
    work = [p for p in trial.phases if p.phase != "slot"]
    turn = next(p for p in work if p.phase == "turn")
    shift = batch_rows(trials)[row].spans[0].start_ms - trial.phases[0].start_ms
    x = (turn.start_ms + turn.end_ms) / 2000 + shift / 1000
    tab.vb.setXRange(x - 10, x + 10, padding=0)  # zoomed in on its work: a pixel is ~60 ms
    qtbot.mouseMove(tab.plot.viewport(), row_point(tab, x, row))
    duration = fmt_ms(work[-1].end_ms - work[0].start_ms)
    expected = [f"{trial.case_id} #{trial.trial} · {trial.variant}", f"✗ fail · {duration}",
                "turn 1 · ok"]
    qtbot.waitUntil(lambda: tab.hover_text.splitlines()[:2] == expected[:2], timeout=2000)
    assert tab.hover_text.splitlines()[2].startswith(expected[2])


def test_click_on_a_batch_row_emits_its_trial(tab, qtbot):
    trials = synthetic_batch(201)
    tab.show_batch(batch_rows(trials))
    tab.scrollbar.setValue(150)
    where = row_point(tab, mid_x(tab), 160)
    with qtbot.waitSignal(tab.trial_clicked, timeout=2000) as blocker:
        qtbot.mouseMove(tab.plot.viewport(), where)
        qtbot.mouseClick(tab.plot.viewport(), Qt.MouseButton.LeftButton, pos=where)
    assert blocker.args == [trials[160].id]
    label = QPoint(tab.plot.mapFromScene(tab.axis.sceneBoundingRect().center()).x(), where.y() + 20)
    with qtbot.waitSignal(tab.trial_clicked, timeout=2000) as blocker:  # its label, the row below
        qtbot.mouseMove(tab.plot.viewport(), label)
        qtbot.mouseClick(tab.plot.viewport(), Qt.MouseButton.LeftButton, pos=label)
    assert blocker.args == [trials[161].id]


def test_all_rows_of_a_big_batch_are_a_density_overview_that_a_click_zooms_into(tab, qtbot):
    trials = synthetic_batch(1000)
    tab.show_batch(batch_rows(trials))
    qtbot.mouseClick(tab.all_rows, Qt.MouseButton.LeftButton)  # zoomed out: the whole batch
    assert visible_rows(tab) == pytest.approx((-0.5, 999.5))
    numbers = painted_labels(tab)  # no name fits a row under a pixel high: row numbers instead
    values = [int(text.replace(",", "")) for _, text in numbers]
    assert values[0] in (20, 50, 100) and values == list(range(values[0], 1001, values[0]))
    for i, (rect, _) in enumerate(numbers[1:]):
        assert not rect.intersects(numbers[i][0])
    assert tab.density.isVisible() and not tab.bar_items()  # a picture, not 10,000 slivers
    image = tab.density.image
    assert image.shape[0] == min(1000, int(tab.vb.height()))  # a pixel row holds a trial or two
    # the first trials work at once, the last wait for a slot (drawn faint) until the end
    early = image[:, : image.shape[1] // 10, 3]
    assert early[0].max() == 255 and 0 < early[-1].max() < 100
    tab.grab()

    where = row_point(tab, mid_x(tab), 700)
    row = round(tab.vb.mapSceneToView(tab.plot.mapToScene(where)).y())  # a pixel holds two rows
    assert abs(row - 700) <= 2
    qtbot.mouseMove(tab.plot.viewport(), where)
    qtbot.waitUntil(lambda: tab.hover_text.startswith(f"{trials[row].case_id} #{trials[row].trial} · "),
                    timeout=2000)
    qtbot.mouseClick(tab.plot.viewport(), Qt.MouseButton.LeftButton, pos=where)  # back to readable rows
    top, bottom = visible_rows(tab)
    assert top < row < bottom and bottom - top < 60
    assert not tab.all_rows.isChecked() and not tab.density.isVisible() and tab.bar_items()


def test_a_small_batch_and_a_trial_still_fill_the_view_without_a_scroll_bar(tab, records):
    tab.show_batch(batch_rows(list(records.values())))
    assert visible_rows(tab) == pytest.approx((-0.5, len(records) - 0.5))
    assert not tab.scrollbar.isVisible() and not tab.all_rows.isVisible()
    tab.show_record(records["writes_greet"])
    assert visible_rows(tab) == pytest.approx((-0.5, len(tab.row_labels) - 0.5))
    assert [text for _, text in painted_labels(tab)] == tab.row_labels


def test_a_click_in_the_windows_batch_timeline_opens_the_trial(recorded, records, make_window, qtbot):
    window = make_window(recorded.store_path)
    assert window.browser.select_id(recorded.batch_id)
    window.tabs.setCurrentWidget(window.timeline)
    qtbot.waitUntil(lambda: len(window.timeline.row_labels) == len(records))
    record = list(records.values())[1]
    window.timeline.trial_clicked.emit(record.id)
    assert window.browser.current_trial() == record.id
    phases = [p for p in PHASE_ORDER if any(s.phase == p for s in record.phases)]
    qtbot.waitUntil(lambda: window.timeline.row_labels == phases)  # the trial's phases as rows


def test_the_same_batch_again_keeps_its_place_and_another_starts_at_the_top(tab, records):
    rows = batch_rows(synthetic_batch(201))
    tab.show_batch(rows)
    tab.scrollbar.setValue(120)
    tab.show_record(records["writes_greet"])  # a trial opened from it, then the batch again
    tab.show_batch(batch_rows(synthetic_batch(201)))
    assert visible_rows(tab)[0] == pytest.approx(119.5)
    tab.show_batch(batch_rows(synthetic_batch(230)))  # the batch grew while it ran
    assert visible_rows(tab)[0] == pytest.approx(119.5)
    tab.show_batch(batch_rows(synthetic_batch(150, prefix="t_other")))  # another batch
    assert visible_rows(tab)[0] == pytest.approx(-0.5)


def test_the_wait_for_a_slot_is_its_own_span_collapsed_until_clicked(timeline, records, qtbot):
    """Item 5 of issue 11: a trial that waited 5.4 s for a slot before its own 3 s of work.
    The wait is a stub left of 0 whose row says how long it was, so the work keeps the width;
    a click on it draws it to scale, and another short again."""
    record = records["writes_greet"]
    phases = [PhaseSpan(phase="slot", start_ms=-5_400, end_ms=0, status="ok",
                        detail="waited for a free slot")] + list(record.phases)
    timeline.show_record(record.model_copy(update=dict(phases=phases)))
    assert timeline.row_labels[0] == "slot 5.4s ▸"
    work_end = max(p.end_ms for p in record.phases)
    x0, x1 = timeline.vb.viewRange()[0]
    assert x0 > -0.1 * work_end / 1000 and x1 >= work_end / 1000, "the work has the width"
    stub = timeline.span_at(-0.01 * work_end / 1000, 0)
    assert stub is not None and stub.phase == "slot"
    assert timeline.describe(stub).startswith("waited 5.4s for a free slot")

    timeline.toggle_wait()
    assert timeline.row_labels[0] == "slot"
    x0, _ = timeline.vb.viewRange()[0]
    assert x0 <= -5.4, "the whole wait in view, to scale"
    assert timeline.span_at(-3.0, 0).phase == "slot"
    timeline.toggle_wait()
    assert timeline.row_labels[0] == "slot 5.4s ▸"


def test_a_click_on_the_collapsed_wait_expands_it(timeline, records, qtbot):
    record = records["writes_greet"]
    phases = [PhaseSpan(phase="slot", start_ms=-5_400, end_ms=0, status="ok")] + list(record.phases)
    timeline.show_record(record.model_copy(update=dict(phases=phases)))
    clicked = []
    timeline.span_clicked.connect(lambda *a: clicked.append(a))
    work_end = max(p.end_ms for p in record.phases)
    point = timeline.vb.mapViewToScene(QPointF(-0.015 * work_end / 1000, 0))
    qtbot.mouseClick(timeline.plot.viewport(), Qt.MouseButton.LeftButton,
                     pos=timeline.plot.mapFromScene(point))
    assert timeline.wait_expanded and clicked == [], "a click on the wait opens no items"
