"""`c`, the context an eval body receives: send, exec, judge, read_file, write_file, capture.

Every call is a phase of the trial. A check's phase ends with its matchers'
verdict, once they have run: when the body starts its next phase, or ends. Calls
after the trial was aborted (timeout, interrupt) raise `TrialAborted`, which ends
the body quietly. The context sees
its trial only through a `TrialRuntime`: the trial runner builds one, and
nothing here imports the runner.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .config import JudgeConfig
from .harness import HarnessFailed, OnItem, TurnOutput
from .judge import ask_judge
from .matchers import ExecResult
from .models import Artifact, TrajectoryItem, TurnRecord, Validation
from .phases.diff import tree_diff
from .recorder import OpenPhase, Recorder
from .text import clip_line, item_line, plural
from .redact import holds_password_assignment
from .sandbox.container import Sandbox, SandboxGone
from .sandbox import layer
from .sandbox.tree import Tree
from .spec import parse_duration

CAPTURE_MAX = 256_000


class TrialAborted(Exception):
    """The trial was stopped (timeout or interrupt); the body ends here."""


@dataclass(frozen=True)
class TrialRuntime:
    """What the context needs of its trial, fixed once the sandbox is ready and the body starts."""

    sandbox: Sandbox
    recorder: Recorder  # the record's bookkeeping and the trial's events
    aborted: threading.Event  # set on a timeout, an interrupt or a sandbox limit
    deadline: float  # time.monotonic() at which the body's timeout ends
    snapshot: Tree  # the workspace before the first turn: cumulative diffs start here
    judge: JudgeConfig | None
    # One harness turn: (prompt, turn number, seconds left, on_item) -> what the agent did.
    run_turn: Callable[[str, int, float, OnItem], TurnOutput]


@dataclass
class Turn:
    """What `c.send` returns."""

    index: int
    status: str
    final_message: str
    diff: str
    files_changed: list[str]
    items: list[TrajectoryItem] = field(default_factory=list)
    exit_code: int | None = None


class Context:
    def __init__(self, runtime: TrialRuntime):
        self._runtime = runtime
        self._turns = 0
        self._checks = 0
        self._judges = 0
        self._prompts: list[str] = []
        self._final_message = ""
        self._cumulative = ""
        self._files_changed: list[str] = []
        self._previous_tree = runtime.snapshot
        # The last check, whose phase ends once its matchers have run (`end_check`).
        self._open_check: tuple[OpenPhase, Validation] | None = None
        self._check_lock = threading.Lock()  # the body's thread or, past the timeout, the trial's ends it

    # --- helpers ------------------------------------------------------------------

    def _live(self) -> None:
        if self._runtime.aborted.is_set():
            raise TrialAborted()

    def _remaining(self) -> float:
        return max(self._runtime.deadline - time.monotonic(), 0.1)

    def end_check(self) -> None:
        """End the open check's phase with its verdict: the body has moved on to its next
        phase, or ended, so the matchers chained on `c.exec` have run. A matcher called on an
        older result still counts in the outcome, not in its phase's status."""
        with self._check_lock:
            open_check, self._open_check = self._open_check, None
        if open_check is None:
            return
        phase, validation = open_check
        if validation.status != "passed":
            phase.handle.status = validation.status
            failed = [a["message"] for a in validation.evidence.get("assertions", []) if not a["passed"]]
            why = validation.evidence.get("error") or (failed[0] if failed else "")
            said = f"{validation.status}: {clip_line(why)}" if why else validation.status
            phase.handle.extras.append(said)
        self._runtime.recorder.end_phase(phase)

    def _sandbox_call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (SandboxGone, OSError):  # OSError: a tree's contents, removed with the sandbox
            if self._runtime.aborted.is_set():
                raise TrialAborted() from None
            raise

    # --- the API ------------------------------------------------------------------

    def send(self, prompt: str) -> Turn:
        """One agent turn, followed by a diff of the workspace."""
        self._live()
        self.end_check()
        runtime, rec = self._runtime, self._runtime.recorder
        self._turns += 1
        n = self._turns
        self._prompts.append(prompt)
        items: list[TrajectoryItem] = []

        def on_item(item: TrajectoryItem) -> None:
            stored = rec.add_item(item)  # redacted, then capped; None past the item caps
            if stored is not None:
                items.append(item)
                rec.progress("turn", item_line(stored), index=n, item=stored)

        started = time.monotonic()
        with rec.phase("turn", index=n) as phase:
            try:
                out = self._sandbox_call(runtime.run_turn, prompt, n, self._remaining(), on_item)
            except TrialAborted:
                phase.status, phase.text = "aborted", f"{n} aborted"
                rec.add_turn(TurnRecord(index=n, prompt=prompt, status="aborted",
                                        ms=int((time.monotonic() - started) * 1000)))
                raise
            finally:
                dropped = rec.end_items(n)  # one marked item counts what the caps dropped
                if dropped is not None:
                    items.append(dropped)
                    rec.progress("turn", item_line(dropped), index=n, item=dropped)
            aborted = runtime.aborted.is_set()
            failed = bool(out.finished_reason and out.finished_reason.startswith("failed:"))
            status = "aborted" if aborted else "failed" if failed else "completed"
            commands = sum(i.kind == "command" for i in items)
            edits = sum(i.kind == "fileChange" for i in items)
            phase.status = {"aborted": "aborted", "failed": "failed"}.get(status)
            phase.text = f"{n} {status}"
            phase.extras = [plural(commands, "command"), plural(edits, "file edit")]
            if out.finished_reason is None:
                phase.extras.append(f"exit {out.exit_code}")
        record = TurnRecord(index=n, prompt=prompt, status=status,  # type: ignore[arg-type]
                            ms=int((time.monotonic() - started) * 1000), final_message=out.final_message,
                            exit_code=out.exit_code, raw_output=out.raw_output,
                            finished_reason=out.finished_reason, usage=out.usage, model=out.model)
        rec.add_usage(out.usage)
        if out.final_message:
            self._final_message = out.final_message
        if aborted:
            rec.add_turn(record)
            raise TrialAborted()
        with rec.phase("diff", index=n) as phase:
            previous, snapshot = self._previous_tree, runtime.snapshot
            tree = self._sandbox_call(layer.turn_tree, runtime.sandbox, previous)
            record.diff, changed = self._sandbox_call(tree_diff, previous, tree)
            if previous is snapshot:  # the first turn: its own diff is the cumulative one; not made twice
                self._cumulative, self._files_changed = record.diff, changed
            else:
                self._cumulative, self._files_changed = self._sandbox_call(tree_diff, snapshot, tree)
            record.cumulative_diff, record.files_changed = self._cumulative, changed
            # Only the last cumulative diff is stored (Trial._finish): the earlier ones go now.
            rec.drop_cumulative_diffs()
            if previous is not snapshot and tree.blobs is not None:  # contents only the last tree had
                self._sandbox_call(tree.blobs.release, previous, tree, snapshot)
            self._previous_tree = tree
            phase.text = f"{n} · {plural(len(changed), 'file')} changed"
        rec.add_turn(record)
        if failed:
            raise HarnessFailed(f"the harness reported {out.finished_reason}")
        return Turn(index=n, status=status, final_message=out.final_message, diff=record.diff,
                    files_changed=changed, items=items, exit_code=out.exit_code)

    def exec(self, command: str, timeout: str | float | None = None) -> ExecResult:
        """Run a check command in the sandbox; use the matchers on what it returns. Its phase
        ends with the matchers' verdict, when the body moves on (`end_check`)."""
        self._live()
        self.end_check()
        runtime, rec = self._runtime, self._runtime.recorder
        self._checks += 1
        limit = self._remaining()
        if timeout is not None:
            limit = min(parse_duration(timeout), limit)
        validation = Validation(kind="command", name=command, status="passed",
                                evidence={"command": command})
        phase = rec.start_phase("check", index=self._checks, detail=command)
        try:
            out = self._sandbox_call(runtime.sandbox.exec, command, timeout=limit)
        except BaseException as e:  # stopped (the trial was aborted) or broken: no verdict
            phase.handle.status = "aborted" if isinstance(e, TrialAborted) else "failed"
            phase.handle.text = f"{self._checks} `{clip_line(command)}` {phase.handle.status}"
            rec.end_phase(phase)
            raise
        validation.ms = out.ms
        validation.evidence.update(stdout=out.stdout, stderr=out.stderr, exit_code=out.exit_code)
        if out.timed_out:
            validation.status = "error"
            validation.evidence["error"] = f"timed out after {limit:.0f}s"
        phase.handle.text = f"{self._checks} `{clip_line(command)}` exited {out.exit_code}"
        rec.add_validation(validation)
        with self._check_lock:
            self._open_check = (phase, validation)
        if runtime.aborted.is_set():
            self.end_check()
            raise TrialAborted()
        return ExecResult(validation, out.exit_code, out.stdout, out.stderr)

    def judge(self, criterion: str, threshold: float = 0.5, state: dict[str, Any] | None = None) -> Validation:
        """Ask the judge model whether the work meets `criterion`."""
        self._live()
        self.end_check()
        rec = self._runtime.recorder
        self._judges += 1
        full_state = {"task": "\n\n".join(self._prompts), "final_message": self._final_message,
                      "files_changed": self._files_changed, "diff": self._cumulative, **(state or {})}
        with rec.phase("judge", index=self._judges, detail=criterion) as phase:
            validation = ask_judge(self._runtime.judge, criterion, threshold, full_state,
                                   budget_s=self._remaining(), redactor=rec.redactor)
            score = validation.evidence.get("judgment", {}).get("score")
            phase.text = f"{self._judges} {validation.status}" + (
                f" · score {score:.2f} vs {threshold:.2f}" if score is not None else "")
            if validation.status == "error":  # no verdict: the phase itself went wrong
                phase.status, phase.extras = "error", [validation.evidence.get("error", "")]
        rec.add_validation(validation)
        return validation

    def read_file(self, path: str) -> str:
        self._live()
        return self._sandbox_call(self._runtime.sandbox.read_file, path).decode("utf-8", "replace")

    def write_file(self, path: str, text: str | bytes) -> None:
        self._live()
        data = text.encode() if isinstance(text, str) else text
        self._sandbox_call(self._runtime.sandbox.put_files, {path: data})

    def capture(self, path: str) -> Artifact:
        """Save a workspace file into the record: small text only, never a binary
        or a file that holds a password assignment (`engine.redact`)."""
        self._live()
        # Streamed: a huge file is hashed, never held.
        data, size, digest = self._sandbox_call(self._runtime.sandbox.read_file_digest, path, CAPTURE_MAX + 1)
        artifact = Artifact(path=path, bytes=size, sha256=digest)
        if size <= CAPTURE_MAX and b"\0" not in data:
            try:
                text = data.decode("utf-8")
                # Redaction would mask the value; a file that assigns a password stays out whole.
                if not holds_password_assignment(text):
                    artifact.text = self._runtime.recorder.redactor.text(text)
            except UnicodeDecodeError:
                pass
        self._runtime.recorder.add_artifact(artifact)
        return artifact

