"""The cluster's status as the studio polls it (engine.cluster.status), against a real Ray
cluster on this machine: a head with no slot and two nodes declaring 4 and 2 `proctor_slot`s.
Free slots drop while tasks hold them, a removed node shows gone, no connection is None; and a
batch's nodes read from stored records that name them."""

from __future__ import annotations

import os

# Before Ray is imported anywhere: every address on loopback, and no usage report leaves it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import contextlib  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from engine.cluster import node_name  # noqa: E402
from engine.cluster.status import (  # noqa: E402
    batch_hosts, batch_nodes, cluster_status, is_node_name,
)
from engine.models import Failure, TrialRecord  # noqa: E402
from engine.store import Store  # noqa: E402
from tests.make_store import put_trial  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
A, B = "127.0.0.1/2f6dfbfd", "127.0.0.1/a96dc2f6"  # node names as records hold them


def record(trial_id: str, host: str | None, outcome: str | None, batch: str = "b_c",
           run: str = "r_c") -> TrialRecord:
    return TrialRecord(
        id=trial_id, batch_id=batch, run_id=run, case_id="writes_greet", variant="scripted",
        trial=int(trial_id.rsplit("_", 1)[1]), trigger="studio", outcome=outcome, host=host,
        failure=Failure(kind="infra", reason=f"node {host} lost") if outcome == "infra_error" else None,
        started_at="2026-12-01T03:00:00.000Z",
        finished_at=None if outcome is None else "2026-12-01T03:00:09.000Z")


def wait_for(what, timeout: float = 30.0):
    """`what()` once it is truthy (Ray's view of resources moves a beat after the tasks)."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


# -- no cluster ------------------------------------------------------------------------------

def test_a_process_connected_to_no_cluster_has_no_status():
    ray = pytest.importorskip("ray", reason="Ray is the proctor[ray] extra")
    assert not ray.is_initialized()
    began = time.perf_counter()
    assert cluster_status() is None
    assert time.perf_counter() - began < 2  # no connect attempt (those wait for seconds)


def test_node_names_are_told_from_docker_hosts():
    assert is_node_name(node_name("2f6dfbfdbb4c8a0b1662b215c3e551248f28ce7cdbd5af284f800c34", "10.0.0.7"))
    assert is_node_name(node_name("a96dc2f6" * 7, "fe80::1"))
    for host in (None, "", "local", "unix:///var/run/docker.sock", "ssh://ci@build-2", "tcp://10.0.0.7:2376"):
        assert not is_node_name(host)


def test_a_batch_names_its_nodes_from_its_records(tmp_path):
    """Per node: its trials by outcome and those running now, from the records' `host` alone;
    trials of a Docker host and trials that never started are no node's."""
    with Store(tmp_path / "s.db") as store:
        store.create_batch("b_c", "studio", owner="", started_at="2026-12-01T03:00:00.000Z")
        store.create_run("r_c", "b_c", "writes_greet", "scripted", position=0)
        for n, (host, outcome) in enumerate([
                (A, "pass"), (A, "pass"), (A, "fail"), (A, None), (B, "pass"), (B, "infra_error"),
                (B, None), ("local", "pass"), (None, "skipped")], 1):
            put_trial(store, record(f"t_c_{n}", host, outcome))
        store.flush()
        trials = batch_hosts(store, "b_c")
        nodes = batch_nodes(trials)
        assert [(n.name, n.outcomes, n.running, n.trials) for n in nodes] == [
            (A, {"pass": 2, "fail": 1}, 1, 4), (B, {"pass": 1, "infra_error": 1}, 1, 3)]
        # A running batch reads again only what was not finished before.
        done = [t.id for t in trials if t.status == "done"]
        assert {t.id for t in batch_hosts(store, "b_c", skip=done)} == {"t_c_4", "t_c_7"}
        assert batch_nodes(batch_hosts(store, "b_none")) == []


# -- a real cluster --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is the proctor[ray] extra")
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        four = made.add_node(num_cpus=1, resources={"proctor_slot": 4})
        two = made.add_node(num_cpus=1, resources={"proctor_slot": 2})
        made.wait_for_nodes()
        ray.init(address=made.address)
        yield made, {node_name(four.node_id, four.node_ip_address): 4,
                     node_name(two.node_id, two.node_ip_address): 2}, two
    finally:
        ray.shutdown()
        made.shutdown()


