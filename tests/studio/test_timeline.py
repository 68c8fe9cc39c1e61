"""The timeline over real recorded trials: one bar item per colour, a bar per span,
live growth from a trial's real events, hover text and clicks."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from engine.events import PhaseEnded, PhaseStarted
from engine.store import Store
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
