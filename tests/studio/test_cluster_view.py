"""The cluster in the studio: the status bar's line and tooltip from a real Ray cluster's
status (a head with no slot and two nodes with 2 and 1 `proctor_slot`s), and a batch
Overview's Nodes part from records that name those nodes, with their live free slots; the
Run dialog's Cluster field, from proctor.toml's `[cluster]` into the batch's plan; and a batch
started from that dialog, run on the nodes in Docker and shown by both.

(Not test_cluster_status.py: tests/engine has that name, and pytest's rootdir import needs
each test file's basename unique.)"""

from __future__ import annotations

import os

# Before Ray is imported anywhere: every address on loopback, and no usage report leaves it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import pytest  # noqa: E402

from engine.cluster import node_name  # noqa: E402
from engine.cluster.status import ClusterStatus, NodeStatus, cluster_status  # noqa: E402
from engine.store import Store  # noqa: E402
from studio.views.run import RunDialog  # noqa: E402
from studio.views.status import ClusterStatusLabel  # noqa: E402
from tests.conftest import DEFAULT_TOML  # noqa: E402
from tests.engine.test_cluster_status import record  # noqa: E402
from tests.make_store import put_trial  # noqa: E402
from tests.studio.test_batch_overview import column, open_batch  # noqa: E402

SCREENSHOT = os.environ.get("PROCTOR_NODES_SCREENSHOT")  # a path: the Overview is saved there


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is the proctor[ray] extra")
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        nodes = [made.add_node(num_cpus=1, resources={"proctor_slot": n}) for n in (2, 1)]
        made.wait_for_nodes()
        ray.init(address=made.address)
        yield [node_name(n.node_id, n.node_ip_address) for n in nodes]
    finally:
        ray.shutdown()
        made.shutdown()


def cluster_batch(store: Store, two: str, one: str) -> None:
    """b_c: 5 trials on the 2-slot node (3 pass, 1 fail, 1 running), 3 on the 1-slot node (1 pass,
    1 lost with it, 1 running), one skipped before it reached a node."""
    store.create_batch("b_c", "studio", owner="", started_at="2026-12-01T03:00:00.000Z")
    store.create_run("r_c", "b_c", "writes_greet", "scripted", position=0)
    for n, (host, outcome) in enumerate([
            (two, "pass"), (two, "pass"), (two, "pass"), (two, "fail"), (two, None),
            (one, "pass"), (one, "infra_error"), (one, None), (None, "skipped")], 1):
        put_trial(store, record(f"t_c_{n}", host, outcome))
    store.flush()


def test_no_cluster_no_line(qtbot):
    ray = pytest.importorskip("ray", reason="Ray is the proctor[ray] extra")
    assert not ray.is_initialized()
    label = ClusterStatusLabel(watch=False)
    qtbot.addWidget(label)
    label.changed.emit(label.check())
    assert label.isHidden() and label.status is None


def test_the_status_line_and_its_tooltip(qtbot, cluster, tmp_path):
    two, one = cluster
    with Store(tmp_path / "s.db") as store:
        cluster_batch(store, two, one)
        label = ClusterStatusLabel(store)  # polls on its own thread, as in the window
        qtbot.addWidget(label)
        try:
            qtbot.waitUntil(lambda: label.status is not None, timeout=10_000)
        finally:
            label.stop()
    assert not label.isHidden()
    assert label.text() == "● Ray · 2 nodes · 3 of 3 slots free"
    lines = label.toolTip().splitlines()
    assert lines[0].startswith("Ray cluster at 127.0.0.1:")
    assert sorted(lines[1:]) == sorted([f"{two} · 2 of 2 slots free · 1 trial running",
                                        f"{one} · 1 of 1 slot free · 1 trial running"])
    assert label.styleSheet() == ""


def test_a_cluster_that_stopped_answering_is_said_in_red(qtbot):
    label = ClusterStatusLabel(watch=False)
    qtbot.addWidget(label)
    label.changed.emit(ClusterStatus(address="127.0.0.1:6379", error="the cluster does not answer (waited 2s)"))
    assert label.text() == "○ Ray · the cluster does not answer (waited 2s)"
    assert "color" in label.styleSheet()


