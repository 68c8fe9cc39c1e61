"""The studio's bridge over real Docker batches: its queue carries engine events only,
and the end of a batch (its error too) reaches the window as `batch_finished`."""

from __future__ import annotations

import queue
from typing import get_args

import pytest

from engine.events import BatchFinished, Event, TrialFinished
from tests.engine.test_batch_handle import AGENT, FINISHES, UNREACHABLE_HOST, plan_of

EVENT_TYPES = get_args(get_args(Event)[0])  # the classes of the one union


class WatchedQueue(queue.SimpleQueue):
    """The bridge's own kind of queue, keeping everything ever put in it."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def put(self, item, block=True, timeout=None):
        self.seen.append(item)
        super().put(item, block, timeout)


@pytest.fixture
def bridge(qtbot, store):
    from studio.bridge import EngineBridge

    made = EngineBridge(store, poll_store=False)
    made._queue = WatchedQueue()
    yield made
    made.shutdown()


def test_the_queue_carries_events_only_and_the_end_comes_after_them(docker_client, bridge, suite,
                                                                    monkeypatch):
    monkeypatch.setattr("studio.bridge.MAX_PER_DRAIN", 3)  # the batch's events take many ticks
    bridge._drain.stop()  # ticked by hand below, once the batch has ended with its events queued
    said: list = []
    bridge.events.connect(said.extend)
    bridge.batch_finished.connect(lambda *args: said.append(args))
    batch_id = bridge.start_batch(plan_of(suite(AGENT.format(trials=1, agent=FINISHES))))
    assert bridge._running[batch_id].wait(60) is not None
    while bridge.is_running(batch_id):
        bridge._drain_queue()
    assert [item for item in bridge._queue.seen if not isinstance(item, EVENT_TYPES)] == []
    assert len(bridge._queue.seen) > 3 and isinstance(said[-2], BatchFinished)
    assert said == [*bridge._queue.seen, (batch_id, "")], "every event, in order, then the end"


def test_a_batch_that_fails_ends_with_its_error(docker_client, bridge, qtbot, suite):
    path = suite(AGENT.format(trials=1, agent=FINISHES), toml=UNREACHABLE_HOST)
    with qtbot.waitSignal(bridge.batch_finished, timeout=60_000) as finished:
        batch_id = bridge.start_batch(plan_of(path))
    assert finished.args[0] == batch_id
    assert "DockerUnavailable" in finished.args[1] and "tcp://127.0.0.1:1" in finished.args[1]
    assert [item for item in bridge._queue.seen if not isinstance(item, EVENT_TYPES)] == []


class ExitingQueue(WatchedQueue):
    """A sink that ends its batch's thread with SystemExit (as a plugin's `sys.exit` would)."""

    def put(self, item, block=True, timeout=None):
        if isinstance(item, TrialFinished):
            raise SystemExit(3)
        super().put(item, block, timeout)


def test_closing_after_a_batch_thread_exited_raises_nothing(docker_client, bridge, suite):
    bridge._queue = ExitingQueue()
    bridge._drain.stop()  # the ended batch stays in `_running` for shutdown to wait on
    batch_id = bridge.start_batch(plan_of(suite(AGENT.format(trials=1, agent=FINISHES))))
    handle = bridge._running[batch_id]
    with pytest.raises(SystemExit):
        handle.wait(60)
    bridge.shutdown()  # as the window's closeEvent does: the batch's own error stays there


def test_an_interrupt_of_the_closing_window_itself_still_raises(docker_client, bridge, suite):
    """Only the batch's own error is swallowed: a Ctrl-C of the GUI thread during the wait is not."""
    batch_id = bridge.start_batch(plan_of(suite(AGENT.format(trials=1, agent="sleep 30"))))
    handle = bridge._running[batch_id]
    real_wait = handle.wait

    def interrupted(timeout=None):
        raise KeyboardInterrupt

    handle.wait = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            bridge.shutdown()
    finally:
        handle.wait = real_wait
