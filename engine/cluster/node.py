"""The node's side of a cluster trial: Proctor's own `Trial`, against this node's Docker daemon,
with this node's gateway host and image cache, its events sent home in batches.

`run_trial` is the body of the Ray task (a streaming generator). It yields lists: first a
`Hello` naming the node, then events and, in its place among them, the `Saved` record; the
driver re-emits the events and saves the record, in that order, as a local batch does.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config, Variant, load_config
from ..events import TrialFinished
from ..models import TrialRecord
from ..sandbox.cleanup import owner_id, sweep
from ..sandbox.client import connect
from ..sandbox.gateway import GatewayHost
from ..sandbox.images import Images
from ..spec import Case, load_cases
from ..trial import Trial, TrialPlan
from . import node_name
from .job import Job, sweep_jobs

BATCH_EVENTS = 200  # a batch of events goes home when it holds this many…
BATCH_S = 0.1  # …or this long after its first
STOP_POLL_S = 0.3  # how often the node asks the driver whether its trial was stopped
TEARDOWN_WAIT_S = 120  # a cancelled trial's teardown, before the task gives up on it


@dataclass(frozen=True)
class Ticket:
    """Who the trial is, as the driver planned it; the case is found again by file and id."""

    batch_id: str
    run_id: str
    trial_id: str
    trial: int
    attempt: int
    trigger: str
    case_id: str
    case_file: str  # relative to the job's root
    variant: Variant
    config: Config | None  # only when it has no file (built in Python): else loaded from the job
    queued_epoch: float  # when the trial began waiting for a slot (time.time() on the driver)


@dataclass(frozen=True)
class Hello:
    node_id: str
    node_ip: str
    root: str  # where the job was placed here


@dataclass(frozen=True)
class Saved:
    record: TrialRecord


class _Node:
    """What one worker process keeps across its tasks: its Docker client, image cache and
    gateway host, made once (and the node's sweep run once, for what a killed worker left)."""

    def __init__(self) -> None:
        self.client = connect()
        self.images = Images(self.client)
        self.gateways = GatewayHost()
        self.owner = owner_id()  # this worker's: a killed worker's containers are swept as gone
        # The node's own daemon on a Unix socket shares its files: the gateway's socket mounts.
        self.local = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
        self.cases: dict[tuple[str, str], tuple[Config, list[Case]]] = {}
        sweep(self.client)
        sweep_jobs()


_node: _Node | None = None
_node_lock = threading.Lock()


def _this_node() -> _Node:
    global _node
    with _node_lock:
        if _node is None:
            _node = _Node()
        return _node


def _load(node: _Node, job: Job, ticket: Ticket) -> tuple[Path, Config, Case]:
    root = job.place()
    key = (job.digest, ticket.case_file)
    if key not in node.cases:
        config = load_config(root / job.config) if job.config else (ticket.config or Config())
        node.cases[key] = (config, load_cases([root / ticket.case_file]))
    config, cases = node.cases[key]
    case = next((c for c in cases if c.id == ticket.case_id), None)
    if case is None:
        raise LookupError(f"case {ticket.case_id} is not in {ticket.case_file} on this node")
    return root, config, case


def run_trial(job: Job, ticket: Ticket, host_env: dict[str, str], stops: Any) -> Iterator[list[Any]]:
    """Run one trial here and yield its events home in batches (the Ray task's body).

    `host_env` holds the secret values the trial needs, resolved by the driver: they live in
    this task's memory only (the judge and the mini harness read theirs from the environment,
    so they are set there for the task and removed after it). `stops` is the driver's `Stops`
    actor, asked whether the trial was cancelled."""
    import ray

    node = _this_node()
    raylet = os.getppid()  # the node's raylet started this worker; when it dies the node is lost
    context = ray.get_runtime_context()
    node_id, node_ip = context.get_node_id(), ray.util.get_node_ip_address()
    root, config, case = _load(node, job, ticket)
    yield [Hello(node_id=node_id, node_ip=node_ip, root=str(root))]

    outbox: queue.Queue[Any] = queue.Queue()
    plan = TrialPlan(case=case, variant=ticket.variant, config=config, batch_id=ticket.batch_id,
                     run_id=ticket.run_id, trial_id=ticket.trial_id, trial=ticket.trial,
                     trigger=ticket.trigger, owner=node.owner, attempt=ticket.attempt)
    waited = max(0.0, time.time() - ticket.queued_epoch)
    trial = Trial(plan, node.client, node.images, outbox.put, lambda r: outbox.put(Saved(r)), node.gateways,
                  host_env=host_env, queued_at=time.monotonic() - waited,
                  host_name=node_name(node_id, node_ip), local_docker=node.local)
    before = {name: os.environ.get(name) for name in host_env}
    os.environ.update(host_env)
    worker = threading.Thread(target=trial.run, name=f"trial-{ticket.trial_id}", daemon=True)
    worker.start()
    lost = f"node {node_name(node_id, node_ip)} lost"
    try:
        asked = time.monotonic()
        while True:
            items = _drain(outbox)
            if items and os.getppid() != raylet:  # what the node's death broke, said as such
                items = [_as_lost(item, lost) for item in items]
            if items:
                yield items
            if not worker.is_alive() and outbox.empty():
                return
            if time.monotonic() - asked >= STOP_POLL_S and not trial.aborted.is_set():
                asked = time.monotonic()
                reason = _stopped(stops, ticket.trial_id)
                if reason:
                    trial.cancel(reason)
    finally:  # a ray.cancel or a worker shutdown: the sandbox and gateway go down with the trial
        if worker.is_alive():
            trial.cancel("the batch was interrupted")
            worker.join(TEARDOWN_WAIT_S)
        for name, value in before.items():  # the next task of this worker sees none of them
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _as_lost(item: Any, reason: str) -> Any:
    """A void record or end, sent after this node's raylet died: void because the node was lost."""
    if isinstance(item, Saved) and item.record.outcome == "infra_error" and item.record.failure:
        item.record.failure = item.record.failure.model_copy(update={"reason": reason})
    elif isinstance(item, TrialFinished) and item.outcome == "infra_error" and item.failure:
        item = item.model_copy(update={"failure": item.failure.model_copy(update={"reason": reason})})
    return item


def _drain(outbox: queue.Queue[Any]) -> list[Any]:
    """What the trial sent within BATCH_S of its first item, at most BATCH_EVENTS of it."""
    try:
        items = [outbox.get(timeout=BATCH_S)]
    except queue.Empty:
        return []
    until = time.monotonic() + BATCH_S
    while len(items) < BATCH_EVENTS and not isinstance(items[-1], Saved):
        try:
            items.append(outbox.get(timeout=max(0.0, until - time.monotonic())))
        except queue.Empty:
            break
    return items


def _stopped(stops: Any, trial_id: str) -> str | None:
    """The reason the driver stopped this trial, or None. When the driver is gone Ray ends its
    job's tasks itself (and the sweep removes what they left), so no answer is no stop."""
    import ray

    try:
        return ray.get(stops.reason.remote(trial_id), timeout=10)
    except Exception:  # RayActorError, GetTimeoutError: asked again at the next poll
        return None


class Stops:
    """The driver's actor (one per batch): the trials it stopped, and why. Nodes ask it."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}

    def stop(self, trial_id: str, reason: str) -> None:
        self.reasons.setdefault(trial_id, reason)

    def reason(self, trial_id: str) -> str | None:
        return self.reasons.get(trial_id)
