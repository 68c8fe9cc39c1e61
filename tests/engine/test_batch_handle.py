"""`Engine.start_batch` hands back a BatchHandle over a real Docker batch: `wait` gives the
summary or re-raises the batch's error, listeners hear its events, and `cancel` and
`cancel_trial` stop running trials as infra_error."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from engine.events import BatchFinished, BatchStarted, PhaseStarted, TrialFinished
from engine.sandbox.client import DockerUnavailable
from tests.conftest import DEFAULT_TOML

AGENT = """from engine import evaluation

@evaluation(trials={trials}, files={{".agent/run.sh": {agent!r}}})
def waits(c):
    c.send("go")
"""
FINISHES = "echo '{\"type\":\"finished\",\"reason\":\"done\"}'"
ONE_AT_A_TIME = DEFAULT_TOML.replace("concurrency = 2", "concurrency = 1")
UNREACHABLE_HOST = DEFAULT_TOML + '\n[[hosts]]\nurl = "tcp://127.0.0.1:1"\n'  # refused on loopback


def plan_of(path, **kw):
    """The batch of one eval file, every variant of its proctor.toml."""
    from engine.batch import BatchPlan
    from engine.config import find_config, load_config
    from engine.spec import load_cases

    config = load_config(find_config(path))
    return BatchPlan(cases=load_cases([path]), variants=config.variants, config=config,
                     trigger="api", **kw)


@pytest.fixture
def start(docker_client, store):
    """`start(path, sink, **plan)`: the eval file's batch started on a fresh engine, as its handle."""
    from engine.batch import Engine

    handles = []

    def run(path, sink=None, **kw):
        handle = Engine(store, docker_client).start_batch(plan_of(path, **kw), sink)
        handles.append(handle)
        return handle

    yield run
    for handle in handles:  # a failed assertion must not leave a sleeping agent behind
        handle.cancel("the test ended")
        try:
            handle.wait(30)
        except Exception:
            pass  # the test already asserted on it


def test_wait_gives_the_summary_and_listeners_hear_every_event(suite, start):
    sink: list = []
    handle = start(suite(AGENT.format(trials=1, agent="sleep 0.5; " + FINISHES)), sink.append)
    assert handle.wait(timeout=0.05) is None and not handle.done, "still running, and not cancelled"
    heard: list = []
    handle.listen(heard.append)
    summary = handle.wait(timeout=60)
    assert summary is not None and summary.batch_id == handle.batch_id and summary.status == "finished"
    assert [t.outcome for t in summary.runs[0].trials] == ["pass"]
    assert handle.done and handle.error is None and handle.wait() == summary
    assert isinstance(sink[0], BatchStarted) and isinstance(sink[-1], BatchFinished)
    assert any(isinstance(e, TrialFinished) for e in heard) and heard[-1] == sink[-1]


def test_wait_re_raises_the_error_that_ended_the_batch(suite, start, store):
    handle = start(suite(AGENT.format(trials=2, agent=FINISHES), toml=UNREACHABLE_HOST))
    with pytest.raises(DockerUnavailable, match=r"tcp://127\.0\.0\.1:1"):
        handle.wait(timeout=60)
    assert handle.done and isinstance(handle.error, DockerUnavailable)
    with pytest.raises(DockerUnavailable):
        handle.wait()  # every waiter hears it, not only the first
    summary = store.batch_summary(handle.batch_id)
    assert summary.status == "failed"
    assert [t.outcome for t in summary.runs[0].trials] == ["infra_error", "infra_error"]


def test_cancel_ends_running_trials_as_infra_error(suite, start):
    both_in_turn = threading.Event()
    in_turn: set[str] = set()

    def sink(event):
        if isinstance(event, PhaseStarted) and event.phase == "turn":
            in_turn.add(event.trial_id)
            if len(in_turn) == 2:
                both_in_turn.set()

    finished: list[TrialFinished] = []
    handle = start(suite(AGENT.format(trials=2, agent="sleep 60")), sink, concurrency=2)
    handle.listen(lambda e: finished.append(e) if isinstance(e, TrialFinished) else None)
    assert both_in_turn.wait(60), "both agents reached their turn"
    first, second = (p.trial_id for p in handle.plans)
    assert handle.cancel_trial(first, "cancelled by the test")
    assert not handle.cancel_trial("t_unknown", "cancelled by the test")
    handle.cancel("cancelled with the batch")
    summary = handle.wait(timeout=30)
    assert summary is not None and summary.status == "interrupted"
    ended = {t.id: (t.outcome, t.failure.reason) for t in summary.runs[0].trials}
    assert ended == {first: ("infra_error", "cancelled by the test"),
                     second: ("infra_error", "cancelled with the batch")}
    assert {e.trial_id for e in finished} == {first, second}


