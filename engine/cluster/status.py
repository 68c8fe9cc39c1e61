"""The Ray cluster this process drives, as the studio's status bar and a batch's Overview show
it: each node by name (`node_name`), alive or gone, its `proctor_slot`s and how many are free
now, and the trials the store shows running on it.

`cluster_status()` asks Ray's core API only, no dashboard: `ray.nodes()` for each node's
liveness and declared slots, and `ray._private.state.available_resources_per_node()` (one GCS
call, what `ray.available_resources()` sums) for the free ones. It is polled every few
seconds, so it never imports Ray (a process that never imported it is connected to no
cluster), never raises, and never waits more than `ANSWER_S`: a head that went away makes
Ray's calls block for a minute, so they run on a helper thread and a cluster that does not
answer in time is a status, not a hang.

`batch_nodes()` reads the same per node from a batch's stored records (`host`), so a
finished, imported or replayed batch shows its nodes with no cluster at all.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from engine.cluster import node_name
from engine.text import plural

SLOT = "proctor_slot"  # the custom resource a node declares as its concurrency
ANSWER_S = 2.0  # the longest a poll waits for Ray before saying the cluster does not answer
TOOLTIP_NODES = 30  # nodes named in the tooltip; the rest are counted
# node_name's shape (an IPv4 or IPv6 address, "/", the head of Ray's hex node id): how a record
# made on a cluster node is told from a [[hosts]] one (`local`, `ssh://…`, `tcp://…`).
NODE_NAME = re.compile(r"^[0-9A-Fa-f.:\[\]]+/[0-9a-f]{8}$")

_asking = threading.Lock()  # one question to Ray at a time: a hung one is not asked again


class NodeStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str  # node_name(node_id, node_ip): as records, the status bar and the Overview name it
    alive: bool
    slots: int  # the proctor_slots it declared (Ray forgets those of a node that is gone: 0)
    free: int  # of those, not held by a running task now
    running: list[str] = Field(default_factory=list)  # trial ids the store shows running on it


class ClusterStatus(BaseModel):
    """One look at the cluster. `error` is set when it stopped answering: `nodes` is then empty."""

    model_config = ConfigDict(frozen=True)

    address: str  # the head's GCS address
    nodes: list[NodeStatus] = Field(default_factory=list)  # those with slots, and those gone
    error: str | None = None

    @property
    def alive(self) -> list[NodeStatus]:
        return [n for n in self.nodes if n.alive]

    @property
    def slots(self) -> int:
        return sum(n.slots for n in self.alive)

    @property
    def free(self) -> int:
        return sum(n.free for n in self.alive)

    def line(self) -> str:
        """`Ray · 2 nodes · 5 of 8 slots free`: the status bar's words."""
        if self.error:
            return f"Ray · {self.error}"
        gone = len(self.nodes) - len(self.alive)
        words = [f"Ray · {plural(len(self.alive), 'node')}",
                 f"{self.free} of {plural(self.slots, 'slot')} free"]
        return " · ".join(words + ([f"{gone} gone"] if gone else []))

    def detail(self) -> str:
        """One line per node, for a tooltip: name, slots and free, trials running, or gone."""
        lines = [f"Ray cluster at {self.address}"]
        if self.error:
            return "\n".join([*lines, self.error])
        for node in self.nodes[:TOOLTIP_NODES]:
            if node.alive:
                running = f" · {plural(len(node.running), 'trial')} running" if node.running else ""
                lines.append(f"{node.name} · {node.free} of {plural(node.slots, 'slot')} free{running}")
            else:
                lines.append(f"{node.name} · gone")
        if len(self.nodes) > TOOLTIP_NODES:
            lines.append(f"and {plural(len(self.nodes) - TOOLTIP_NODES, 'more node')}")
        return "\n".join(lines)


def is_node_name(host: str | None) -> bool:
    """True for a record's `host` that names a cluster node, not a [[hosts]] daemon."""
    return bool(host and NODE_NAME.match(host))


def cluster_status(store: Any | None = None) -> ClusterStatus | None:
    """The cluster this process is connected to (`ray.init` was called), or None: not
    connected, or Ray not installed. `store` (an engine Store) names the trials running on
    each node. Never raises; a cluster that went away is a status with `error` set."""
    ray = sys.modules.get("ray")  # never imported here: then no ray.init in this process either
    if ray is None or not _connected(ray):
        return None
    deadline = time.monotonic() + ANSWER_S
    if not _asking.acquire(timeout=ANSWER_S):  # another poll's question still hangs
        return _not_answering(ray)
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            answer["nodes"] = _nodes(ray)
        except Exception as e:  # noqa: BLE001 — a cluster going away raises all sorts
            answer["error"] = e
        finally:
            _asking.release()

    asking = threading.Thread(target=ask, name="cluster-status", daemon=True)
    asking.start()
    asking.join(max(0.0, deadline - time.monotonic()))
    if asking.is_alive():
        return _not_answering(ray)
    if "error" in answer:
        return ClusterStatus(address=_address(ray),
                             error=f"the cluster stopped answering ({_first_line(answer['error'])})")
    running = _running_hosts(store) if store is not None else {}
    return ClusterStatus(address=_address(ray), nodes=[
        node.model_copy(update=dict(running=running.get(node.name, []))) for node in answer["nodes"]])


