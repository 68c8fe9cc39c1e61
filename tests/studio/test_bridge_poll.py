"""The bridge's poll of the store (events another process writes, as a `proctor run` on the
same store does) reads and parses them off the GUI thread: at 20,000 events a second a poll
parsed up to 10,000 events on the GUI thread, a stall of its own. They still arrive in order."""

from __future__ import annotations

import threading

from engine.events import PhaseProgress, PhaseStarted, TrialStarted
from engine.store import Store

EVENTS = 3_000


def other_process_events(batch_id: str, trial_id: str) -> list:
    ids = dict(batch_id=batch_id, trial_id=trial_id, case_id="greets", variant="scripted", trial=1)
    made = [TrialStarted(**ids, run_id="r_other", n=1), PhaseStarted(**ids, phase="turn", index=1, n=2)]
    made += [PhaseProgress(**ids, phase="turn", index=1, message=f"line {n}", n=n)
             for n in range(3, EVENTS + 1)]
    return made


def test_polled_events_arrive_in_order_and_are_read_off_the_gui_thread(qtbot, tmp_path):
    from studio.bridge import EngineBridge

    store = Store(tmp_path / "proctor.db")
    writer = Store(tmp_path / "proctor.db")  # another process's store on the same file
    bridge = EngineBridge(store)
    readers: list[str] = []
    for name in ("events", "last_event_seq"):
        original = getattr(store, name)

        def read(*args, _original=original, **kwargs):
            readers.append(threading.current_thread().name)
            return _original(*args, **kwargs)

        setattr(store, name, read)
    said: list = []
    bridge.events.connect(said.extend)
    try:
        written = other_process_events("b_other", "t_other")
        for event in written:
            writer.add_event(event)
        writer.flush()
        qtbot.waitUntil(lambda: len(said) >= len(written), timeout=15_000)
        assert [e.n for e in said] == [e.n for e in written], "every event once, in order"
        assert readers, "the poll read the store"
        assert threading.main_thread().name not in readers, "no store read on the GUI thread"
    finally:
        bridge.shutdown()
        writer.close()
        store.close()


def test_a_batch_started_while_a_poll_reads_comes_by_the_queue_only(qtbot, tmp_path):
    from studio.bridge import EngineBridge

    store = Store(tmp_path / "proctor.db")
    bridge = EngineBridge(store)
    said: list = []
    bridge.events.connect(said.extend)
    try:
        for event in other_process_events("b_ours", "t_ours")[:50]:
            store.add_event(event)  # as our engine writes them, while it also queues them
        store.flush()
        bridge._poll_store()  # a poll begins reading ...
        bridge._own.add("b_ours")  # ... as start_batch makes the batch ours
        qtbot.waitUntil(lambda: not bridge._polling, timeout=10_000)
        qtbot.wait(50)
        assert said == [], "our batch's events come once, by the queue, not again by the poll"
    finally:
        bridge.shutdown()
        store.close()


def test_a_poll_pages_past_our_own_events_and_loses_none_of_the_others(qtbot, tmp_path):
    """A poll reads POLL_PAGE events at a time, with our own batch's left out in SQL: pages
    that end on their events, or hold only theirs, neither lose nor repeat another's."""
    from studio.bridge import POLL_PAGE, EngineBridge

    store = Store(tmp_path / "proctor.db")
    writer = Store(tmp_path / "proctor.db")
    bridge = EngineBridge(store)
    bridge._own.add("b_ours")
    said: list = []
    bridge.events.connect(said.extend)
    try:
        theirs, ours = other_process_events("b_other", "t_other"), other_process_events("b_ours", "t_ours")
        # Runs of ours longer than a page between runs of theirs, then one event apart.
        plan = [ours[:POLL_PAGE * 2], theirs[:700], ours[POLL_PAGE * 2:POLL_PAGE * 3], theirs[700:]]
        for run in plan:
            for event in run:
                writer.add_event(event)
        for a, b in zip(ours[POLL_PAGE * 3:POLL_PAGE * 3 + 50], theirs[:50]):
            writer.add_event(a)
            writer.add_event(b.model_copy(update={"n": b.n + EVENTS}))
        writer.flush()
        expected = [e.n for e in theirs] + [n + EVENTS for n in range(1, 51)]
        qtbot.waitUntil(lambda: len(said) >= len(expected), timeout=15_000)
        qtbot.wait(600)  # one more poll: nothing again
        assert [e.n for e in said] == expected
        assert {e.batch_id for e in said} == {"b_other"}
    finally:
        bridge.shutdown()
        writer.close()
        store.close()
