"""SIGTERM and SIGHUP stop `proctor run` as Ctrl-C does: exit 130, the batch closed as
interrupted, running trials stopped and their containers and gateways removed, the
trials it never reached skipped. `timeout`, CI cancels and a system shutdown send them.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.engine.test_cli import BASE_IMAGE, interrupt, start_run, write_suite

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
