"""Teardown off the critical path: a trial's slot is free once its record is committed, its
container is removed in the background, at most `concurrency` removals are pending (a trial
waits for a place), and nothing is left behind when the batch ends or `proctor run` is stopped.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.batch import BatchPlan, Engine
from engine.config import find_config, load_config
from engine.events import Event, PhaseEnded, PhaseStarted, TrialStarted
from engine.sandbox.cleanup import owner_id
from engine.sandbox.container import Sandbox
from engine.spec import load_cases
from tests.conftest import suite_toml
from tests.engine.test_cli import cli_env, interrupt, stored_outcomes, wait_for_line, write_suite

TWO_TRIALS = """
from engine import evaluation


@evaluation(trials=2)
def touches(c):
    c.send("touch a file")
    c.exec("test -f out.txt").to_succeed()
"""

ONE_AT_A_TIME = suite_toml({"scripted": "touch out.txt"}, concurrency=1)


def containers_of(docker_client, label: str) -> list:
    return docker_client.containers.list(all=True, filters={"label": label})


def test_the_next_trial_starts_while_the_last_container_is_still_removed(tmp_path, docker_client, store,
                                                                         monkeypatch):
    path = write_suite(tmp_path / "suite", TWO_TRIALS, toml=ONE_AT_A_TIME)
    # Removals wait until the second trial's teardown has begun, then a little longer: the
    # first container outlives its trial, and the second trial finds no free removal place.
    gate = threading.Event()
    destroy = Sandbox.destroy

    def slow_destroy(sandbox: Sandbox) -> None:
        gate.wait(8)
        destroy(sandbox)

    monkeypatch.setattr(Sandbox, "destroy", slow_destroy)
    started: list[str] = []
    said: dict[str, str] = {}  # each trial's teardown line, as `-v` prints it and the store keeps it
    first_alive_at_second_start: list[bool] = []

    def sink(event: Event) -> None:
        if isinstance(event, TrialStarted):
            started.append(event.trial_id)
            if len(started) == 2:
                first_alive_at_second_start.append(
                    bool(containers_of(docker_client, f"proctor.trial={started[0]}")))
        if isinstance(event, PhaseEnded) and event.phase == "teardown":
            said[event.trial_id] = event.summary
        if isinstance(event, PhaseStarted) and event.phase == "teardown" and event.trial_id == started[-1] \
                and len(started) == 2:
            threading.Timer(0.4, gate.set).start()

    config = load_config(find_config(path))
    plan = BatchPlan(cases=load_cases([path]), variants=config.select_variants(None), config=config,
                     trigger="api")
    summary = Engine(store, docker_client).run(plan, sink)

    assert first_alive_at_second_start == [True], "the second trial waited for the first one's container"
    first, second = (store.get_trial(t) for t in started)
    assert first.outcome == second.outcome == "pass"
    assert "container removed in the background" in said[first.id], said
    assert [s.detail for r in (first, second) for s in r.phases if s.phase == "teardown"] == ["outcome pass"] * 2
    # The second found the only removal place taken: its teardown says so, and its span measures the wait.
    assert "for a removal place" in said[second.id], said
    assert second.timings.teardown_ms >= 250 > first.timings.teardown_ms
    assert containers_of(docker_client, f"proctor.batch={summary.batch_id}") == [], \
        "the batch ended before its containers were removed"


SLEEPERS = """
from engine import evaluation


@evaluation(trials=6, allow=["example.com"])
def naps(c):
    c.send("nap")
"""

SLEEPERS_TOML = suite_toml({"napper": "sleep 1"})

# `proctor run` with its background removals slowed, so some are pending when the signal comes.
SLOW_REMOVALS = """
import sys
import threading
import time

from engine import cli
from engine.sandbox.container import Sandbox

destroy = Sandbox.destroy


def slow_destroy(self):
    if threading.current_thread().name.startswith("reaper"):
        time.sleep(2)
    destroy(self)


Sandbox.destroy = slow_destroy
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_sigterm_mid_batch_removes_every_pending_container_before_exit(tmp_path, docker_client):
    path = write_suite(tmp_path / "suite", SLEEPERS, toml=SLEEPERS_TOML)
    store = tmp_path / "proctor.db"
    folders_before = set(Path("/tmp").glob("proctor-gw-*"))
    process = subprocess.Popen([sys.executable, "-c", SLOW_REMOVALS, "run", str(path), "-v", "--store", str(store)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
                               cwd=tmp_path)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    owner = f"proctor.owner={owner_id(process.pid)}"
    try:
        wait_for_line(process, lines, "saved t_", within=60)
        time.sleep(0.2)
        finished = {t for t, outcome in stored_outcomes(store).items() if outcome is not None}
        pending = [c for c in containers_of(docker_client, owner) if c.labels["proctor.trial"] in finished]
        assert pending, "no finished trial's container was still being removed when the signal came"
        batch = interrupt(process, lines, signal.SIGTERM, store)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert containers_of(docker_client, owner) == [], "the stopped process left containers behind"
    assert containers_of(docker_client, f"proctor.batch={batch['batch_id']}") == []
    assert set(Path("/tmp").glob("proctor-gw-*")) <= folders_before, "gateway folders were left behind"


def test_a_full_reaper_makes_the_next_removal_wait_and_reports_failures():
    """The logic alone: at most `pending` removals at once, a failure said once by `drain`."""
    from engine.sandbox.reaper import Reaper

    reaper = Reaper(pending=1)
    release = threading.Event()
    assert reaper.submit("container a", lambda: release.wait(5)) < 0.05
    threading.Timer(0.3, release.set).start()

    def fails() -> None:
        raise OSError("the daemon went away")

    assert reaper.submit("container b", fails) >= 0.25  # waited for a's place
    assert reaper.close(timeout=5) == ["could not remove container b: the daemon went away"]
    assert reaper.in_flight() == 0