def test_a_listener_can_leave_and_one_added_after_the_end_is_told_so(suite, start):
    """`listen` hands back the way to stop listening, or None once the batch has sent its
    last event (a listener added then would wait for events that never come)."""
    handle = start(suite(AGENT.format(trials=1, agent="sleep 2; " + FINISHES)))
    stayed: list = []
    left: list = []
    assert callable(handle.listen(stayed.append))
    leave = handle.listen(left.append)
    assert callable(leave)
    deadline = time.monotonic() + 60
    while not any(isinstance(e, PhaseStarted) for e in left):  # the trial is under way
        assert time.monotonic() < deadline and not handle.done, "no phase started"
        time.sleep(0.02)
    leave()
    summary = handle.wait(timeout=60)
    assert summary is not None and summary.status == "finished"
    assert isinstance(stayed[-1], BatchFinished) and any(isinstance(e, TrialFinished) for e in stayed)
    assert not any(isinstance(e, (TrialFinished, BatchFinished)) for e in left), "it left before the end"
    assert handle.listen(stayed.append) is None, "the batch has ended: nothing more will be heard"


RUN_AND_WAIT = """
import faulthandler
import signal
import sys
from pathlib import Path

from engine.batch import BatchPlan, Engine
from engine.config import find_config, load_config
from engine.events import BatchStarted, PhaseStarted
from engine.sandbox.client import connect
from engine.spec import load_cases
from engine.store import Store

path, db = Path(sys.argv[1]), Path(sys.argv[2])
faulthandler.register(signal.SIGUSR1)  # the test asks where it hangs, if it does
config = load_config(find_config(path))
plan = BatchPlan(cases=load_cases([path]), variants=config.variants, config=config, trigger="api")
store = Store(db)


def sink(event):
    if isinstance(event, BatchStarted):
        print("batch", event.batch_id, flush=True)
    if isinstance(event, PhaseStarted) and event.phase == "turn":
        print("in turn", flush=True)


try:
    Engine(store, connect()).run(plan, sink)
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    store.close()
"""


@pytest.mark.slow
def test_ctrl_c_in_a_scripts_run_stops_the_batch_and_closes_it(suite, tmp_path, docker_client):
    """`Engine.run` from a script: Ctrl-C while it waits stops the batch (the running trial
    void, the rest skipped, its containers gone) before the KeyboardInterrupt reaches the
    script, which then ends at once instead of leaving the batch running unattended."""
    from engine.store import Store

    path = suite(AGENT.format(trials=3, agent="sleep 60"), toml=ONE_AT_A_TIME)
    db = tmp_path / "script.db"
    process = subprocess.Popen([sys.executable, "-c", RUN_AND_WAIT, str(path), str(db)], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    batch_id = None
    try:
        deadline = time.monotonic() + 60
        while "in turn\n" not in lines:
            assert process.poll() is None, "".join(lines) + process.stderr.read()
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        batch_id = lines[0].split()[1]
        time.sleep(0.5)  # the agent sleeps in its turn
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # say where it hangs: every thread's stack
            process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            process.kill()
            pytest.fail("still running 30 s after Ctrl-C:\n" + "".join(lines) + process.stderr.read())
        assert process.returncode == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if batch_id is not None:
            for left in docker_client.containers.list(all=True, filters={"label": f"proctor.batch={batch_id}"}):
                left.remove(force=True)
    assert lines[-1] == "interrupted\n", "".join(lines)
    store = Store(db)
    try:
        summary = store.batch_summary(batch_id)
    finally:
        store.close()
    assert summary.status == "interrupted"
    trials = summary.runs[0].trials
    assert [t.outcome for t in trials] == ["infra_error", "skipped", "skipped"]
    assert "interrupted" in trials[0].failure.reason
    assert docker_client.containers.list(all=True, filters={"label": f"proctor.batch={batch_id}"}) == []
