"""The batches an MCP server starts: on one Engine made at the first run, waited for by id,
and cancelled (their records closed) when the server stops.

A batch runs on its own thread (Engine.start_batch), so `run_cases` answers at once and
`wait_batch` polls `ended` for a bounded time. A batch started elsewhere (a `proctor run`,
the studio) has ended when the store says so.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import docker

from ..batch import BatchHandle, BatchPlan, Engine
from ..cluster.runner import join
from ..models import BatchSummary
from ..sandbox.client import connect
from ..store import Store
from ..store.browse import locate

MAX_RUNNING = 4  # batches one server runs at once: an agent's loop must not fill the machine
KEEP_ENDED = 20  # ended batches whose handles (plans, summary, error) are kept; older ones read the store
CLOSE_S = 60.0  # at exit, how long running batches get to close their records


class BatchRefused(ValueError):
    """A batch the server will not start or wait for; its text is one sentence."""


class Batches:
    """The batches this server started, by id."""

    def __init__(self, store: Store, client: Callable[[], docker.DockerClient] = connect):
        self.store = store
        self._client = client
        self._engine: Engine | None = None
        self._handles: dict[str, BatchHandle] = {}
        self._lock = threading.Lock()

    def _engine_now(self) -> Engine:
        """The engine, made (and the store swept of what dead engines left) at the first run."""
        if self._engine is None:
            engine = Engine(self.store, self._client())
            engine.sweep()
            self._engine = engine
        return self._engine

    def start(self, plan: BatchPlan) -> BatchHandle:
        """Start `plan` in the background; its handle once its batch and runs are stored."""
        with self._lock:
            running = [h.batch_id for h in self._handles.values() if not h.done]
            if len(running) >= MAX_RUNNING:
                raise BatchRefused(f"{len(running)} batches are running already ({', '.join(running)}): "
                                   "wait_batch for one of them first")
            engine = self._engine_now()
            if plan.config.cluster is not None:  # before the batch is stored: no trial could run
                join(plan.config.cluster.address)
            else:
                engine.check_images(plan)
            handle = engine.start_batch(plan)
            self._handles[handle.batch_id] = handle
            ended = [batch_id for batch_id, h in self._handles.items() if h.done]
            for batch_id in ended[:max(0, len(ended) - KEEP_ENDED)]:  # a long session's memory
                del self._handles[batch_id]
        # Store writes are queued: committed now, the batch id the caller gets is in the store
        # for every tool (wait_batch, list_batches) at once.
        self.store.flush()
        return handle

    def batch_id(self, given: str) -> str:
        """The full id of a batch, by id or unique start of one."""
        found = locate(self.store, given)
        if found is None or found.kind != "batch":
            raise BatchRefused(f"no batch {given!r} in the store: list_batches lists them")
        return found.batch_id

    def ended(self, batch_id: str) -> bool:
        """Whether the batch has ended (normally, or by an engine error: `error` says)."""
        handle = self._handles.get(batch_id)
        if handle is None:
            return self.summary(batch_id).status != "running"
        return handle.done

    def error(self, batch_id: str) -> str | None:
        """Why the engine ended a batch this server ran, if it ended by an error."""
        handle = self._handles.get(batch_id)
        if handle is None or not handle.done or handle.error is None:
            return None
        return " ".join(str(handle.error).split())[:1_000] or type(handle.error).__name__

    def summary(self, batch_id: str) -> BatchSummary:
        """The batch as the store has it now."""
        summary = self.store.batch_summary(batch_id)
        if summary is None:
            raise BatchRefused(f"batch {batch_id} is no longer in the store")
        return summary

    def close(self, timeout_s: float = CLOSE_S) -> None:
        """Cancel the batches still running and wait (up to `timeout_s`) for their records,
        so a stopped server leaves every trial closed (`skipped` or void) rather than running."""
        with self._lock:
            running = [h for h in self._handles.values() if not h.done]
        for handle in running:
            handle.cancel("the MCP server stopped")
        deadline = time.monotonic() + timeout_s
        for handle in running:
            try:
                handle.wait(max(deadline - time.monotonic(), 0))
            except Exception:  # the batch ended by an error: it is closed all the same
                pass
