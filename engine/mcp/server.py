"""The MCP tools over one folder of eval files and one store, served over stdio by the SDK's
MCPServer: their input and output schemas come from the typed signatures below.

While it serves, the SDK points fd 1 at stderr and answers from a private copy of the
real stdout, so nothing an eval file, a trial or the engine prints can corrupt the
channel. A mistake (a bad eval file, a path outside the folder, an unknown id) is a tool
error of one sentence; the server keeps serving.
"""

from __future__ import annotations

import functools
import inspect
import logging
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from ..batch import BatchPlan
from ..config import find_config, load_config
from ..groups import failure_groups as groups_of
from ..options import MAX_CONCURRENCY, MAX_TRIALS, one_line
from ..spec import EvalFileError, find_eval_files, load_cases, load_eval_file
from ..store import Store
from ..store.browse import locate
from ..store.search import MAX_QUERY_CHARS
from .batches import Batches
from .folder import Folder
from .views import (GROUP_TRIALS, ITEM_CHARS, REPLY_BYTES, BatchList, BatchView, GroupList, GroupView, SearchReply,
                    TrialView, batch_list, batch_view, item_json, size, trial_head)

log = logging.getLogger(__name__)

WAIT_MAX_S = 600  # one wait_batch call; the agent calls again for a longer batch
POLL_S = 0.25
INSTRUCTIONS = """\
Proctor runs evals of AI coding agents in Docker sandboxes and stores every trial's record.
list_cases shows the eval files and cases under this server's folder; run_cases starts a
batch and returns its id at once; wait_batch waits for it (status `running` means the wait
ended first: call it again); show_trial reads one trial's outcome, checks with their
evidence and its trajectory page by page. Paths are relative to the server's folder;
paths outside it are refused."""

T = TypeVar("T", bound=Callable[..., Any])


def _one_sentence(fn: T) -> T:
    """Any failure of a tool as a tool error of one line, which the caller reads; the SDK
    would say only "Error executing tool" of an exception it did not expect."""
    @functools.wraps(fn)
    def sync(*args: Any, **kwargs: Any) -> Any:
        with _as_tool_error():
            return fn(*args, **kwargs)

    @functools.wraps(fn)
    async def coroutine(*args: Any, **kwargs: Any) -> Any:
        with _as_tool_error():
            return await fn(*args, **kwargs)

    return coroutine if inspect.iscoroutinefunction(fn) else sync  # type: ignore[return-value]


@contextmanager
def _as_tool_error() -> Iterator[None]:
    try:
        yield
    except ToolError:
        raise
    except Exception as e:
        raise ToolError(_said(e)) from None


def _said(error: Exception) -> str:
    """What went wrong, in one line: the engine's own sentence, or the error's type and text."""
    if isinstance(error, (EvalFileError, ValueError, LookupError)) or type(error).__module__.startswith("engine"):
        return one_line(str(error))
    log.exception("a tool failed")  # not a sentence of ours: its traceback goes to stderr
    return one_line(f"{type(error).__name__}: {error}")


# -- what the tools return, besides views.py ------------------------------------------------


class CaseView(BaseModel):
    id: str
    line: int
    trials: int | None  # None: the config's default
    tags: list[str]


class EvalFileView(BaseModel):
    file: str  # relative to the server's folder
    config: str | None  # the proctor.toml its runs use
    variants: list[str]
    cases: list[CaseView]


class CaseList(BaseModel):
    folder: str
    files: list[EvalFileView]
    cut: str | None = None


class RunView(BaseModel):
    run_id: str
    case_id: str
    variant: str


class RunStarted(BaseModel):
    batch_id: str
    trigger: str
    runs: list[RunView]
    trials: int
    next: str