def test_it_names_both_nodes_with_their_slots(cluster):
    _, slots, _ = cluster
    began = time.perf_counter()
    status = cluster_status()
    took = time.perf_counter() - began
    assert status is not None and status.error is None
    # The head declares no slot: it runs no trial and is not listed.
    assert {n.name: (n.alive, n.slots, n.free) for n in status.nodes} == {
        name: (True, s, s) for name, s in slots.items()}
    assert status.line() == "Ray · 2 nodes · 6 of 6 slots free"
    assert took < 0.5, f"a poll took {took:.2f}s"


def test_free_slots_drop_while_tasks_hold_them(cluster, tmp_path):
    import ray

    _, slots, _ = cluster
    release = tmp_path / "release"

    @ray.remote(num_cpus=0, resources={"proctor_slot": 1})
    def hold(flag: str) -> str:
        deadline = time.monotonic() + 60
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.05)
        return ray.get_runtime_context().get_node_id()

    held = [hold.remote(str(release)) for _ in range(4)]
    try:
        busy = wait_for(lambda: (s := cluster_status()) and s.free == 2 and s)
        assert busy, f"free slots never dropped to 2 of 6: {cluster_status()}"
        assert busy.line() == "Ray · 2 nodes · 2 of 6 slots free"
        assert sum(n.slots - n.free for n in busy.nodes) == 4
    finally:
        release.touch()
    ran_on = ray.get(held, timeout=60)
    assert len(ran_on) == 4
    idle = wait_for(lambda: (s := cluster_status()) and s.free == 6 and s)
    assert idle, f"the slots were never given back: {cluster_status()}"


def test_trials_running_on_a_node_come_from_the_store(cluster, tmp_path):
    _, slots, _ = cluster
    four, two = sorted(slots, key=lambda name: -slots[name])
    with Store(tmp_path / "s.db") as store:
        store.create_batch("b_c", "studio", owner="", started_at="2026-12-01T03:00:00.000Z")
        store.create_run("r_c", "b_c", "writes_greet", "scripted", position=0)
        for n, (host, outcome) in enumerate([(four, None), (four, None), (two, None), (two, "pass"),
                                             ("local", None)], 1):
            put_trial(store, record(f"t_c_{n}", host, outcome))
        store.flush()
        status = cluster_status(store)
    assert status is not None
    assert {n.name: sorted(n.running) for n in status.nodes} == {
        four: ["t_c_1", "t_c_2"], two: ["t_c_3"]}
    assert f"{four} · 4 of 4 slots free · 2 trials running" in status.detail()


def test_a_removed_node_shows_gone(cluster):
    made, slots, two = cluster
    gone = node_name(two.node_id, two.node_ip_address)
    made.remove_node(two)
    status = wait_for(lambda: (s := cluster_status()) and any(
        n.name == gone and not n.alive for n in s.nodes) and s)
    assert status, f"the removed node still shows alive: {cluster_status()}"
    assert status.line() == "Ray · 1 node · 4 of 4 slots free · 1 gone"
    assert f"{gone} · gone" in status.detail()
    assert [n.name for n in status.alive] == [name for name in slots if name != gone]


@pytest.mark.slow
def test_a_cluster_whose_head_went_away_is_a_status_not_a_hang(tmp_path):
    """Ray's own calls block for a minute once the head is gone (then end the process): the
    poll says so within ANSWER_S instead. In a process of its own, which Ray may end."""
    pytest.importorskip("ray", reason="Ray is the proctor[ray] extra")
    script = textwrap.dedent("""
        import os, sys, time
        from ray.cluster_utils import Cluster
        import ray
        from engine.cluster.status import cluster_status
        made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        made.add_node(num_cpus=1, resources={"proctor_slot": 1})
        made.wait_for_nodes()
        ray.init(address=made.address)
        assert cluster_status().line() == "Ray · 1 node · 1 of 1 slot free"
        for node in made.list_all_nodes():
            node.kill_all_processes(check_alive=False, allow_graceful=False)
        for _ in range(2):  # the second poll finds the first question still hanging
            began = time.perf_counter()
            status = cluster_status()
            print("POLL", f"{time.perf_counter() - began:.2f}", status.line(), flush=True)
        os._exit(0)  # not ray.shutdown(): it would wait on the dead head
    """)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    # A session of its own: Ray's agents outlive a killed head, and go with the group.
    child = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    lines = [line.removeprefix("POLL ") for line in stdout.splitlines() if line.startswith("POLL ")]
    assert child.returncode == 0, stderr[-2000:]
    assert len(lines) == 2, stdout
    for line in lines:
        seconds, words = line.split(" ", 1)
        assert float(seconds) < 3.0 and words.startswith("Ray · the cluster "), line
