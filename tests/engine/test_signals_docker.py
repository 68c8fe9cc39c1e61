"""SIGTERM and SIGHUP stop `proctor run` as Ctrl-C does: exit 130, the batch closed as
interrupted, running trials stopped and their containers and gateways removed, the
trials it never reached skipped. `timeout`, CI cancels and a system shutdown send them.
A signal while the batch is still being planned starts no trial: every one is skipped.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.engine.test_cli import (BASE_IMAGE, cli_env, finish, interrupt, proctor, start_run,
                                   wait_for_line, write_suite)

pytestmark = pytest.mark.slow

SLEEPER = """
    from engine import evaluation


    @evaluation(trials=3, allow=["example.com"])
    def waits(c):
        c.send("wait a minute")
"""

SLEEPER_TOML = f"""
    [defaults]
    image = "{BASE_IMAGE}"
    timeout = "5m"
    concurrency = 2

    [[variants]]
    name = "sleeper"
    harness = "command"
    command = "sleep 60"
"""


def gateway_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("proctor-gw-*"))


def run_until_agents_sleep(path: Path, store: Path, agents: int) -> tuple[subprocess.Popen[str], list[str]]:
    """`proctor run -v` in the background, returned once `agents` trials are in their turn."""
    process, lines = start_run(path, store)
    deadline = time.monotonic() + 90
    while sum(" harness " in line for line in lines) < agents and time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("".join(lines) + process.stderr.read())
        time.sleep(0.1)
    assert sum(" harness " in line for line in lines) >= agents, "".join(lines)
    time.sleep(1)  # the agents are now sleeping in their turns
    return process, lines


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_stops_the_batch_like_ctrl_c(tmp_path, docker_client, signum):
    path = write_suite(tmp_path / "suite", SLEEPER, toml=SLEEPER_TOML)
    store = tmp_path / "proctor.db"
    folders_before = gateway_folders()
    process, lines = run_until_agents_sleep(path, store, agents=2)
    try:
        batch = interrupt(process, lines, signum, store)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    outcomes = [t["outcome"] for t in batch["runs"][0]["trials"]]
    assert None not in outcomes, f"a trial is still running: {outcomes}"
    assert outcomes.count("infra_error") == 2 and outcomes.count("skipped") == 1, outcomes
    left = docker_client.containers.list(
        all=True, filters={"label": ["proctor=1", f"proctor.batch={batch['batch_id']}"]})
    assert left == [], "the stopped batch left containers behind"
    assert gateway_folders() <= folders_before, "the stopped batch left gateway folders behind"


def test_a_signal_ignored_at_start_stays_ignored(tmp_path, docker_client):
    """`nohup proctor run … &`: SIGHUP is ignored from the start, so closing the terminal
    leaves the batch running to its end, as nohup promises."""
    path = write_suite(tmp_path / "suite", SLEEPER.replace("trials=3", "trials=2"),
                       toml=SLEEPER_TOML.replace("sleep 60", "sleep 4"))
    store = tmp_path / "proctor.db"
    process, lines = start_run(path, store, ignoring=(signal.SIGHUP,))
    try:
        wait_for_line(process, lines, " harness ")
        process.send_signal(signal.SIGHUP)  # the terminal closed
        code, stderr = finish(process, within=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 0, ("".join(lines), stderr)
    (batch,) = json.loads(proctor("ls", "--json", store=store).stdout)
    assert batch["status"] != "interrupted"
    assert [t["outcome"] for t in batch["runs"][0]["trials"]] == ["pass", "pass"]


# `proctor run`, its planning slowed and a real signal sent from inside it: a big batch
# writes one row per trial before it starts, and a Ctrl-C may come meanwhile.
SIGNAL_WHILE_PLANNING = """
import os
import signal
import sys

from engine import cli
from engine.store import Store

create_trial = Store.create_trial


def create_then_signal(self, record, owner):
    create_trial(self, record, owner)
    if record.trial == 2:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))


Store.create_trial = create_then_signal
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_batch_is_planned_skips_every_trial(tmp_path, docker_client, signum):
    path = write_suite(tmp_path / "suite", SLEEPER.replace("trials=3", "trials=6"), toml=SLEEPER_TOML)
    store = tmp_path / "proctor.db"
    done = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_PLANNING, signum.name,
                           "run", str(path), "--store", str(store)],
                          capture_output=True, text=True, timeout=120, env=cli_env(), cwd=tmp_path)
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "interrupted" in done.stderr, done.stderr
    (batch,) = json.loads(proctor("ls", "--json", store=store).stdout)
    assert batch["status"] == "interrupted"
    assert [t["outcome"] for t in batch["runs"][0]["trials"]] == ["skipped"] * 6, "a trial started"
    left = docker_client.containers.list(all=True, filters={"label": f"proctor.batch={batch['batch_id']}"})
    assert left == []
