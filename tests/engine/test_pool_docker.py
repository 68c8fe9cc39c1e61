"""Warm sandboxes in a real Docker daemon: no warm container is handed to two trials,
even when many claim at once; a warm one's limits and labels are its trial's cold one's;
a gateway trial's warm one mounts a gateway folder of its own; the warm containers of an
engine killed with SIGKILL are swept; a batch claims them and removes the unclaimed ones
when it ends."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from engine.config import Resources
from engine.events import PhaseEnded
from engine.sandbox.cleanup import POOL_LABEL, labels, owner_id, sweep
from engine.sandbox.container import Sandbox
from engine.sandbox.pool import PoolKey, SandboxPool
from engine.sandbox.relay import CA_BUNDLE, GATEWAY_DIR
from tests.conftest import BASE_IMAGE
from tests.engine.test_cli import start_run, write_suite
from tests.engine import test_egress_docker as egress

RESOURCES = Resources(memory=256 << 20, pids=128, cpus=1.0, disk=1 << 30, user="agent")
KEY = PoolKey(BASE_IMAGE, RESOURCES)
# What a sandbox is bounded and confined by, as Docker reports it.
CONFINEMENT = ("Memory", "MemorySwap", "PidsLimit", "NanoCpus", "Ulimits", "CapAdd", "CapDrop",
               "SecurityOpt", "NetworkMode", "Init", "Privileged", "ReadonlyRootfs", "StorageOpt")


def batch_containers(client, batch_id: str) -> list[dict]:
    return client.api.containers(all=True, filters={"label": ["proctor=1", f"proctor.batch={batch_id}"]})


def plan(pool: SandboxPool, count: int, prefix: str = "t", gateway: bool = False) -> list[str]:
    trials = [f"{prefix}{n}" for n in range(count)]
    for trial_id in trials:
        pool.plan(trial_id, KEY, gateway)
    return trials


@pytest.mark.slow
def test_no_warm_container_is_handed_to_two_claimants_and_the_pool_refills(docker_client):
    pool = SandboxPool(docker_client, "b_pool_claims", owner_id(), warm=2)
    trials = plan(pool, 8)
    got: dict[str, list[str]] = {t: [] for t in trials}  # trial -> the containers its claims got
    lock = threading.Lock()
    start = threading.Barrier(3)

    def claimant() -> None:  # every claimant claims every trial, all at once
        start.wait()
        for trial_id in trials:
            warm = pool.claim(trial_id, KEY)
            if warm is not None:
                with lock:
                    got[trial_id].append(warm.sandbox.id)
                warm.remove()  # never given back, as a trial's teardown does

    try:
        for trial_id in trials[:4]:  # one at a time: each claim lets the pool make one more
            assert pool.wait_ready(60)
            warm = pool.claim(trial_id, KEY)
            assert warm is not None, f"the pool did not refill for {trial_id}"
            labels_seen = docker_client.api.inspect_container(warm.sandbox.id)["Config"]["Labels"]
            assert labels_seen["proctor.trial"] == trial_id
            got[trial_id].append(warm.sandbox.id)
            warm.remove()
            assert pool.claim(trial_id, KEY) is None, "a claimed container was handed out again"
        trials = trials[4:]
        assert pool.wait_ready(60)
        threads = [threading.Thread(target=claimant) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pool.close()
    handed = [c for containers in got.values() for c in containers]
    assert all(len(containers) <= 1 for containers in got.values()), got
    assert len(set(handed)) == len(handed) >= 6, got
    assert batch_containers(docker_client, "b_pool_claims") == [], "closing left warm containers"


def test_a_warm_sandbox_has_a_cold_ones_limits_and_labels(docker_client):
    owner = owner_id()
    pool = SandboxPool(docker_client, "b_pool_same", owner, warm=1)
    pool.plan("t_same", KEY)
    cold = Sandbox.create(docker_client, BASE_IMAGE, labels("b_pool_same", "t_same", owner), RESOURCES)
    try:
        assert pool.wait_ready(60)
        warm = pool.claim("t_same", KEY)
        assert warm is not None
        try:
            warm_info, cold_info = (docker_client.api.inspect_container(s.id) for s in (warm.sandbox, cold))
            for name in CONFINEMENT:
                assert warm_info["HostConfig"].get(name) == cold_info["HostConfig"].get(name), name
            assert warm_info["HostConfig"]["Memory"] == 256 << 20 and warm_info["HostConfig"]["PidsLimit"] == 128
            assert warm_info["HostConfig"]["NetworkMode"] == "none"
            assert warm_info["Config"]["Image"] == cold_info["Config"]["Image"]
            assert warm_info["Config"]["Cmd"] == cold_info["Config"]["Cmd"]
            assert warm.sandbox.disk_bounded == cold.disk_bounded
            # Made for its trial: the cold one's labels, trial included, and the pool's mark.
            assert warm_info["Config"]["Labels"] == {**cold_info["Config"]["Labels"], POOL_LABEL: "1"}
        finally:
            warm.remove()
    finally:
        cold.destroy()
        pool.close()


def test_a_warm_sandbox_for_a_gateway_trial_mounts_its_own_gateway_folder(docker_client):
    pool = SandboxPool(docker_client, "b_pool_gw", owner_id(), warm=2)
    first, second = plan(pool, 2, gateway=True)
    try:
        assert pool.wait_ready(60)
        warms = [pool.claim(t, KEY) for t in (first, second)]
        assert all(w is not None and w.mount is not None for w in warms)
        assert [w.relay for w in warms] == ["python3", "python3"], "the relay was not started ahead"
        assert warms[0].ca.cert_pem != warms[1].ca.cert_pem, "two trials share a gateway CA"
        for warm in warms:  # each trusts its own CA already
            bundle = warm.sandbox.exec(f"cat {CA_BUNDLE}", timeout=30, workdir="/").stdout
            assert warm.ca.cert_pem.decode().strip() in bundle
        folders = {w.mount.folder for w in warms}
        assert len(folders) == 2 and all(f.is_dir() for f in folders), "two trials shared a gateway folder"
        for trial_id, warm in zip((first, second), warms):
            mounts = docker_client.api.inspect_container(warm.sandbox.id)["Mounts"]
            assert [(m["Destination"], m["Name"]) for m in mounts] == [(GATEWAY_DIR, warm.mount.volume)]
            volume = docker_client.api.inspect_volume(warm.mount.volume)
            assert volume["Options"]["o"] == "bind,ro,nosuid,nodev"
            assert volume["Labels"]["proctor.trial"] == trial_id
            assert volume["Options"]["device"] == str(warm.mount.shared)
    finally:
        for warm in warms:
            warm.remove()
        pool.close()
    assert not any(f.exists() for f in folders), "a removed warm sandbox left its gateway folder"
    assert docker_client.api.volumes(filters={"label": "proctor.batch=b_pool_gw"})["Volumes"] in (None, [])


def test_an_unclaimed_gateway_sandbox_is_removed_with_its_folder_when_the_pool_closes(docker_client):
    pool = SandboxPool(docker_client, "b_pool_gw_close", owner_id(), warm=1)
    plan(pool, 1, gateway=True)
    assert pool.wait_ready(60)
    folders = [p for p in Path(tempfile.gettempdir()).glob("proctor-gw-*") if p.stat().st_uid == os.getuid()]
    pool.close()
    assert batch_containers(docker_client, "b_pool_gw_close") == []
    assert docker_client.api.volumes(filters={"label": "proctor.batch=b_pool_gw_close"})["Volumes"] in (None, [])
    assert not any(f.exists() for f in folders if f.name.startswith(f"proctor-gw-{os.getpid()}-"))


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


upstream = egress.upstream  # the HTTPS stand-in, a fixture
GATEWAY_CASE = """
from pathlib import Path
from engine import evaluation, Secret

