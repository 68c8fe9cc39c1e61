"""A big stored trial in the window's Trajectory tab: it opens without reading its items, the
counts are whole at once, and items deep in the trial show when the list is scrolled to them."""

from __future__ import annotations

import pytest

from engine.models import TrajectoryItem, TrialRecord, TurnRecord
from engine.store import ItemRun, Store
from studio.models.trajectory import (HEADER, PAGE, UNREADABLE, RowList, StoredItems, TextRole,
                                      TrajectoryModel)

ITEMS = 100_000
TURNS = 10


def item(n: int) -> TrajectoryItem:
    turn = n * TURNS // ITEMS + 1
    if n % 2:
        return TrajectoryItem(kind="command", turn=turn, command=f"pytest -q t{n}.py", exit_code=0,
                              output=f"line {n}\nok")
    return TrajectoryItem(kind="message", turn=turn, role="assistant", text=f"step {n}")


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("lazy-studio") / "proctor.db"
    record = TrialRecord(
        id="t_big", batch_id="b_1", run_id="r_1", case_id="c", variant="v", trial=1, trigger="cli",
        outcome="pass", started_at="2026-11-29T17:40:47.120Z", finished_at="2026-11-29T17:41:47.120Z",
        turns=[TurnRecord(index=t, prompt=f"turn {t}", status="completed", ms=10) for t in range(1, TURNS + 1)],
        trajectory=[item(n) for n in range(ITEMS)], command_count=ITEMS // 2)
    with Store(path) as store:
        store.create_batch("b_1", "cli", "", record.started_at)
        store.finish_batch("b_1", "finished", record.finished_at)
        store.create_run("r_1", "b_1", "c", "v", 0)
        store.save_trial(record).result()
    return path


@pytest.mark.slow
def test_a_big_trial_opens_without_its_items_and_shows_deep_ones_when_scrolled_to(make_window, big_store, qtbot):
    window = make_window(big_store)
    window.resize(1400, 860)
    window.show_view("trajectory")
    window.open_trial("t_big")
    view = window.trajectory
    assert view.model.rows.made() == TURNS, "the turn headers only: items are read as they are shown"
    assert view.proxy.rowCount() == ITEMS + TURNS
    assert view.chips["command"].text() == f"commands {ITEMS // 2}"  # whole before any item is read

    deep = 90_001  # item 90,001 is the 1st after turn 10's header: row 90,001 + 10
    index = view.proxy.index(deep + TURNS, 0)
    view.list.scrollTo(index)

    def shown() -> bool:  # the list lays rows out in batches from the event loop
        view.list.scrollTo(index)
        return view.list.viewport().rect().intersects(view.list.visualRect(index))

    qtbot.waitUntil(shown, timeout=60_000)
    assert index.data(TextRole) == f"pytest -q t{deep}.py\nline {deep}\nok"
    assert view.model.rows[1].text == "step 0"

    view.chips["message"].click()  # the kind filter needs no item read
    assert view.proxy.rowCount() == ITEMS // 2 + TURNS


def test_stored_rows_are_made_a_page_at_a_time_in_turn_order():
    # Positions alternate turns, as Store.trajectory_layout gives them: runs of one, in turn order.
    layout = sorted((ItemRun(t, p, ["message"]) for p, t in enumerate([2, 1] * 600)), key=lambda r: r.turn)
    reads: list[tuple[int, int]] = []

    def read(start: int, stop: int) -> list[TrajectoryItem]:
        reads.append((start, stop))
        return [TrajectoryItem(kind="message", turn=2 - p % 2, text=str(p)) for p in range(start, stop)]

    model = TrajectoryModel()
    model.set_record(TrialRecord(id="t", batch_id="b", run_id="r", case_id="c", variant="v", trial=1,
                                 trigger="cli"), StoredItems(layout, read))
    assert isinstance(model.rows, RowList) and model.rows.made() == 2
    assert [model.rows.kind(r) for r in (0, 1, 601, 602)] == [HEADER, "message", HEADER, "message"]
    assert model.rows[1].text == "1"  # turn 1's first item is at position 1
    assert reads == [(0, PAGE)]
    assert model.rows[602].text == "0" and reads == [(0, PAGE)]  # the same page
    assert model.rows[-1].text == "1198" and reads[-1] == (1000, 1200)
    assert model.search("1199") == [601 - 1]


def test_items_the_store_cannot_give_say_so():
    model = TrajectoryModel()
    model.set_record(TrialRecord(id="t", batch_id="b", run_id="r", case_id="c", variant="v", trial=1,
                                 trigger="cli"), StoredItems([ItemRun(1, 0, ["command"] * 3)], lambda a, b: []))
    assert [model.rows[r].body for r in (1, 2, 3)] == [UNREADABLE] * 3
    assert model.rows[1].kind == "command" and model.rows.made() == 4