def test_the_overview_names_each_node_with_its_trials(make_window, qtbot, tmp_path, cluster):
    two, one = cluster
    path = tmp_path / "nodes.db"
    with Store(path) as store:
        cluster_batch(store, two, one)
        store.create_batch("b_local", "cli", owner="", started_at="2026-12-01T03:00:00.000Z")
        store.create_run("r_l", "b_local", "writes_greet", "scripted", position=0)
        put_trial(store, record("t_l_1", "local", "pass", batch="b_local", run="r_l"))
        store.flush()
    window = make_window(path)
    window.resize(1024, 700)
    qtbot.waitExposed(window)

    panel = open_batch(window, qtbot, "b_local")  # no cluster node: no Nodes part
    assert panel.nodes.isHidden() and panel.nodes_heading.isHidden()

    panel = open_batch(window, qtbot, "b_c")
    qtbot.waitUntil(lambda: panel.nodes.rowCount() == 2, timeout=10_000)
    assert not panel.nodes.isHidden()
    rows = {column(panel.nodes, 0)[r]: [panel.nodes.item(r, c).text() for c in (1, 2, 4)]
            for r in range(2)}
    # Not live yet (this window's poll is off): the records alone.
    assert rows == {two: ["5", "—", "3 pass · 1 fail · 1 running"],
                    one: ["3", "—", "1 pass · 1 void · 1 running"]}
    assert "not connected" in panel.nodes.item(0, 2).toolTip()
    assert panel.nodes.horizontalScrollBar().maximum() == 0  # it fits beside the grid at 1,024 px
    assert panel.nodes_note.text() == "2 cluster nodes ran this batch's trials, by their records."

    # The status bar's poll, as the window's own thread would deliver it.
    live = cluster_status(window.store)
    assert live is not None
    window.cluster_status.changed.emit(live)
    assert not window.cluster_status.isHidden()
    assert window.cluster_status.text() == "● Ray · 2 nodes · 3 of 3 slots free"
    rows = {panel.nodes.item(r, 0).text(): panel.nodes.item(r, 2).text() for r in range(2)}
    assert rows == {two: "2 of 2", one: "1 of 1"}
    assert panel.nodes_note.text().startswith("2 cluster nodes ran this batch's trials, by their "
                                              "records; free slots live from the cluster at 127.0.0.1:")
    if SCREENSHOT:
        panel.scroll.ensureWidgetVisible(panel.nodes)
        qtbot.wait(50)
        window.grab().save(SCREENSHOT)

    # A node that went away since: said so, its trials kept.
    gone = live.model_copy(update=dict(nodes=[
        NodeStatus(name=two, alive=True, slots=2, free=1),
        NodeStatus(name=one, alive=False, slots=0, free=0)]))
    window.cluster_status.changed.emit(gone)
    rows = {panel.nodes.item(r, 0).text(): (panel.nodes.item(r, 1).text(), panel.nodes.item(r, 2).text())
            for r in range(2)}
    assert rows == {two: ("5", "1 of 2"), one: ("3", "gone")}
    assert window.cluster_status.text() == "● Ray · 1 node · 1 of 2 slots free · 1 gone"


# -- the Run dialog's Cluster field -----------------------------------------------------------

ONE_CASE = """
from engine import evaluation

@evaluation(trials=2)
def greets(c):
    c.send("hello")
"""


def run_dialog(qtbot, path) -> RunDialog:
    made = RunDialog(None, str(path))
    qtbot.addWidget(made)
    return made


def test_the_cluster_field_starts_at_proctor_toml_and_goes_in_the_plan(qtbot, suite):
    d = run_dialog(qtbot, suite(ONE_CASE, DEFAULT_TOML + '\n[cluster]\naddress = "127.0.0.1:6379"\n'))
    assert d.cluster.text() == "127.0.0.1:6379" and d.cluster_note.text() == "proctor.toml says so"
    assert d.summary.text() == "1 case · 1 variant · 1 run · 2 trials · on the Ray cluster at 127.0.0.1:6379"
    d.run_button.click()
    assert d.plan is not None and d.plan.config.cluster.address == "127.0.0.1:6379"


