"""Batches on a real Ray cluster on this machine (issue 15): a head with no slots and two
worker nodes of 4 `proctor_slot`s each, all on the shared Docker daemon. Every trial runs
on a worker node with that node's gateway; its events and record come home to one store.

One cluster serves the whole module (the machine has 2 cores). The node-killing test runs
last: it takes a node away."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from engine.batch import BatchPlan, Engine
from engine.cluster import node_name
from engine.cluster.job import JOB_PREFIX, pack
from engine.config import ClusterConfig, find_config, load_config
from engine.events import TrialStarted
from engine.sandbox.cleanup import sweep
from engine.spec import load_cases
from tests.conftest import BASE_IMAGE
from tests.engine.test_egress_docker import AGENT, REAL_KEY, upstream, upstream_toml  # noqa: F401 (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SLOTS = 4
HEADER = "from pathlib import Path\nfrom engine import evaluation\n"
AGENT_FILES = 'files={".agent/run.sh": Path("agent.sh")}'
TOML = f"""
[defaults]
image = "{BASE_IMAGE}"
timeout = "2m"
concurrency = 4  # the local run's; a cluster runs as many as its nodes have slots

[[variants]]
name = "scripted"
command = "sh .agent/run.sh"
"""
WRITES = """
echo "made on $(hostname)" > out.txt
echo '{"type":"command","command":"echo made","exitCode":0,"output":"made"}'
echo '{"type":"finished","reason":"done"}'
"""
SUITE = HEADER + f"""
@evaluation(trials=6, {AGENT_FILES})
def writes_out(c):
    c.send("write out.txt")
    c.exec("grep -q made out.txt").to_succeed()

@evaluation(trials=6, {AGENT_FILES})
def wants_a_missing_file(c):
    c.send("write out.txt")
    c.exec("test -f missing.txt").to_succeed()
"""


@pytest.fixture(scope="module")
def ray_cluster(docker_client):
    """(address, [worker nodes]): the module's cluster, its nodes on this Docker daemon."""
    # Before Ray starts: loopback only. The nodes inherit this environment, DOCKER_HOST with it.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        # num_cpus: the idle workers Ray keeps (a trial asks for none): each slot keeps its warm worker.
        workers = [cluster.add_node(num_cpus=SLOTS, resources={"proctor_slot": SLOTS}) for _ in range(2)]
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster, workers
    finally:
        ray.shutdown()
        cluster.shutdown()


def names(workers) -> list[str]:
    return [node_name(w.node_id, w.node_ip_address) for w in workers]


def plan_for(path: Path, address: str | None, **kw) -> BatchPlan:
    config = load_config(find_config(path))
    if address is not None:
        config = config.model_copy(update={"cluster": ClusterConfig(address=address)})
    return BatchPlan(cases=load_cases([path]), variants=config.select_variants(None), config=config,
                     trigger="api", **kw)


def records_of(store, summary) -> list:
    return [store.get_trial(t.id) for r in summary.runs for t in r.trials]


def left_behind(docker_client, batch_id: str) -> list[str]:
    mine = {"label": f"proctor.batch={batch_id}"}
    return [c.name for c in docker_client.containers.list(all=True, filters=mine)]


