"""The driver's side of a cluster batch: each trial a Ray task needing one `proctor_slot`,
its events re-emitted here through the batch's one `emit` and its record saved by the
batch's one store writer, so a cluster batch is recorded and shown as a local one is.

Scored trials are never retried (max_retries=0). A node that dies voids only its own
trials ("node … lost"); a cancelled batch asks each node to stop its trial (the node tears
down its sandbox and gateway and sends the void record home) and cancels what has not
started (`ray.cancel`).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from .. import keys
from ..events import Event, TrialFinished, TrialStarted
from ..harness import make_harness
from ..harness.cli import harness_secrets
from ..models import Failure, TrialRecord
from ..text import iso_ms, utc_now
from ..trial import TrialPlan
from . import node_name
from .job import Job, pack
from .node import Hello, Saved, Stops, Ticket, run_trial

if TYPE_CHECKING:
    from ..batch import BatchHandle, BatchPlan, Engine

RAY_EXTRA = "proctor[ray]"
SLOT = "proctor_slot"
HEAD = "node:__internal_head__"  # the resource only the head node has (Ray's own name)
CONNECT_TIMEOUT_S = 20.0  # an address that never answers ends in one line, never a hang
PROBE_TIMEOUT_S = 5.0
INTERRUPTED = "the batch was interrupted"


class RayMissing(Exception):
    """`[cluster]` or `--cluster` without Ray installed; the message names the extra."""


class ClusterUnavailable(Exception):
    """The cluster cannot run the batch (unreachable, or no node declares a slot); one line."""


def require_ray() -> Any:
    """The `ray` module, or RayMissing naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise RayMissing(f"[cluster] needs Ray, which is not installed: pip install '{RAY_EXTRA}'") from None
    return ray


class _Share:
    """How many batches of this process use the Ray connection that Proctor made. The last to
    end disconnects: a driver still joined when the cluster's head goes away is ended by Ray
    itself a minute later, and an idle studio must not die with a cluster it no longer uses."""

    lock = threading.Lock()
    users = 0  # batches on a connection Proctor made; one made by the caller is never ended


