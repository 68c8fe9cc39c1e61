"""A batch: one run per case per variant, each run's trials in their own sandboxes,
at most `concurrency` at once. Every event goes to the store and to the caller's sink.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable

import docker

from .cluster.runner import ClusterRunner, ClusterUnavailable, RayMissing
from .config import Config, Variant
from .harness import make_harness
from .harness.cli import harness_packages, harness_secrets
from .events import BatchFinished, BatchStarted, Event, EventSink, PhaseStarted, TrialFinished
from .models import MAX_ATTEMPT, BatchSummary, Failure, TrialRecord
from .phases.git_source import GitSources
from .sandbox.cleanup import Swept, owner_alive, owner_id, sweep
from .sandbox.gateway import GatewayHost
from .sandbox.pool import PoolKey, SandboxPool
from .sandbox.reaper import Reaper
from .sandbox.hosts import DockerHost, HostPool, NoLiveHost, connect_host
from .spec import Case, EvalFileError
from .sandbox.client import DockerUnavailable
from .store import Store, StoreError
from .text import iso_ms, utc_now
from .trial import Trial, TrialPlan

ENGINE_STOPPED = "engine stopped"
HEARTBEAT_S = 60
STALE_AFTER_S = 600  # no heartbeat for this long: the batch's process is gone


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(5)}"


def warm_key(plan: TrialPlan) -> tuple[PoolKey, bool] | None:
    """What a trial's sandbox will be made of, when known before it runs (an image by
    reference: a build's tag is known once built), and whether it mounts a gateway."""
    case, defaults = plan.case, plan.config.defaults
    image = case.image or defaults.image
    harness = make_harness(plan.variant)
    if not isinstance(image, str) or harness_packages(harness):
        return None
    gateway = bool(case.allow or case.secrets or harness_secrets(harness))
    return PoolKey(image, defaults.resources(case)), gateway


def detect_trigger(default: str = "cli") -> str:
    """`ci` when the CLI runs under a CI environment."""
    if default == "cli" and any(os.environ.get(v) for v in ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE")):
        return "ci"
    return default


MAX_RETRY_VOID = MAX_ATTEMPT - 1  # a trial void ten times over has a cause no retry fixes


@dataclass
class BatchPlan:
    cases: list[Case]
    variants: list[Variant]
    config: Config
    trials: int | None = None          # overrides each case's trials
    concurrency: int | None = None     # overrides [defaults] concurrency
    trigger: str = "api"
    retry_void: int = 0                # void trials run again up to this many times (never scored ones)
    link: str | None = None            # the CI run that starts it (kept in the batch's config)


@dataclass
class BatchHandle:
    """A batch running on its own thread: wait for it, cancel it or one of its trials,
    hear its events (`listen`). `Engine.start_batch` makes one."""
    batch_id: str
    plans: list[TrialPlan]
    cancelled: threading.Event = field(default_factory=threading.Event)
    running: dict[str, Trial] = field(default_factory=dict)
    skip: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    failed: str | None = None  # why the batch stopped on its own (the store failed)
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)
    _summary: BatchSummary | None = field(default=None, repr=False)
    _error: BaseException | None = field(default=None, repr=False)
    _listeners: list[EventSink] = field(default_factory=list, init=False, repr=False)
    _listening: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _said_all: bool = field(default=False, init=False, repr=False)  # BatchFinished went out

    @property
    def runs(self) -> list[tuple[str, str, str]]:
        """(run_id, case_id, variant) of every run, in order."""
        seen: dict[str, tuple[str, str, str]] = {}
        for p in self.plans:
            seen.setdefault(p.run_id, (p.run_id, p.case.id, p.variant.name))
        return list(seen.values())

    @property
    def done(self) -> bool:
        """The batch has ended, normally or by an error; its events have all been sent."""
        return self._ended.is_set()

    @property
    def error(self) -> BaseException | None:
        """What ended the batch if it did not end normally (None while it runs)."""
        return self._error

    def wait(self, timeout: float | None = None) -> BatchSummary | None:
        """The batch's summary once it ends, or its error raised; None if `timeout` passed
        first. Never cancels."""
        if not self._ended.wait(timeout):
            return None
        if self._error is not None:
            raise self._error
        return self._summary

    def listen(self, sink: EventSink) -> Callable[[], None] | None:
        """Hear every event the batch sends from now on, up to its BatchFinished (called on
        the batch's threads). Returns the call that stops listening, or None when the batch
        has already sent its last event: `sink` would hear nothing."""
        with self._listening:
            if self._said_all:
                return None
            self._listeners.append(sink)

        def unlisten() -> None:
            with self._listening:
                if sink in self._listeners:
                    self._listeners.remove(sink)

        return unlisten

    def _send(self, event: Event) -> None:
        """`event` to every listener; after BatchFinished no listener is taken."""
        with self._listening:
            listeners = list(self._listeners)
            if isinstance(event, BatchFinished):
                self._said_all = True
                self._listeners.clear()
        for listener in listeners:
            listener(event)

    def cancel_trial(self, trial_id: str, reason: str) -> bool:
        """Stop one trial: a running one ends as infra_error, a waiting one is skipped."""
        if trial_id not in {p.trial_id for p in self.plans}:
            return False
        with self.lock:
            self.skip.add(trial_id)
            trial = self.running.get(trial_id)
        if trial is not None:
            trial.cancel(reason)
        return True

    def cancel(self, reason: str = "the batch was interrupted") -> None:
        self.cancelled.set()
        with self.lock:
            for trial in list(self.running.values()):
                trial.cancel(reason)

    def fail(self, reason: str) -> None:
        """Stop the batch because it cannot go on (once): its status becomes failed."""
        with self.lock:
            if self.failed is not None:
                return
            self.failed = reason
        self.cancel(reason)

    def _end(self, summary: BatchSummary | None, error: BaseException | None = None) -> None:
        with self._listening:  # ended without its BatchFinished (an error): no more events come
            self._said_all = True
            self._listeners.clear()
        self._summary, self._error = summary, error
        self._ended.set()