def test_a_batch_runs_on_both_nodes_and_matches_a_local_run(ray_cluster, suite, store, docker_client):
    cluster, workers = ray_cluster
    path = suite(SUITE, toml=TOML, files={"agent.sh": WRITES})
    engine = Engine(store, docker_client)
    events: list = []
    # Docker now and then loses a fast exec's output (moby#27289), which voids a trial on
    # either side (the agent's user is not made): --retry-void runs it again, as a user would.
    remote = engine.run(plan_for(path, cluster.address, retry_void=2), events.append)
    local = engine.run(plan_for(path, None, retry_void=2))

    on_cluster = records_of(store, remote)
    assert {r.host for r in on_cluster} == set(names(workers))  # every record names its node; both ran

    def last(records) -> list:
        final = {(r.case_id, r.trial): r for r in sorted(records, key=lambda r: r.attempt)}
        return [final[k] for k in sorted(final)]

    def shape(r):  # the wait for a slot is the scheduler's, not the trial's: it differs
        return (r.case_id, r.trial, r.outcome, r.failure, [p.phase for p in r.phases if p.phase != "slot"],
                [(v.kind, v.name, v.status) for v in r.validations], [t.files_changed for t in r.turns],
                sorted(r.source))
    assert len(last(on_cluster)) == 12
    assert [shape(r) for r in last(on_cluster)] == [shape(r) for r in last(records_of(store, local))]

    def scores(summary) -> list:  # the agent's command count rides on the same exec output: not compared
        return [(r.case_id, r.distribution.scored, r.distribution.passed, r.distribution.failed,
                 r.distribution.pass_rate, r.distribution.deterministic) for r in summary.runs]
    assert scores(remote) == scores(local) == [("writes_out", 6, 6, 0, 1.0, True),
                                               ("wants_a_missing_file", 6, 0, 6, 0.0, True)]
    # The events came home: each trial's start and end, through the batch's one emit.
    assert sum(isinstance(e, TrialStarted) for e in events) == len(on_cluster)
    assert store.batch_summary(remote.batch_id).status == "finished"


def test_a_brokered_key_passes_on_a_worker_node_through_its_gateway(ray_cluster, suite, store, docker_client,
                                                                    upstream, monkeypatch):
    cluster, workers = ray_cluster
    port, upstream_ca, seen = upstream
    monkeypatch.setenv("EXAMPLE_KEY", REAL_KEY)  # the driver's only: the nodes started without it
    path = suite(f"""
from pathlib import Path
from engine import evaluation, Secret

@evaluation(files={{".agent/agent.py": Path("agent.py")}}, env={{"UPSTREAM_PORT": "{port}"}},
            secrets={{"EXAMPLE_KEY": Secret(hosts=["api.example.test"])}})
def calls_the_api(c):
    c.send("call the api")
    c.exec("env").stdout.to_contain("EXAMPLE_KEY=proctor-placeholder-EXAMPLE_KEY")
""", toml=upstream_toml(port, upstream_ca), files={"agent.py": AGENT})
    summary = Engine(store, docker_client).run(plan_for(path, cluster.address))
    [record] = records_of(store, summary)
    assert record.outcome == "pass", (record.failure, record.validations, record.turns)
    assert record.host in names(workers)
    assert seen == [{"path": f"/v1/echo?key={REAL_KEY}", "auth": f"Bearer {REAL_KEY}"}]
    brokered = record.egress[0]
    assert brokered.host == "api.example.test" and brokered.brokered == ["EXAMPLE_KEY"]
    assert REAL_KEY not in record.model_dump_json()
    # It travelled in the task's arguments only: no file of the cluster's session (its logs,
    # spilled objects) nor of the job's folder on the node holds it.
    session = Path(cluster.head_node.get_session_dir_path())
    digest = pack(load_cases([path]), load_config(find_config(path))).digest
    job = Path(tempfile.gettempdir()) / f"{JOB_PREFIX}{digest[:24]}"
    assert job.is_dir()
    written = [p for p in [*session.rglob("*"), *job.rglob("*")]
               if p.is_file() and not p.is_symlink() and REAL_KEY.encode() in _bytes(p)]
    assert written == []


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # a socket, or a log Ray rotated meanwhile
        return b""


SLEEPS = """
echo '{"type":"message","role":"assistant","text":"thinking"}'
sleep 30
echo '{"type":"finished","reason":"done"}'
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_on_a_cluster_driver_leaves_no_container(ray_cluster, suite, tmp_path, docker_client, stop):
    """Ctrl-C, and SIGTERM (a CI cancel, a shutdown), which SPEC says does the same."""
    cluster, _ = ray_cluster
    path = suite(HEADER + f"""