@evaluation(trials=2, files={{".agent/agent.py": Path("agent.py")}}, env={{"UPSTREAM_PORT": "{port}"}},
            secrets={{"EXAMPLE_KEY": Secret(hosts=["api.example.test"])}})
def calls_the_api(c):
    c.send("call the api")
"""


@pytest.mark.slow
def test_trials_with_a_gateway_claim_warm_sandboxes_and_broker_through_them(suite, run_eval, upstream, monkeypatch,
                                                                          docker_client):
    port, upstream_ca, seen = upstream
    monkeypatch.setenv("EXAMPLE_KEY", egress.REAL_KEY)
    settings = egress.upstream_toml(port, upstream_ca).replace('timeout = "2m"', 'timeout = "2m"\nwarm = 2')
    summary, events, records = run_eval(suite(GATEWAY_CASE.format(port=port), toml=settings,
                                              files={"agent.py": egress.AGENT}))
    said = [e.summary for e in events if isinstance(e, PhaseEnded) and e.phase == "container"]
    assert len(said) == 2 and all(line.startswith("claimed warm") for line in said), said
    for record in records.values():
        assert record.outcome == "pass", record.failure
        assert [(e.host, e.status, e.brokered) for e in record.egress][0] == \
            ("api.example.test", 200, ["EXAMPLE_KEY"])
    assert len(seen) == 2 and all(s["auth"] == f"Bearer {egress.REAL_KEY}" for s in seen)
    assert batch_containers(docker_client, summary.batch_id) == []
    assert docker_client.api.volumes(filters={"label": f"proctor.batch={summary.batch_id}"})["Volumes"] in (None, [])


def test_a_skipped_trials_warm_container_goes_even_while_it_is_being_made(docker_client):
    pool = SandboxPool(docker_client, "b_pool_drop", owner_id(), warm=2)
    try:
        first, second = plan(pool, 2)
        deadline = time.monotonic() + 30
        while not docker_client.api.containers(all=True, filters={"label": f"proctor.trial={first}"}):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        pool.drop(first)  # its container is made but not yet started: still being made
        assert pool.wait_ready(60)
        pool.drop(second)  # made by now
        deadline = time.monotonic() + 30
        while batch_containers(docker_client, "b_pool_drop") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert batch_containers(docker_client, "b_pool_drop") == [], "a dropped trial's container was kept"
        assert pool.claim(first, KEY) is None and pool.claim(second, KEY) is None
    finally:
        pool.close()