def connect(address: str, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """Join the Ray cluster at `address` ("auto", "HOST:PORT" or "ray://HOST:PORT") as its
    driver, once per process; ClusterUnavailable when it does not answer within `timeout`.
    Each call that returns is one share of the connection, for `leave` to give back."""
    ray = require_ray()
    _probe(address)  # also when joined already: a second, wrong address is still said
    with _Share.lock:
        if ray.is_initialized():
            if _Share.users:
                _Share.users += 1
            return ray
        _join(ray, address, timeout)
        _Share.users = 1
        return ray


def leave(ray: Any) -> None:
    """Give back one batch's share; the last disconnects, when Proctor made the connection."""
    with _Share.lock:
        if _Share.users == 0:
            return
        _Share.users -= 1
        if _Share.users == 0:
            ray.shutdown()


def _join(ray: Any, address: str, timeout: float) -> None:
    failure: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except BaseException as e:  # said to the user below, in one line
            failure.append(e)

    # On a thread, for the timeout; Ray then warns that it set no SIGTERM handler, which is
    # as wanted (the CLI's own handler stops the batch), so that one warning is not printed.
    said = logging.getLogger("ray._private.worker")
    level = said.level
    said.setLevel(logging.ERROR)
    try:
        joining = threading.Thread(target=init, name="ray-connect", daemon=True)
        joining.start()
        joining.join(timeout)
    finally:
        said.setLevel(level)
    if joining.is_alive():
        raise ClusterUnavailable(f"the Ray cluster at {address} did not answer within {timeout:.0f} s: "
                                 "check [cluster] address and that its head is running (`ray status`)")
    if failure:
        text = str(failure[0]).strip()
        cause = text.splitlines()[0].split(". ")[0][:200] if text else type(failure[0]).__name__
        raise ClusterUnavailable(f"the Ray cluster at {address} is not reachable ({cause}): start its head "
                                 "with `ray start --head` or fix [cluster] address")


def _probe(address: str) -> None:
    """A HOST:PORT that refuses a connection is said at once, not after Ray's own retries."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 10001), timeout=PROBE_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise ClusterUnavailable(f"the Ray cluster at {address} is not reachable "
                                 f"({getattr(e, 'strerror', None) or e}): start its head with "
                                 "`ray start --head` or fix [cluster] address") from None


def join(address: str, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """`connect`, and ClusterUnavailable when no node of the cluster has a slot for a trial."""
    ray = connect(address, timeout)
    if cluster_slots(ray) < 1:
        leave(ray)
        raise ClusterUnavailable(f"no node of the Ray cluster at {address} declares a {SLOT}: "
                                 "join nodes with "
                                 f"`ray start --address … --resources '{{\"{SLOT}\": 8}}'`")
    return ray


def cluster_slots(ray: Any) -> int:
    """The cluster's `proctor_slot`s: every live node's, summed."""
    return int(ray.cluster_resources().get(SLOT, 0))


def secret_env(plan: TrialPlan) -> dict[str, str]:
    """The secret values one trial needs, by variable name, resolved here (environment, then
    keyring): they go to the node in the task's arguments and nowhere else."""
    harness = make_harness(plan.variant)
    wanted = {s.env or name for name, s in {**harness_secrets(harness), **plan.case.secrets}.items()}
    judge = plan.config.judge.api_key_env if plan.config.judge else None
    own = getattr(getattr(harness, "options", None), "api_key_env", None)
    wanted |= {n for n in (judge, own) if isinstance(n, str) and n}
    return {name: value for name in sorted(wanted) if (value := keys.get(name))}


class RemoteTrial:
    """A trial running on a node, as the batch's handle sees it: `cancel` stops it there."""

    def __init__(self, ray: Any, stops: Any, trial_id: str, generator: Any):
        self.ray, self.stops, self.trial_id, self.generator = ray, stops, trial_id, generator
        self.started = False  # the node said hello: cancelling now voids it there
        self.reason: str | None = None

    def cancel(self, reason: str) -> None:
        self.reason = self.reason or reason
        self.stops.stop.remote(self.trial_id, reason)
        if not self.started:  # still waiting for a slot: it never starts
            self.ray.cancel(self.generator)


class ClusterRunner:
    """One batch's trials on the cluster at `address`: `run_one` runs a trial on a node and
    returns its outcome, as the local runner's does; `close` ends the batch's share of Ray."""

    def __init__(self, engine: Engine, plan: BatchPlan, handle: BatchHandle, emit: Callable[[Event], None],
                 address: str):
        self.engine, self.plan, self.handle, self.emit = engine, plan, handle, emit
        self.ray = ray = join(address)
        self.slots = cluster_slots(ray)
        self.job = pack(plan.cases, plan.config)
        self.job_ref = ray.put(self.job)  # sent to each node once, whatever its number of trials
        # On the head, which lives as long as the cluster: a worker node's death must not take it.
        self.stops = ray.remote(Stops).options(num_cpus=0, resources={HEAD: 0.001}).remote()
        # SPREAD: sandboxes go to the least busy node, not packed onto the first one.
        self.task = ray.remote(run_trial).options(resources={SLOT: 1}, num_cpus=0, num_returns="streaming",
                                                  max_retries=0, retry_exceptions=False,
                                                  scheduling_strategy="SPREAD")
        self.queued_epoch = time.time()

    def run_one(self, trial_plan: TrialPlan) -> str | None:
        """Run one trial on a node; its outcome."""
        handle = self.handle
        if handle.cancelled.is_set() or trial_plan.trial_id in handle.skip:
            return self.engine._skip(trial_plan, self.emit)
        config = trial_plan.config
        ticket = Ticket(batch_id=trial_plan.batch_id, run_id=trial_plan.run_id, trial_id=trial_plan.trial_id,
                        trial=trial_plan.trial, attempt=trial_plan.attempt, trigger=trial_plan.trigger,
                        case_id=trial_plan.case.id,
                        case_file=trial_plan.case.file.resolve().relative_to(self.job.root).as_posix(),
                        variant=trial_plan.variant, config=None if config.path else config,
                        queued_epoch=self.queued_epoch)
        remote = RemoteTrial(self.ray, self.stops, trial_plan.trial_id,
                             self.task.remote(self.job_ref, ticket, secret_env(trial_plan), self.stops))
        with handle.lock:
            handle.running[trial_plan.trial_id] = remote  # type: ignore[assignment]
        if handle.cancelled.is_set() or trial_plan.trial_id in handle.skip:
            remote.cancel(INTERRUPTED)
        try:
            return _follow(self.engine, self.ray, self.job, trial_plan, remote, self.emit)
        finally:
            with handle.lock:
                handle.running.pop(trial_plan.trial_id, None)

    def close(self) -> None:
        try:
            self.ray.kill(self.stops)
        finally:
            leave(self.ray)


def _follow(engine: Engine, ray: Any, job: Job, trial_plan: TrialPlan, remote: RemoteTrial,
            emit: Callable[[Event], None]) -> str | None:
    """Re-emit one remote trial's events and save its record, in the order the node sent them;
    a trial whose node died or whose task ended without a record is closed here. Its outcome."""
    hello: Hello | None = None
    saved: str | None = None
    started_at: str | None = None
    try:
        for ref in remote.generator:
            for item in ray.get(ref):
                if isinstance(item, Hello):
                    hello, remote.started = item, True
                elif isinstance(item, Saved):
                    engine._save(_homed(item.record, hello.root if hello else None, job.root))
                    saved = item.record.outcome
                else:
                    if isinstance(item, TrialStarted):
                        started_at = iso_ms(item.at)
                        engine.store.mark_trial_running(
                            trial_plan.trial_id, started_at,
                            host=node_name(hello.node_id, hello.node_ip) if hello is not None else None)
                    emit(item)
    except ray.exceptions.RayError as e:
        if saved:
            return saved
        name = node_name(hello.node_id, hello.node_ip) if hello else None
        if isinstance(e, ray.exceptions.TaskCancelledError) and hello is None:
            return engine._skip(trial_plan, emit)  # cancelled while it waited for a slot
        if remote.reason is not None:
            reason = remote.reason
        elif isinstance(e, ray.exceptions.RayTaskError):  # the node's own code failed
            cause = str(e.cause if getattr(e, "cause", None) else e).strip().splitlines()
            said = (cause[-1] if cause else type(e).__name__)[:200]
            reason = f"node {name or '?'} could not run the trial: {said}"
        else:  # NodeDiedError, WorkerCrashedError, ObjectLostError…: the node or its worker is gone
            reason = f"node {name} lost" if name else "node lost before the trial started"
        return _close(engine, trial_plan, emit, reason, name, started_at)
    if saved is None:  # the task ended without a record: never leave the trial open
        name = node_name(hello.node_id, hello.node_ip) if hello else None
        return _close(engine, trial_plan, emit, remote.reason or "the node sent no record", name, started_at)
    return saved


def _homed(record: TrialRecord, node_root: str | None, driver_root: str) -> TrialRecord:
    """The record as the driver names things: the eval's source under its own paths."""
    if node_root is None:
        return record
    record.source = {(driver_root + path[len(node_root):] if path.startswith(node_root) else path): text
                     for path, text in record.source.items()}
    return record


def _close(engine: Engine, trial_plan: TrialPlan, emit: Callable[[Event], None], reason: str,
           host: str | None, started_at: str | None) -> str:
    """A trial whose node could not send its record: void, naming why and where."""
    record = trial_plan.empty_record(host=host)
    record.outcome, record.failure = "infra_error", Failure(kind="infra", reason=reason)
    record.started_at, record.finished_at = started_at, utc_now()
    engine._save(record)
    emit(TrialFinished(batch_id=trial_plan.batch_id, trial_id=trial_plan.trial_id, case_id=trial_plan.case.id,
                       variant=trial_plan.variant.name, trial=trial_plan.trial, outcome=record.outcome,
                       failure=record.failure))
    return record.outcome