@evaluation(trials=2, {AGENT_FILES})
def sleeps(c):
    c.send("think")
""", toml=TOML, files={"agent.sh": SLEEPS})
    db = tmp_path / "driver.db"
    driver = subprocess.Popen([sys.executable, "-m", "engine.cli", "run", str(path), "--cluster", cluster.address,
                               "--store", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    batch = _wait_for_sandboxes(docker_client, db, 2, driver)
    driver.send_signal(stop)
    out, err = driver.communicate(timeout=90)
    assert driver.returncode == 130, err
    assert left_behind(docker_client, batch) == []  # the nodes tore their sandboxes down themselves
    from engine.store import Store

    with Store(db) as store:
        summary = store.batch_summary(batch)
    assert summary.status == "interrupted"
    # Void, as a local trial stopped by Ctrl-C is (its reason: the stop, or the sandbox it destroyed).
    assert [t.outcome for r in summary.runs for t in r.trials] == ["infra_error"] * 2


def _wait_for_sandboxes(docker_client, db: Path, count: int, driver, timeout: float = 60) -> str:
    """The driver's batch id once `count` of its sandboxes run."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        assert driver.poll() is None, driver.communicate()
        batches = []
        if db.exists():
            with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db)) as con:
                batches = [row[0] for row in con.execute("select id from batch")]
        if batches and len(docker_client.containers.list(
                filters={"label": f"proctor.batch={batches[0]}", "status": "running"})) >= count:
            return batches[0]
        time.sleep(0.2)
    raise AssertionError(f"the driver's batch did not reach {count} running sandboxes in {timeout} s")


def test_a_node_lost_mid_batch_voids_only_its_trials(ray_cluster, suite, store, docker_client):
    cluster, workers = ray_cluster
    agent = """
echo '{"type":"message","role":"assistant","text":"working"}'
sleep 4
echo made > out.txt
echo '{"type":"finished","reason":"done"}'
"""
    path = suite(HEADER + f"""
@evaluation(trials=8, {AGENT_FILES})
def works_a_while(c):
    c.send("work")
    c.exec("test -f out.txt").to_succeed()
""", toml=TOML, files={"agent.sh": agent})
    engine = Engine(store, docker_client)
    started = threading.Semaphore(0)
    handle = engine.start_batch(plan_for(path, cluster.address),
                                lambda e: started.release() if isinstance(e, TrialStarted) else None)
    for _ in range(2 * SLOTS):  # every trial is in flight: 4 on each node
        assert started.acquire(timeout=60)
    time.sleep(1)  # into their turns
    store.flush()
    with contextlib.closing(sqlite3.connect(store.path)) as con:  # where the status bar looks
        running = con.execute("select json_extract(record, '$.host') from trial where status = 'running'"
                              " and batch_id = ?", (handle.batch_id,)).fetchall()
    assert running and {host for (host,) in running} <= set(names(workers))
    doomed, kept = workers[1], workers[0]
    cluster.remove_node(doomed, allow_graceful=False)
    summary = handle.wait(120)
    assert summary is not None

    records = records_of(store, summary)
    seen = [(r.outcome, r.host, r.failure and r.failure.reason) for r in records]
    lost = [r for r in records if r.outcome == "infra_error"]
    assert lost and all(r.failure.reason == f"node {names([doomed])[0]} lost" for r in lost), seen
    assert all(r.host == names([doomed])[0] for r in lost), seen
    # The rest passed: every trial of the node that stayed, and any the lost node finished first.
    assert all(r.outcome == "pass" for r in records if r not in lost), seen
    assert sum(r.host == names([kept])[0] for r in records) == SLOTS, seen
    # What the dead node's workers left is theirs (owner gone): the next sweep removes it.
    until = time.monotonic() + 30
    while left_behind(docker_client, summary.batch_id) and time.monotonic() < until:
        sweep(docker_client)
        time.sleep(0.5)
    assert left_behind(docker_client, summary.batch_id) == []