class ProctorServer:
    """The tools over `folder` and `store`; `run` serves them on stdio until the client
    closes, `close` then ends the batches still running."""

    def __init__(self, folder: Path, store: Store, config: Path | None = None,
                 batches: Batches | None = None):
        self.folder = Folder(folder)
        self.store = store
        self.config = config  # --config, given by whoever started the server: not held to the folder
        self.batches = batches or Batches(store)
        self.mcp = MCPServer(name="proctor", version=_version(), instructions=INSTRUCTIONS,
                             log_level="WARNING")
        # Hints for a client deciding what to ask its user about: reading the store changes
        # nothing; a run starts sandboxes; listing cases loads the eval files, which are Python
        # run on this host, so it is no read-only tool a client may approve unasked.
        reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
        for tool, hints in ((self.list_cases, ToolAnnotations(read_only_hint=False, destructive_hint=False)),
                            (self.run_cases, ToolAnnotations(read_only_hint=False, destructive_hint=False)),
                            (self.wait_batch, reads), (self.list_batches, reads), (self.show_trial, reads),
                            (self.search, reads), (self.failure_groups, reads)):
            self.mcp.add_tool(_one_sentence(tool), annotations=hints)

    def run(self) -> None:
        anyio.run(self.mcp.run_stdio_async)

    def close(self) -> None:
        self.batches.close()

    # -- tools ------------------------------------------------------------------------------

    def list_cases(self, folder: Annotated[str, Field(description="a folder or eval file inside the "
                                                                  "server's folder")] = ".") -> CaseList:
        """The eval files (*.eval.py) under a folder and their cases: id, line, trials, tags,
        and the variants (proctor.toml) they run under. A broken eval file is an error naming
        its file and line."""
        where = self.folder.inside(folder)
        files = [self.folder.check(f) for f in find_eval_files([where])]
        views: list[EvalFileView] = []
        used = 0
        for path in files:
            cases = load_eval_file(path)
            config_path = self.config or find_config(path)
            config = load_config(config_path)
            view = EvalFileView(
                file=self.folder.relative(path), config=self._shown(config_path),
                variants=[v.name for v in config.variants],
                cases=[CaseView(id=c.id, line=c.line, trials=c.trials, tags=c.tags) for c in cases])
            used += size(view)
            if used > REPLY_BYTES - 1_000:
                return CaseList(folder=self.folder.relative(where), files=views,
                                cut=f"{len(views)} of {len(files)} eval files fit one reply: "
                                    "list a folder inside this one")
            views.append(view)
        return CaseList(folder=self.folder.relative(where), files=views)

    def run_cases(
        self,
        paths: Annotated[list[str], Field(min_length=1, max_length=100,
                                          description="eval files or folders inside the server's folder")],
        cases: Annotated[list[str] | None, Field(min_length=1, max_length=1_000,
                                                 description="only these case ids (default: all)")] = None,
        variants: Annotated[list[str] | None, Field(min_length=1, max_length=100,
                                                    description="only these variants (default: all)")] = None,
        trials: Annotated[int | None, Field(ge=1, le=MAX_TRIALS,
                                            description="trials per run (default: the eval file's)")] = None,
        concurrency: Annotated[int | None, Field(ge=1, le=MAX_CONCURRENCY,
                                                 description="trials at once (default: proctor.toml's)")] = None,
    ) -> RunStarted:
        """Start a batch (one run per case per variant) in Docker and return its id at once;
        wait_batch waits for it. Its trials carry the trigger `mcp`."""
        files = [self.folder.check(f) for f in find_eval_files([self.folder.inside(p) for p in paths])]
        config = load_config(self.config or find_config(files[0]))
        plan = BatchPlan(cases=load_cases(list(files), cases), variants=config.select_variants(variants),
                         config=config, trials=trials, concurrency=concurrency, trigger="mcp")
        handle = self.batches.start(plan)
        return RunStarted(batch_id=handle.batch_id, trigger="mcp",
                          runs=[RunView(run_id=r, case_id=c, variant=v) for r, c, v in handle.runs],
                          trials=len(handle.plans),
                          next=f"wait_batch(batch_id={handle.batch_id!r})")

    async def wait_batch(
        self,
        batch_id: Annotated[str, Field(description="a batch id, or a unique start of one")],
        timeout_s: Annotated[float, Field(ge=0, le=WAIT_MAX_S, description="at most this long")] = 60,
    ) -> BatchView:
        """Wait for a batch to end, at most timeout_s seconds, and return it as
        `proctor run --json` prints it: status, runs, each run's distribution and trials.
        Status `running` means the wait ended first: call again."""
        full = await anyio.to_thread.run_sync(self.batches.batch_id, batch_id)
        deadline = anyio.current_time() + timeout_s
        # Polled from the event loop, not blocked on in a thread: a client that goes away
        # cancels the wait at once.
        while not await anyio.to_thread.run_sync(self.batches.ended, full):
            if anyio.current_time() >= deadline:
                break
            await anyio.sleep(min(POLL_S, max(deadline - anyio.current_time(), 0)))
        view = batch_view(await anyio.to_thread.run_sync(self.batches.summary, full))
        view.error = self.batches.error(full)
        return view

    def list_batches(self, limit: Annotated[int, Field(ge=1, le=50)] = 10) -> BatchList:
        """The newest batches in the store, as `proctor ls --json` lists them."""
        return batch_list(self.store.list_batches(limit=limit))

    def show_trial(
        self,
        trial_id: Annotated[str, Field(description="a trial id, or a unique start of one")],
        offset: Annotated[int, Field(ge=0, description="the first trajectory item of the page")] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="trajectory items in the page")] = 50,
        check: Annotated[int | None, Field(ge=0, description="show only this check (its index), "
                                                              "with its evidence whole")] = None,
    ) -> TrialView:
        """One trial's stored, redacted record: outcome, failure, turns, checks with their
        evidence, and a page of its trajectory (next_offset reads on; pages past the first
        leave out turns and checks). The reply stays within 90 KB; `cut` says what was left
        out and how to get it."""
        record = self.store.get_trial_outline(trial_id)
        if record is None:
            raise ToolError(f"no trial {trial_id!r} in the store: wait_batch or list_batches "
                            "lists a batch's trials")
        view = trial_head(record, check, overview=offset == 0)
        order = [run.start + i for run in self.store.trajectory_layout(record.id)
                 for i in range(len(run.kinds))]  # turn order; a turn's items as stored
        wanted = order[offset:offset + limit]
        items = self._items(record.id, wanted)
        budget = REPLY_BYTES - size(view) - 1_000
        page: list[dict[str, Any]] = []
        used, any_cut = 0, False
        for index, item in enumerate(items, offset):
            shown, was = item_json(index, item)
            used += size(shown) + 1
            if page and used > budget:
                view.cut.append(f"trajectory: the page ends at item {index} to keep the reply within "
                                f"{REPLY_BYTES // 1000} KB: show_trial(trial_id, offset={index}) reads on")
                break
            any_cut |= was
            page.append(shown)
        if any_cut:
            view.cut.append(f"trajectory: the items marked cut had texts past {ITEM_CHARS:,} characters "
                            "cut here; `proctor show TRIAL --json` prints them as stored")
        end = offset + len(page)
        view.trajectory = view.trajectory.model_copy(update={
            "total": len(order), "offset": offset, "items": page,
            "next_offset": end if end < len(order) else None})
        return view

    def _items(self, trial_id: str, positions: list[int]) -> list[Any]:
        """The items at `positions`, read a run of consecutive positions at a time."""
        items: list[Any] = []
        start = 0
        while start < len(positions):
            stop = start + 1
            while stop < len(positions) and positions[stop] == positions[stop - 1] + 1:
                stop += 1
            items += self.store.trajectory_items(trial_id, positions[start], positions[stop - 1] + 1)
            start = stop
        return items

    def search(
        self,
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description=(
            'words and "phrases", all of which must match; scope with in:command, in:message, '
            "in:output, in:tool, in:path, in:evidence, in:reason or in:prompt; filter with "
            "outcome:fail, case:ID, variant:NAME, batch:ID"))],
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> SearchReply:
        """Find text in every stored trial (trajectory, evidence, failure reasons, prompts),
        newest trials first: each hit's trial, where it is, and a snippet."""
        hits, unindexed = self.store.search(query, limit=limit), self.store.search_pending()
        if not unindexed:
            return SearchReply(hits=hits)
        self.store.start_indexing()  # an older store, or a run stopped between a save and its indexing
        if (error := self.store.index_error) is not None:
            cut = f"{unindexed:,} trials are not searchable: {error}"
        else:
            cut = f"{unindexed:,} trials are not searchable yet: they are being indexed now, search again shortly"
        return SearchReply(hits=hits, unindexed=unindexed, cut=cut)

    def failure_groups(self, batch_id: Annotated[str, Field(description="a batch id, or a unique "
                                                                        "start of one")]) -> GroupList:
        """A batch's failed and void trials grouped by cause, largest group first."""
        found = locate(self.store, batch_id)
        if found is None or found.kind != "batch":
            raise ToolError(f"no batch {batch_id!r} in the store: list_batches lists them")
        groups = [GroupView(**g.model_dump(exclude={"signature", "trial_ids"}), trial_ids=g.trial_ids[:GROUP_TRIALS])
                  for g in groups_of(self.store, found.batch_id)]
        reply = GroupList(batch_id=found.batch_id, groups=groups)
        while size(reply) > REPLY_BYTES and len(reply.groups) > 1:
            kept = reply.groups[:len(reply.groups) // 2]
            reply = GroupList(batch_id=found.batch_id, groups=kept,
                              cut=f"the {len(kept)} largest of {len(groups)} groups")
        if any(g.count > GROUP_TRIALS for g in groups) and reply.cut is None:
            reply.cut = f"each group lists its first {GROUP_TRIALS} trial ids; count counts them all"
        return reply

    def _shown(self, path: Path | None) -> str | None:
        """A config path as the caller names it: inside the folder relative, else as it is."""
        if path is None:
            return None
        resolved = path.resolve()
        return self.folder.relative(resolved) if resolved.is_relative_to(self.folder.root) else str(path)


def _version() -> str:
    try:
        return version("proctor")
    except PackageNotFoundError:
        return "0"
