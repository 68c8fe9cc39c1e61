"""Warm sandboxes in a real Docker daemon: no warm container is handed to two trials,
even when many claim at once; a warm one's limits and labels are a cold one's; the warm
containers of an engine killed with SIGKILL are swept; a batch claims them and removes
the unclaimed ones when it ends."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from engine.config import Resources
from engine.events import PhaseEnded
from engine.sandbox.cleanup import POOL_LABEL, labels, owner_id, sweep
from engine.sandbox.container import Sandbox
from engine.sandbox.pool import PoolKey, SandboxPool
from tests.conftest import BASE_IMAGE
from tests.engine.test_cli import start_run, write_suite

RESOURCES = Resources(memory=256 << 20, pids=128, cpus=1.0, disk=1 << 30, user="agent")
KEY = PoolKey(BASE_IMAGE, RESOURCES)
# What a sandbox is bounded and confined by, as Docker reports it.
CONFINEMENT = ("Memory", "MemorySwap", "PidsLimit", "NanoCpus", "Ulimits", "CapAdd", "CapDrop",
               "SecurityOpt", "NetworkMode", "Init", "Privileged", "ReadonlyRootfs", "StorageOpt")


def batch_containers(client, batch_id: str) -> list[dict]:
    return client.api.containers(all=True, filters={"label": ["proctor=1", f"proctor.batch={batch_id}"]})


@pytest.mark.slow
def test_no_warm_container_is_handed_to_two_claimants_at_once(docker_client):
    pool = SandboxPool(docker_client, "b_pool_claims", owner_id(), warm=3)
    pool.want(KEY)
    claimed: list[str] = []
    claimed_lock = threading.Lock()
    start = threading.Barrier(4)

    def claimant() -> None:
        start.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with claimed_lock:
                if len(claimed) >= 6:
                    return
            sandbox = pool.claim(KEY)
            if sandbox is None:
                time.sleep(0.01)
                continue
            with claimed_lock:
                claimed.append(sandbox.id)
            sandbox.destroy()  # never given back, as a trial's teardown does

    try:
        assert pool.wait_ready(KEY, 60)
        threads = [threading.Thread(target=claimant) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pool.close()
    assert len(claimed) >= 6, "the pool did not refill after claims"
    assert len(set(claimed)) == len(claimed), "a warm container was handed out twice"
    assert batch_containers(docker_client, "b_pool_claims") == [], "closing left warm containers"


def test_a_warm_sandbox_has_a_cold_ones_limits_and_labels(docker_client):
    owner = owner_id()
    pool = SandboxPool(docker_client, "b_pool_same", owner, warm=1)
    pool.want(KEY, trials=1)
    cold = Sandbox.create(docker_client, BASE_IMAGE, labels("b_pool_same", "t_cold", owner), RESOURCES)
    try:
        assert pool.wait_ready(KEY, 60)
        warm = pool.claim(KEY)
        assert warm is not None
        try:
            warm_info, cold_info = (docker_client.api.inspect_container(s.id) for s in (warm, cold))
            for name in CONFINEMENT:
                assert warm_info["HostConfig"].get(name) == cold_info["HostConfig"].get(name), name
            assert warm_info["HostConfig"]["Memory"] == 256 << 20 and warm_info["HostConfig"]["PidsLimit"] == 128
            assert warm_info["HostConfig"]["NetworkMode"] == "none"
            assert warm_info["Config"]["Image"] == cold_info["Config"]["Image"]
            assert warm_info["Config"]["Cmd"] == cold_info["Config"]["Cmd"]
            assert warm.disk_bounded == cold.disk_bounded
            # Labels are fixed at create, before any trial is known: the trial's is the one missing.
            warm_labels, cold_labels = warm_info["Config"]["Labels"], cold_info["Config"]["Labels"]
            assert warm_labels == {**{k: v for k, v in cold_labels.items() if k != "proctor.trial"},
                                   POOL_LABEL: "1"}
        finally:
            warm.destroy()
    finally:
        cold.destroy()
        pool.close()


LIMITS_SEEN = """
from engine import evaluation


@evaluation(trials=3, memory="256m", pids=128)
def limits(c):
    c.send("hi")
    c.exec("cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; "
           "ulimit -f; id -un; hostname; grep Cap /proc/self/status").to_succeed()
"""


def toml(warm: int, concurrency: int = 1, command: str = "echo '{\\\"type\\\":\\\"finished\\\",\\\"reason\\\":\\\"done\\\"}'") -> str:
    return f"""
    [defaults]
    image = "{BASE_IMAGE}"
    timeout = "2m"
    concurrency = {concurrency}
    warm = {warm}

    [[variants]]
    name = "scripted"
    harness = "command"
    command = "{command}"
    """


@pytest.mark.slow
def test_a_batch_claims_warm_sandboxes_each_once_and_removes_the_rest(suite, run_eval, docker_client):
    summary, events, records = run_eval(suite(LIMITS_SEEN, toml=toml(warm=2, concurrency=2)))
    _, _, cold_records = run_eval(suite(LIMITS_SEEN, toml=toml(warm=0)), trials=1)
    [cold] = cold_records.values()
    assert cold.outcome == "pass"
    assert all(r.outcome == "pass" for r in records.values()), [r.failure for r in records.values()]
    ids = [next(s.detail for s in r.phases if s.phase == "container") for r in records.values()]
    assert len(set(ids)) == len(ids) == 3, "a container was handed to two trials"
    said = [e.summary for e in events if isinstance(e, PhaseEnded) and e.phase == "container"]
    assert any(line.startswith("claimed warm") for line in said), said
    # What the agent's sandbox is bounded by, seen from inside, is the cold one's.
    seen = {r.validations[0].evidence["stdout"] for r in records.values()}
    assert seen == {cold.validations[0].evidence["stdout"]}, (seen, cold.validations[0].evidence["stdout"])
    assert batch_containers(docker_client, summary.batch_id) == [], "the batch left warm containers"


SLEEPER = """
from engine import evaluation


@evaluation(trials=3)
def waits(c):
    c.send("wait")
"""


@pytest.mark.slow
def test_a_killed_engines_warm_containers_are_swept(tmp_path, docker_client):
    path = write_suite(tmp_path / "suite", SLEEPER, toml=toml(warm=2, command="sleep 60"))
    process, lines = start_run(path, tmp_path / "proctor.db")
    owner = owner_id(process.pid)  # read while it lives: a gone process's start time is unknown
    try:
        deadline = time.monotonic() + 90
        idle: list[dict] = []
        while time.monotonic() < deadline:
            assert process.poll() is None, "".join(lines) + process.stderr.read()
            mine = docker_client.api.containers(all=True, filters={"label": [
                "proctor=1", POOL_LABEL, f"proctor.owner={owner}"]})
            idle = [c for c in mine if c["State"] == "running"]
            # Two wait for the next trials while the first is in its turn.
            if len(idle) >= 2 and any(" harness " in line for line in lines):
                break
            time.sleep(0.1)
        assert len(idle) >= 2, "".join(lines)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        swept = sweep(docker_client)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    left = docker_client.api.containers(all=True, filters={"label": f"proctor.owner={owner}"})
    assert left == [], "a killed engine's warm containers were not swept"
    assert swept.pool >= 2