def test_an_empty_cluster_field_runs_on_this_machine(qtbot, suite):
    d = run_dialog(qtbot, suite(ONE_CASE, DEFAULT_TOML + '\n[cluster]\naddress = "127.0.0.1:6379"\n'))
    d.cluster.clear()
    assert "cluster" not in d.summary.text()
    assert d.cluster_note.text() == "this machine, not proctor.toml's"
    d.run_button.click()
    assert d.plan is not None and d.plan.config.cluster is None


def test_a_cluster_typed_in_runs_there_and_a_bad_one_is_one_line(qtbot, suite):
    d = run_dialog(qtbot, suite(ONE_CASE))
    assert d.cluster.text() == "" and d.cluster.placeholderText().startswith("empty: this machine")
    d.cluster.setText("head.example:port")
    d.run_button.click()
    assert d.plan is None and d.result() != RunDialog.DialogCode.Accepted
    assert d.error.text().startswith('Cluster: must be "auto", "HOST:PORT" or "ray://HOST:10001"')
    d.cluster.setText("ray://127.0.0.1:10001")
    d.run_button.click()
    assert d.plan is not None and d.plan.config.cluster.address == "ray://127.0.0.1:10001"


# -- a cluster batch started from the studio ------------------------------------------------

WRITES = """
echo "made" > out.txt
echo '{"type":"command","command":"echo made","exitCode":0,"output":"made"}'
echo '{"type":"finished","reason":"done"}'
"""


@pytest.mark.docker
@pytest.mark.slow
def test_a_batch_run_on_the_cluster_from_the_run_dialog(make_window, qtbot, tmp_path, suite, cluster,
                                                        docker_client):
    """The Run dialog's cluster (from proctor.toml) runs the batch on the nodes: the status bar
    says the cluster, and the batch's Overview names the nodes that ran its trials."""
    import ray

    address = ray.get_runtime_context().gcs_address
    path = suite("""
from pathlib import Path
from engine import evaluation

@evaluation(trials=3, files={".agent/run.sh": Path("agent.sh")})
def writes_out(c):
    c.send("write out.txt")
    c.exec("grep -q made out.txt").to_succeed()
""", DEFAULT_TOML + f'\n[cluster]\naddress = "{address}"\n', files={"agent.sh": WRITES})
    window = make_window(tmp_path / "run.db")
    window.resize(1024, 700)
    dialog = run_dialog(qtbot, path)
    assert dialog.cluster.text() == address
    dialog.run_button.click()
    batch_id = window.start_batch(dialog.plan)
    assert batch_id is not None
    # While it runs: a node holds a slot for each trial the store shows running on it.
    busy: list[ClusterStatus] = []
    qtbot.waitUntil(lambda: bool((s := cluster_status(window.store)) and s.free < 3
                                 and any(n.running for n in s.nodes) and busy.append(s) is None),
                    timeout=120_000)
    assert "running" in busy[0].detail()

    def finished() -> bool:
        summary = window.store.batch_summary(batch_id)
        return summary is not None and summary.status != "running"
    qtbot.waitUntil(finished, timeout=180_000)
    summary = window.store.batch_summary(batch_id)
    assert summary.status == "finished", summary
    hosts = {window.store.get_trial(t.id).host for r in summary.runs for t in r.trials}
    assert hosts <= set(cluster), f"the trials ran on {hosts}, not on the cluster's nodes {cluster}"

    # Ray gives a slot back a beat after its task ended.
    qtbot.waitUntil(lambda: window.cluster_status.check().free == 3, timeout=10_000)
    window.cluster_status.changed.emit(window.cluster_status.check())
    assert window.cluster_status.text() == "● Ray · 2 nodes · 3 of 3 slots free"
    panel = open_batch(window, qtbot, batch_id)
    qtbot.waitUntil(lambda: panel.nodes.rowCount() == len(hosts), timeout=10_000)
    shown = {panel.nodes.item(r, 0).text(): panel.nodes.item(r, 1).text() for r in range(len(hosts))}
    assert set(shown) == hosts and sum(int(n) for n in shown.values()) == 3
    assert all(panel.nodes.item(r, 4).text().startswith(("3 pass", "2 pass", "1 pass"))
               for r in range(len(hosts)))