def _connected(ray: Any) -> bool:
    try:
        return bool(ray.is_initialized())
    except Exception:  # noqa: BLE001 — a half-imported or shutting-down Ray is not a cluster
        return False


def _address(ray: Any) -> str:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001
        return "?"


def _not_answering(ray: Any) -> ClusterStatus:
    return ClusterStatus(address=_address(ray),
                         error=f"the cluster does not answer (waited {ANSWER_S:g}s)")


def _first_line(error: BaseException) -> str:
    words = str(error).strip().splitlines()
    return (words[0] if words else type(error).__name__)[:160]


def _nodes(ray: Any) -> list[NodeStatus]:
    """Nodes that declare slots, and every node that is gone, in name order. A live node with no
    slot (the head, usually) runs no trial and is left out."""
    from ray._private import state  # noqa: PLC0415 — Ray is imported already (cluster_status)

    free = state.available_resources_per_node()  # a resource fully held is absent: 0 free
    nodes = []
    for node in ray.nodes():
        node_id, alive = str(node.get("NodeID", "")), bool(node.get("Alive"))
        slots = int((node.get("Resources") or {}).get(SLOT, 0))
        if alive and not slots:
            continue
        nodes.append(NodeStatus(
            name=node_name(node_id, str(node.get("NodeManagerAddress", "?"))), alive=alive,
            slots=slots if alive else 0,
            free=int((free.get(node_id) or {}).get(SLOT, 0)) if alive else 0))
    return sorted(nodes, key=lambda n: (not n.alive, n.name))


_RUNNING = """SELECT id, json_extract(record, '$.host') AS host FROM trial
              WHERE status = 'running' AND json_valid(record)"""


def _running_hosts(store: Any) -> dict[str, list[str]]:
    """Running trials by the node their record names; {} when the store cannot be read."""
    by_host: dict[str, list[str]] = {}
    try:
        with store._read() as conn:  # noqa: SLF001 — a read-only query, as browse.py's
            for row in conn.execute(text(_RUNNING)):
                if isinstance(row.host, str):
                    by_host.setdefault(row.host, []).append(row.id)
    except Exception:  # noqa: BLE001 — the poll shows slots without trials rather than nothing
        return {}
    return by_host


class NodeTrials(BaseModel):
    """A node's share of one batch, from the batch's stored records."""

    name: str
    outcomes: dict[str, int] = Field(default_factory=dict)  # pass, fail, infra_error, skipped
    running: int = 0

    @property
    def trials(self) -> int:
        return sum(self.outcomes.values()) + self.running


_BATCH_HOSTS = """
    SELECT t.id, t.status, t.outcome, {host} AS host FROM trial t
    WHERE t.batch_id = :batch AND t.status != 'queued'
      AND t.id NOT IN (SELECT value FROM json_each(:skip))"""
_HOST_OF = "json_extract(t.record, '$.host')"


class TrialHost(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    status: str  # running, done
    outcome: str | None
    host: str | None


def batch_hosts(store: Any, batch_id: str, skip: Iterable[str] = ()) -> list[TrialHost]:
    """Each started trial of a batch with the host its record names, but those in `skip`
    (finished trials read before: a finished record does not change). SQLite takes `host` out
    of each record; a record that does not read has none. Raises StoreError as the store does."""
    params = {"batch": batch_id, "skip": json.dumps(list(skip))}
    with store._read() as conn:  # noqa: SLF001 — a read-only query, as browse.py's
        try:
            rows = list(conn.execute(text(_BATCH_HOSTS.format(host=_HOST_OF)), params))
        except sa_exc.OperationalError:  # a damaged record fails the statement: check each
            checked = f"CASE WHEN json_valid(t.record) THEN {_HOST_OF} END"
            rows = list(conn.execute(text(_BATCH_HOSTS.format(host=checked)), params))
    return [TrialHost(id=r.id, status=r.status, outcome=r.outcome,
                      host=r.host if isinstance(r.host, str) else None) for r in rows]


def batch_nodes(trials: Iterable[TrialHost]) -> list[NodeTrials]:
    """The cluster nodes a batch's trials ran on, in name order, each with its trials counted by
    outcome and those running now; [] for a batch that ran on no cluster node."""
    nodes: dict[str, NodeTrials] = {}
    for trial in trials:
        if not is_node_name(trial.host):
            continue
        node = nodes.setdefault(trial.host or "", NodeTrials(name=trial.host or ""))
        if trial.status == "running" or trial.outcome is None:
            node.running += 1
        else:
            node.outcomes[trial.outcome] = node.outcomes.get(trial.outcome, 0) + 1
    return [nodes[name] for name in sorted(nodes)]