class Engine:
    """Runs batches on one Docker daemon and records them in one store."""

    def __init__(self, store: Store, client: docker.DockerClient, owner: str | None = None):
        self.store = store
        self.client = client
        self.owner = owner or owner_id()
        self.local = DockerHost("local", client, slots=1)
        self.images = self.local.images
        self._remote: dict[str, DockerHost] = {}  # [[hosts]] connected once, by url
        self.gateways = GatewayHost()  # one event loop serves every trial's gateway

    def check_images(self, plan: BatchPlan) -> None:
        """Referenced images must exist (or be pullable) before anything runs."""
        for case in plan.cases:
            image = case.image or plan.config.defaults.image
            if image is None:
                raise EvalFileError("no image: set image= here or [defaults] image in proctor.toml",
                                    case.file, case.line)
            if isinstance(image, str):
                try:
                    self.images.check_reference(image)
                except Exception as e:  # ImageMissing carries the sentence to print
                    raise EvalFileError(str(e), case.file, case.line) from None

    def sweep(self, everything: bool = False) -> Swept:
        """Close what a process that is gone left behind: its containers, and the
        trials and batches the store still shows as running (`infra_error`,
        "engine stopped"). `everything` also removes live owners' containers."""
        swept = sweep(self.client, everything=everything)
        # Gone: its process is not alive (same host), or it has not beaten for 10 minutes
        # (a process on another host, whose pid we cannot check).
        silent = set(self.store.silent_batches(iso_ms(int((time.time() - STALE_AFTER_S) * 1000))))
        dead = {b for b, owner in self.store.running_batches()
                if owner != self.owner and (not owner_alive(owner) or b in silent)}
        unfinished = {t: (batch, owner) for t, batch, owner in self.store.unfinished_trials()}
        closed = {t for t in swept.trials or [] if t in unfinished}
        closed |= {t for t, (batch, owner) in unfinished.items()
                   if owner != self.owner and (not owner_alive(owner) or batch in dead)}
        for trial_id in sorted(closed):
            self.store.close_trial_as_infra(trial_id, ENGINE_STOPPED, utc_now())
        for batch_id in sorted(dead):
            self.store.finish_batch(batch_id, "failed", utc_now())
        self.store.flush()
        swept.trials = sorted(closed)
        return swept

    def plan(self, plan: BatchPlan) -> BatchHandle:
        # Before anything runs: a store that takes no write would lose every record.
        self.store.check_writable()
        batch_id = new_id("b")
        plans: list[TrialPlan] = []
        self.store.create_batch(batch_id, plan.trigger, self.owner, utc_now(),
                                config={"link": plan.link} if plan.link else None)
        position = 0
        for case in plan.cases:
            for variant in plan.variants:
                run_id = new_id("r")
                self.store.create_run(run_id, batch_id, case.id, variant.name, position)
                position += 1
                count = plan.trials or case.trials or plan.config.defaults.trials
                for n in range(1, count + 1):
                    trial_plan = TrialPlan(case=case, variant=variant, config=plan.config, batch_id=batch_id,
                                           run_id=run_id, trial_id=new_id("t"), trial=n,
                                           trigger=plan.trigger, owner=self.owner)
                    plans.append(trial_plan)
                    self.store.create_trial(trial_plan.empty_record(), self.owner)
        return BatchHandle(batch_id, plans)

    def start_batch(self, plan: BatchPlan, sink: EventSink | None = None,
                    stopped: Callable[[], bool] | None = None) -> BatchHandle:
        """Plan a batch and run it on its own thread. Returns at once: the batch's id and
        runs are known and stored, its trials go on; `sink` hears every event.

        `stopped` is asked once the batch is planned (a big batch takes a while): if a stop
        came meanwhile (a Ctrl-C), the batch starts cancelled and every trial is skipped."""
        handle = self.plan(plan)
        if stopped is not None and stopped():
            handle.cancel()

        def work() -> None:
            try:
                summary = self._run(plan, handle, sink)
            except BaseException as e:  # handed to whoever waits
                handle._end(None, e)
            else:
                handle._end(summary)

        threading.Thread(target=work, name=f"batch-{handle.batch_id}", daemon=True).start()
        return handle

    def run(self, plan: BatchPlan, sink: EventSink | None = None) -> BatchSummary:
        """Run a batch and wait for it; its error, if one ended it, is raised here. An
        interrupt of the wait (Ctrl-C) stops the batch and waits for it to close first."""
        handle = self.start_batch(plan, sink)
        try:
            summary = handle.wait()
        except BaseException:
            if not handle.done:  # the batch thread dies with the interpreter: never leave it unclosed
                handle.cancel()
                handle._ended.wait()
            raise
        assert summary is not None  # no timeout: wait returns only once the batch ended
        return summary

    def _run(self, plan: BatchPlan, handle: BatchHandle, sink: EventSink | None) -> BatchSummary:
        """Run every trial of a planned batch and wait for them."""
        def emit(event: Event) -> None:
            self.store.add_event(event)
            if isinstance(event, PhaseStarted):  # the browser shows a running trial's phase
                self.store.set_trial_phase(event.trial_id, event.phase)
            if sink is not None:
                sink(event)
            handle._send(event)

        heartbeat = threading.Event()

        def beat() -> None:  # lets a later start on another host tell a live batch from a dead one
            while not heartbeat.wait(HEARTBEAT_S):
                self.store.heartbeat(handle.batch_id, utc_now())

        threading.Thread(target=beat, name=f"heartbeat-{handle.batch_id}", daemon=True).start()

        def store_failed(error: StoreError) -> None:
            # On the writer thread: stopping trials calls Docker, so do it on another.
            if handle.failed is None:
                threading.Thread(target=handle.fail, args=(str(error),), daemon=True,
                                 name=f"stop-{handle.batch_id}").start()

        self.store.add_error_listener(store_failed)
        emit(BatchStarted(batch_id=handle.batch_id, trigger=plan.trigger,
                          runs=len({p.run_id for p in handle.plans}), trials=len(handle.plans)))
        queued_at = time.monotonic()  # waiting for a slot starts now, for every trial
        sources = GitSources()  # each git source is fetched once, for every trial of the batch

        def run_one(trial_plan: TrialPlan) -> str | None:
            """Run one trial; its outcome."""
            if handle.cancelled.is_set() or trial_plan.trial_id in handle.skip:
                if warm is not None:
                    warm.drop(trial_plan.trial_id)
                return self._skip(trial_plan, emit)
            try:
                host = hosts.acquire(handle.cancelled)
            except NoLiveHost as e:
                return self._skip(trial_plan, emit, void=str(e))
            trial = Trial(trial_plan, host.client, host.images, emit, self._save, self.gateways,
                          queued_at=queued_at, host_name=host.name, sources=sources)
            trial.reaper = reaper  # its slot is free once the record is committed
            trial.pool = warm
            with handle.lock:
                handle.running[trial_plan.trial_id] = trial
            if handle.cancelled.is_set():
                trial.cancel("the batch was interrupted")
            self.store.mark_trial_running(trial_plan.trial_id, trial.started_at)  # after its slot wait
            record = None
            try:
                record = trial.run()
            finally:
                with handle.lock:
                    handle.running.pop(trial_plan.trial_id, None)
                hosts.release(host, failed=record is None or record.outcome == "infra_error")
            return record.outcome

        status = "finished"
        cluster: ClusterRunner | None = None
        reaper: Reaper | None = None
        warm: SandboxPool | None = None
        try:
            try:  # [cluster]: each trial a Ray task on a node (engine.cluster); else these hosts
                cluster = ClusterRunner(self, plan, handle, emit, plan.config.cluster.address) \
                    if plan.config.cluster else None
                hosts = self._pool(plan) if cluster is None else None
            except (DockerUnavailable, ClusterUnavailable, RayMissing) as e:  # no trial can run: each is void
                handle.failed = str(e)
                for trial_plan in handle.plans:
                    self._skip(trial_plan, emit, void=str(e))
                raise
            concurrency = plan.concurrency or (cluster.slots if cluster else hosts.slots)  # type: ignore[union-attr]
            one = cluster.run_one if cluster else run_one
            # Ended trials' containers go in the background, at most `concurrency` pending.
            reaper = Reaper(pending=concurrency)
            warm = self._warm_pool(plan, handle, concurrency) if cluster is None else None
            with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="trial") as pool:
                todo = list(handle.plans)
                for retry in range(plan.retry_void + 1):
                    if retry:  # the void ones again, each a new record of the same trial number
                        todo = [self._again(p, handle) for p in todo]
                        self._plan_warm(warm, todo)
                    outcomes = [f.result() for f in [pool.submit(one, p) for p in todo]]
                    todo = [p for p, outcome in zip(todo, outcomes) if outcome == "infra_error"]
                    if not todo or handle.cancelled.is_set() or handle.failed:
                        break
        finally:
            if warm is not None:  # no trial claims after this: the unclaimed ones go
                warm.close()
            if reaper is not None:  # the batch ends once every container it made is gone
                reaper.close()
            heartbeat.set()
            self.store.remove_error_listener(store_failed)
            sources.close()
            if cluster is not None:
                cluster.close()
            if handle.failed:
                status = "failed"
            elif handle.cancelled.is_set():
                status = "interrupted"
            emit(BatchFinished(batch_id=handle.batch_id, status=status))
            self.store.finish_batch(handle.batch_id, status, utc_now())
            self.store.flush()
        summary = self.store.batch_summary(handle.batch_id)
        assert summary is not None
        return summary

    def _pool(self, plan: BatchPlan) -> HostPool:
        """The hosts this batch runs on: [[hosts]] from proctor.toml, or this Docker alone."""
        if not plan.config.hosts:
            self.local.slots = plan.concurrency or plan.config.defaults.concurrency
            return HostPool([self.local])
        base = plan.config.path.parent if plan.config.path else None
        hosts = []
        for entry in plan.config.hosts:
            host = self._remote.get(entry.url)
            if host is None or not host.alive:
                host = DockerHost(entry.url, connect_host(entry, base), slots=entry.slots)
                self._remote[entry.url] = host
            hosts.append(host)
        return HostPool(hosts)

    def _warm_pool(self, plan: BatchPlan, handle: BatchHandle, concurrency: int) -> SandboxPool | None:
        """Containers started ahead for the trials on this Docker ([defaults] warm, else the
        batch's concurrency); None when warm = 0 or [[hosts]] run them."""
        warm = concurrency if plan.config.defaults.warm is None else plan.config.defaults.warm
        if warm == 0 or plan.config.hosts:
            return None
        pool = SandboxPool(self.local.client, handle.batch_id, self.owner, warm)
        self._plan_warm(pool, handle.plans)
        return pool

    @staticmethod
    def _plan_warm(pool: SandboxPool | None, plans: list[TrialPlan]) -> None:
        """Each trial that can start warm, in the order the trials will start."""
        if pool is None:
            return
        keys: dict[str, tuple[PoolKey, bool] | None] = {}
        for p in plans:  # a run's trials share theirs
            if p.run_id not in keys:
                keys[p.run_id] = warm_key(p)
            if (known := keys[p.run_id]) is not None:
                pool.plan(p.trial_id, *known)

    def _save(self, record: TrialRecord) -> None:
        """Save a trial's record and return once it is committed, so "saved" is said only then."""
        self.store.save_trial(record).result()

    def _again(self, void: TrialPlan, handle: BatchHandle) -> TrialPlan:
        """A void trial's next attempt (`--retry-void`): stored now, queued like the others."""
        again = replace(void, trial_id=new_id("t"), attempt=void.attempt + 1)
        self.store.create_trial(again.empty_record(), self.owner)
        with handle.lock:
            handle.plans.append(again)
        return again

    def _skip(self, trial_plan: TrialPlan, emit: Callable[[Event], None], void: str | None = None) -> str:
        """A trial that never started: skipped, or void when no host was left to run it."""
        record = trial_plan.empty_record()
        record.outcome = "infra_error" if void else "skipped"
        record.failure = Failure(kind="infra", reason=void) if void else None
        record.finished_at = utc_now()
        self.store.save_trial(record)
        emit(TrialFinished(batch_id=trial_plan.batch_id, trial_id=trial_plan.trial_id,
                           case_id=trial_plan.case.id, variant=trial_plan.variant.name,
                           trial=trial_plan.trial, outcome=record.outcome, failure=record.failure))
        return record.outcome
