"""One trial through every phase, in SPEC.md's order, to one record.

image → container → env → workspace → files → setup → snapshot → harness →
the eval body (turns with diffs, checks, judges) → teardown → record.
Teardown and record always run. The timeout counts only the body.
"""

from __future__ import annotations

import os
import secrets as random_tokens
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import docker
from docker.errors import DockerException

from . import keys, limits
from .config import Config, Variant
from .context import Context, TrialAborted, TrialRuntime
from .errors import Void
from .events import EventSink, TrialFinished, TrialStarted
from .harness import HarnessFailed, make_harness
from .harness.cli import cli_images, harness_packages, harness_secrets
from .models import Failure, Outcome, PhaseSpan, TrialRecord, TurnRecord, Validation
from .phases import workspace as workspace_phase
from .phases.git_source import GitSources
from .phases.egress import Egress
from .recorder import Recorder
from .text import fmt_ms, iso_ms, plural, utc_now
from .redact import Redactor
from .sandbox.cleanup import labels
from .sandbox.container import Sandbox, SandboxGone
from .sandbox.gateway import GatewayHost
from .sandbox.pool import PoolKey, SandboxPool, Warm
from .sandbox.reaper import Reaper
from .sandbox.watchdog import Watchdog
from .sandbox.images import ImageBuildFailed, ImageMissing, Images, describe
from .sandbox.node_cli import CliInstallFailed
from .sandbox import layer
from .sandbox.tree import Tree
from .spec import Case
from .cost import price_record
from .usage import usage_warnings

ABORT_GRACE_S = 3
SLOT_SPAN_MIN_MS = 50
SAVED = "saved"  # the record phase's detail, in the stored span and in its end event alike


@dataclass
class TrialPlan:
    case: Case
    variant: Variant
    config: Config
    batch_id: str
    run_id: str
    trial_id: str
    trial: int
    trigger: str
    owner: str
    attempt: int = 1  # `--retry-void`: the same trial run again, a new record

    def empty_record(self, host: str | None = None) -> TrialRecord:
        """The record of this trial before anything ran: who it is, nothing done."""
        return TrialRecord(id=self.trial_id, batch_id=self.batch_id, run_id=self.run_id,
                           case_id=self.case.id, variant=self.variant.name, trial=self.trial,
                           attempt=self.attempt, trigger=self.trigger, tags=list(self.case.tags),  # type: ignore[arg-type]
                           host=host)


class Trial:
    # Set by the batch: the sandbox is then removed in the background once the record is
    # committed (engine.sandbox.reaper); None removes it in the teardown phase itself.
    reaper: Reaper | None = None
    # Set by the batch: warm containers a trial claims instead of making one (engine.sandbox.pool).
    pool: SandboxPool | None = None

    def __init__(self, plan: TrialPlan, client: docker.DockerClient, images: Images,
                 sink: EventSink, save: Callable[[TrialRecord], None], gateways: GatewayHost,
                 host_env: dict[str, str] | None = None, queued_at: float | None = None,
                 host_name: str | None = None, sources: GitSources | None = None,
                 local_docker: bool = False):
        """`queued_at` (time.monotonic()): when the trial began waiting for a concurrency slot.
        `sources`: the batch's git sources, fetched once for all its trials. `local_docker`:
        the daemon shares this machine's files whatever `host_name` says (a cluster node's own)."""
        self.plan = plan
        self.local_docker = local_docker
        self.sources = sources
        self.case, self.config = plan.case, plan.config
        self.client, self.images, self.save = client, images, save
        self.host_env = dict(os.environ if host_env is None else host_env)
        self.harness = make_harness(plan.variant)
        # The harness's own (a CLI's provider key), then the case's, which win on a shared name.
        self.secrets = {**harness_secrets(self.harness), **self.case.secrets}
        # From the host environment, else the system keyring (engine.keys).
        self.secret_values = {name: keys.get(s.env or name, self.host_env) or ""
                              for name, s in self.secrets.items()}
        # What the sandbox sees instead of each secret; the gateway swaps the value in.
        self.placeholders = {name: f"proctor-placeholder-{name}-{random_tokens.token_hex(8)}"
                             for name in self.secrets}
        self.egress = Egress(gateways, self.case, self.config, self.placeholders, self.secret_values,
                             self.secrets)
        record = plan.empty_record(host=host_name)
        # The keys used on the host (the judge's, the mini harness's) are redacted too, from the
        # keyring as well: the environment's are already among host_env's secrets.
        host_keys = [keys.from_keyring(n) for n in self._host_key_names() if not self.host_env.get(n)]
        redactor = Redactor(secrets=[v for v in [*self.secret_values.values(), *host_keys] if v],
                            host_env=self.host_env)
        # The trial starts now, its slot found: spans count from here, the wait lies before 0.
        self.recorder = Recorder(record, sink, redactor)
        self.queued_at = self.recorder.t0 if queued_at is None else min(queued_at, self.recorder.t0)
        self.sandbox: Sandbox | None = None
        self.snapshot: Tree = Tree()  # names and hashes; contents in the sandbox's tree folder
        self.aborted = threading.Event()
        self.abort_reason: str | None = None  # None: the timeout
        self.resources = self.config.defaults.resources(self.case)
        self.watchdog: Watchdog | None = None
        self.limit_reason: str | None = None  # a sandbox limit ended the trial
        self.body_started = False
        self.timeout_s = self.case.timeout or self.config.defaults.timeout

    def _host_key_names(self) -> list[str]:
        """The variables naming the keys the engine itself sends: the judge's and the harness's."""
        judge = self.config.judge.api_key_env if self.config.judge else None
        harness = getattr(getattr(self.harness, "options", None), "api_key_env", None)
        return [n for n in (judge, harness) if isinstance(n, str) and n]

    @property
    def started_at(self) -> str:
        """When the trial's own work starts, after any wait for a slot (the record's `started_at`)."""
        return iso_ms(self.recorder.t0_epoch_ms)

    @property
    def record(self) -> TrialRecord:
        """The record as it is being written (the recorder keeps it, under its lock)."""
        return self.recorder.record

    def cancel(self, reason: str) -> None:
        """Stop from outside (an interrupted batch): the trial becomes infra_error."""
        self.abort_reason = reason
        self._abort()

    def limit_reached(self, reason: str) -> None:
        """The sandbox reached a limit (the watchdog saw it): the trial ends, naming it.
        During the body it is the agent's: fail/limit; before, the sandbox's: infra_error."""
        if self.aborted.is_set():
            return
        self.limit_reason = reason
        self._abort()

    def run_turn(self, prompt: str, turn: int, timeout: float, on_item):
        """One turn of the harness, as the agent's user; a limit it reached ends the trial."""
        assert self.sandbox is not None
        self.sandbox.give_back_workspace()
        out = self.harness.run_turn(self.sandbox, prompt, turn, timeout, on_item)
        if self.watchdog is not None:
            self.watchdog.check()
        return out

    def _abort(self) -> None:
        self.aborted.set()
        if self.sandbox is not None:
            try:
                self.sandbox.destroy()
            except (DockerException, OSError):
                pass

    # --- the phases -----------------------------------------------------------------

    def run(self) -> TrialRecord:
        rec, record = self.recorder, self.record
        waited = int((rec.t0 - self.queued_at) * 1000)
        record.queued_at, record.started_at = iso_ms(rec.t0_epoch_ms - waited), self.started_at
        sources = [self.case.file] + ([self.config.path] if self.config.path else [])
        record.source = limits.cap_source({str(p): p.read_text(errors="replace") for p in sources})
        # Started first, so a live view counts from the real start; the wait's span ends at 0.
        rec.emit(TrialStarted(**rec._ids(), run_id=self.plan.run_id, attempt=self.plan.attempt,
                              at=rec.t0_epoch_ms))
        if waited >= SLOT_SPAN_MIN_MS:  # below that it is scheduling, not waiting
            rec.past_span("slot", -waited, 0, "waited for a free slot")
        void: Void | None = None
        try:
            self._prepare()
            self._run_body()
        except Void as e:
            void = e
        except SandboxGone as e:
            void = Void(str(e))
        except (DockerException, OSError) as e:  # OSError: the daemon's socket is gone
            void = Void(f"Docker failed: {str(e).splitlines()[0][:200]}")
        except Exception as e:  # an engine bug must still tear down and leave a record
            void = Void(f"engine error: {type(e).__name__}: {e}")
        if self.aborted.is_set() and self.abort_reason and void is None:
            void = Void(self.abort_reason)
        if self.limit_reason is not None:  # the limit explains what failed after it
            spans = [s.phase for s in self.record.phases if s.status != "ok"]
            where = void.where if void is not None and void.where else spans[-1] if spans else None
            void = None if self.body_started else Void(
                self.limit_reason + (f" during {where}" if where else ""), where)
        self.record.outcome, self.record.failure = outcome_of(
            void, self.aborted.is_set(), self.limit_reason, self.record.phases, self.record.validations,
            self.timeout_s)
        self._teardown()
        return self._finish()

    def _prepare(self) -> None:
        rec, case = self.recorder, self.case
        if self.aborted.is_set():
            raise Void(self.abort_reason or "the trial was stopped before it started")
        spec = case.image or self.config.defaults.image
        if spec is None:
            raise Void("no image: set image= in @evaluation or [defaults] image in proctor.toml")
        with rec.phase("image") as phase:
            try:
                tag, detail = self.images.ensure(spec, log=lambda line: rec.progress("image", line))
            except (ImageBuildFailed, ImageMissing) as e:
                phase.text = f"failed {describe(spec)}"
                raise Void(str(e), "image") from None
            packages = harness_packages(self.harness)
            if packages:  # an agent CLI's harness: the case's image plus Node.js and the CLI
                try:
                    cli = cli_images(self.images).ensure(
                        tag, packages, log=lambda line: rec.progress("image", line))
                except (CliInstallFailed, ValueError) as e:
                    phase.text = f"failed {', '.join(packages)} on {tag}"
                    raise Void(str(e), "image") from None
                tag, detail = cli.tag, f"{detail} · {', '.join(packages)} {cli.detail}"
            self.record.image = tag
            phase.detail, phase.text = detail, f"ready {tag} ({detail})"
        with rec.phase("container") as phase:
            owner = labels(self.plan.batch_id, self.plan.trial_id, self.plan.owner)
            remote = not self.local_docker and self.record.host not in (None, "local") \
                and not self.record.host.startswith("unix://")
            if self.egress.needed and remote:
                # The gateway's socket is bind-mounted: the daemon must share this machine's files.
                raise Void(f"this case needs the egress gateway, which runs only on a local Docker host "
                           f"(unix://), not on {self.record.host}", "container")
            warm = self._claim_warm(tag)
            if warm is not None:
                self.sandbox = warm.sandbox  # the trial's from here: its teardown removes it
            mounts = self.egress.start(self.client, owner, warm.mount if warm else None,
                                       warm.ca if warm else None) if self.egress.needed else None
            if warm is None:
                self.sandbox = Sandbox.create(self.client, tag, owner, self.resources, mounts=mounts)
            if self.aborted.is_set():  # cancelled while the container was being made
                self.sandbox.destroy()
            self.watchdog = Watchdog(self.sandbox, self.resources, self.limit_reached)
            self.watchdog.start()
            rec.progress("container", self.sandbox.limits_text(self.resources))
            phase.detail = self.sandbox.short_id
            phase.text, phase.extras = f"created {self.sandbox.short_id}", ["no network"]
            if warm is not None:
                phase.text = f"claimed warm {self.sandbox.short_id}"
            if self.egress.needed:
                gateway = self.egress.attach(self.sandbox, warm.relay if warm else None)
                phase.extras = ["no network, gateway only", gateway]
                rec.progress("container", gateway)
        with rec.phase("env") as phase:
            self.sandbox.env = self._environment()
            phase.text = plural(len(case.env), "variable")
            if self.secrets:
                phase.extras = [f"{len(self.secrets)} secrets as placeholders"]
        with rec.phase("workspace") as phase:
            phase.text = workspace_phase.place(self.sandbox, case.workspace, self.sources)
        with rec.phase("files") as phase:
            files = dict(case.files)
            if case.rules:
                files[self.harness.rules_file] = case.rules.encode()
            if files:
                self.sandbox.put_files(files)
            phase.text = plural(len(files), "file") + (f" ({self.harness.rules_file})" if case.rules else "")
        with rec.phase("setup") as phase:
            phase.text = self._setup()
        with rec.phase("snapshot") as phase:
            self.snapshot = layer.snapshot(self.sandbox)  # from the host where it can
            phase.text = plural(len(self.snapshot), "file")
        with rec.phase("harness") as phase:
            runs_as = self.sandbox.hand_over() if self.resources.user == "agent" else "agent runs as root"
            phase.text = f"{self.plan.variant.harness} harness · {self.harness.start(self.sandbox)}"
            phase.extras = [runs_as]

    def _claim_warm(self, tag: str) -> Warm | None:
        """The started container the batch's pool made for this trial, or None: make one."""
        pool = self.pool
        if pool is None or pool.client is not self.client:
            return None
        warm = pool.claim(self.plan.trial_id, PoolKey(tag, self.resources))
        if warm is not None and (warm.mount is not None) != self.egress.needed:
            warm.remove()  # made with a gateway folder this trial mounts not, or without one it does
            return None
        return warm

    def _environment(self) -> dict[str, str]:
        env = {"HOME": "/root", "PROCTOR": "1", "PROCTOR_TRIAL": self.plan.trial_id,
               "PROCTOR_TRIAL_NUMBER": str(self.plan.trial), "PROCTOR_VARIANT": self.plan.variant.name,
               **self.egress.env, **self.case.env}
        for name, secret in self.secrets.items():
            if not self.secret_values[name]:
                var = secret.env or name
                raise Void(f"secret {name} is not set: export {var} on the host, or save it in the "
                           "system keyring (the studio's Settings) before running", "env")
            # The real value never enters the sandbox; the gateway swaps it in on the way out.
            env[name] = self.placeholders[name]
        return env

    def _setup(self) -> str:
        assert self.sandbox is not None
        log: list[str] = []
        try:
            for i, step in enumerate(self.case.setup, 1):
                self.recorder.progress("setup", f"step {i}: {step.command}", index=i)
                out = self.sandbox.exec(step.command, timeout=step.timeout)
                log.append(f"$ {step.command}\n{out.output}".rstrip() + f"\n[exit {out.exit_code} in {fmt_ms(out.ms)}]\n")
                if out.timed_out:
                    raise Void(f"setup step {i} `{step.command}` timed out after {fmt_ms(int(step.timeout * 1000))}",
                               f"setup step {i}")
                if out.exit_code != 0 and self.watchdog is not None:
                    self.watchdog.check()  # killed by a limit? then the limit is the reason
                if out.exit_code != 0:
                    last = out.output.strip().splitlines()[-1:]
                    why = f": {limits.quote(last[0], 160)}" if last else ""
                    raise Void(f"setup step {i} `{step.command}` exited {out.exit_code}{why}", f"setup step {i}")
        finally:
            self.record.setup_log = "".join(log)
        return plural(len(self.case.setup), "step")

    def _run_body(self) -> None:
        """The eval body on its own thread; the timeout counts from here."""
        assert self.sandbox is not None
        context = Context(TrialRuntime(sandbox=self.sandbox, recorder=self.recorder, aborted=self.aborted,
                                       deadline=time.monotonic() + self.timeout_s, snapshot=self.snapshot,
                                       judge=self.config.judge, run_turn=self.run_turn))
        errors: list[BaseException] = []

        def body() -> None:
            try:
                self.case.body(context)
            except TrialAborted:
                pass
            except BaseException as e:  # the body's own failure is recorded, not raised
                errors.append(e)
            finally:
                context.end_check()  # the last check's matchers have run

        self.body_started = True
        thread = threading.Thread(target=body, name=f"body-{self.plan.trial_id}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._abort()
            thread.join(ABORT_GRACE_S)
            if thread.is_alive():
                context.end_check()  # stuck after a check: its phase ends before the body is muted
                with self.recorder.lock:
                    self.recorder.muted.add(thread.ident or 0)
                self._mark_running_turn_aborted()
        if not self.aborted.is_set() and self.watchdog is not None:
            self.watchdog.check()  # a limit the last check reached
        if self.aborted.is_set():
            return
        for error in errors:
            if isinstance(error, (HarnessFailed,)):
                raise Void(str(error), "harness")
            if isinstance(error, SandboxGone):
                raise Void(str(error))
            self.recorder.add_validation(_check_validation(error, self.case.file))

    def _mark_running_turn_aborted(self) -> None:
        done = {t.index for t in self.record.turns}
        started = [s.index for s in self.record.phases if s.phase == "turn"]
        running = max((i for i in started if i is not None), default=None)
        if running is None:
            return
        if running not in done:
            self.recorder.add_turn(TurnRecord(index=running, prompt="", status="aborted", ms=0))

    def _teardown(self) -> None:
        """With a reaper, the span measures what the slot still waits for: the gateway stopped,
        its log read, a free removal place; the removal itself runs after, in the background."""
        if self.watchdog is not None:
            self.watchdog.stop()
        with self.recorder.phase("teardown") as phase:
            failure = self.record.failure
            phase.timed, phase.detail = False, f"outcome {self.record.outcome}"
            phase.text = phase.detail + (f" · {failure.kind}: {failure.reason}" if failure else "")
            if self.reaper is not None and self.sandbox is not None:
                # Stopped before its log is read: no request the agent makes later leaves unlogged.
                gateway, self.egress.gateway = self.egress.gateway, None  # its volume and folder go later
                if gateway is not None:
                    gateway.close()
                    self.record.egress = gateway.entries()
                if not self.sandbox.destroyed:  # else the trial's stop removed it already
                    phase.extras = ["container removed in the background"]
                waited = self.reaper.submit(f"container {self.sandbox.short_id}", self._remove)
                if waited >= 0.001:  # back-pressure: every removal place was taken
                    phase.extras.append(f"waited {fmt_ms(int(waited * 1000))} for a removal place")
            else:
                if self.sandbox is not None and not self.sandbox.destroyed:
                    try:
                        self.sandbox.destroy()
                    except (DockerException, OSError) as e:  # OSError: the daemon itself went away
                        phase.extras = [f"could not remove the container: {str(e)[:100]}"]
                self.record.egress = self.egress.close()
            if self.record.egress:
                phase.extras.append(f"{len(self.record.egress)} requests in the egress log")

    def _remove(self) -> None:
        """On a reaper thread, after the trial: the container, then the gateway's volume and folder."""
        try:
            if self.sandbox is not None and not self.sandbox.destroyed:
                self.sandbox.destroy()
        finally:
            self.egress.close()

    def _finish(self) -> TrialRecord:
        rec, record = self.recorder, self.record
        record.void_fields = self._void_fields() if record.outcome == "infra_error" else []
        record.command_count = sum(i.kind == "command" for i in record.trajectory)
        record.usage_warnings = usage_warnings([t.usage for t in record.turns if t.usage])
        price_record(record, self.config.prices)  # at its own [prices]: the studio may not know them
        # The cumulative diff is kept once, on the last turn that has one: per turn it would
        # store the same growing diff again and again (a 20 MB diff over 10 turns is 200 MB).
        # None is kept when one turn's own diff is the whole change (a one-turn trial): readers
        # take that turn's diff (studio/views/diff.py).
        diffed = [t for t in record.turns if t.cumulative_diff]
        changed = [t.diff for t in record.turns if t.diff]
        kept = diffed[-1] if diffed and changed != [diffed[-1].cumulative_diff] else None
        for turn in diffed:
            if turn is not kept:
                turn.cumulative_diff = ""
        record.timings = _timings(record)
        record.finished_at = utc_now()
        with rec.phase("record") as phase:
            start = rec.elapsed_ms()
            try:
                # clean first (nesting cut, so redaction cannot recurse too deep), redact, then cap.
                final = _capped(limits.clean(record), rec.redactor)
                # The stored record holds its own record span, closed just before the write.
                final.phases.append(PhaseSpan(phase="record", status="ok", start_ms=start,
                                              end_ms=rec.elapsed_ms(), detail=SAVED))
                phase.text = f"not saved {final.id}"  # until save() returns: it waits for the commit
                self.save(final)
            except (ValueError, TypeError, OverflowError, RecursionError) as e:
                # The record cannot be serialized: never lose the trial, keep who, when and why.
                final = self._minimal(e)
                phase.text = f"not saved {final.id}"
                self.save(final)
                phase.status = "error"
                phase.extras = ["saved minimal: the full record could not be written"]
            # The record's own span says "saved" (its id is the record's); the -v line names it.
            phase.detail, phase.text = SAVED, f"saved {final.id}"
        rec.emit(TrialFinished(**rec._ids(), outcome=final.outcome, failure=final.failure,  # type: ignore[arg-type]
                               command_count=final.command_count, duration_ms=rec.elapsed_ms()))
        return final

    def _minimal(self, error: BaseException) -> TrialRecord:
        """The last resort: a record with only who, when and why, as infra_error."""
        r = self.record
        why = f"the record could not be saved: {type(error).__name__}: {limits.quote(str(error), 300)}"
        why = limits.clean_text(limits.redact(self.recorder.redactor, why))[: limits.FAILURE_REASON]
        return TrialRecord(
            id=r.id, batch_id=r.batch_id, run_id=r.run_id, case_id=r.case_id, variant=r.variant,
            trial=r.trial, attempt=r.attempt, trigger=r.trigger, tags=r.tags, host=r.host, image=r.image,
            queued_at=r.queued_at, started_at=r.started_at, finished_at=r.finished_at, outcome="infra_error",
            failure=Failure(kind="infra", reason=why, where="record"),
            void_fields=["turns", "trajectory", "validations", "usage"])

    def _void_fields(self) -> list[str]:
        record, missing = self.record, []
        if not record.turns:
            missing += ["turns", "trajectory"]
        if not record.validations:
            missing.append("validations")
        return missing


def outcome_of(void: Void | None, aborted: bool, limit_reason: str | None, phases: list[PhaseSpan],
               validations: list[Validation], timeout_s: float) -> tuple[Outcome, Failure | None]:
    """A trial's outcome and why, by SPEC.md's rules: void is infra_error; a body stopped by its
    timeout or a sandbox limit fails at the phase it stopped; else the first failed validation."""
    if void is not None:
        return "infra_error", Failure(kind="infra", reason=void.reason, where=void.where)
    if aborted:
        running = [s for s in phases if s.status == "aborted"]
        where = f"{running[-1].phase} {running[-1].index}" if running else None
        if limit_reason is not None:
            # A check's failed or error status is its verdict, not a phase the limit stopped.
            stopped = [s for s in phases if s.status != "ok"
                       and not (s.phase == "check" and s.status in ("failed", "error"))]
            last = stopped[-1] if stopped else None
            where = last and (f"{last.phase} {last.index}" if last.index is not None else last.phase)
            return "fail", Failure(kind="limit", reason=limit_reason, where=where)
        return "fail", Failure(kind="timeout", where=where,
                               reason=f"the trial ran past its timeout of {fmt_ms(int(timeout_s * 1000))}")
    checks = [v for v in validations if v.kind != "judge"]
    for v in validations:
        if v.status in ("failed", "error"):
            if v.kind == "judge":
                j = validations.index(v) + 1
                return "fail", Failure(kind="judge", reason=_judge_reason(v), where=f"judge {j}")
            where = f"check {checks.index(v) + 1} of {len(checks)}"
            if v.kind == "check" and v.status == "error":  # the eval's own bug: where it is
                where = v.name
            return "fail", Failure(kind="assertion", reason=_check_reason(v), where=where)
    return "pass", None


def _check_validation(error: BaseException, eval_file: Path) -> Validation:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == eval_file]
    where = f"{eval_file.name}:{frames[-1].lineno}" if frames else str(eval_file.name)
    failed = isinstance(error, AssertionError)
    message = str(error) or type(error).__name__
    return Validation(kind="check", name=f"{where}", status="failed" if failed else "error",
                      evidence={"exception": type(error).__name__, "message": message,
                                "traceback": "".join(traceback.format_exception(error))[-4000:]})


def _check_reason(v: Validation) -> str:
    if v.kind == "check" and v.status == "error":
        # An exception in the eval body is the check's error, not the agent's failure: it
        # reads as the Evidence card shows it, on one line.
        exception, message = v.evidence.get("exception"), str(v.evidence.get("message", ""))
        said = limits.quote(" ".join(message.split()), 200)
        return f"check error at {v.name}: {exception}" + (f": {said}" if message != exception else "")
    if v.kind == "check":
        return f"{v.evidence.get('exception')} at {v.name}: {v.evidence.get('message')}"
    if "error" in v.evidence:
        return f"`{v.name}` {v.evidence['error']}"
    failed = [a["message"] for a in v.evidence.get("assertions", []) if not a["passed"]]
    reason = f"`{v.name}` " + ("; ".join(failed) if failed else f"exited {v.evidence.get('exit_code')}")
    # The last line of stderr usually says why (an assertion message, a missing file).
    last = (v.evidence.get("stderr") or "").strip().splitlines()[-1:]
    # Quoted whole words only: the reason is redacted later, and half a key must not survive.
    line = limits.quote(last[0], 160) if last else ""
    return reason + (f": {line}" if line and v.evidence.get("exit_code") else "")


def _judge_reason(v: Validation) -> str:
    judgment = v.evidence.get("judgment")
    if judgment:
        return (f"judge scored {judgment['score']:.2f}, below {v.evidence.get('threshold')} "
                f"for {v.name!r}")
    error = str(v.evidence.get("error", "no verdict"))
    # The judge's own reasons name it ("judge unreachable: …"); the others say whose call failed.
    return error if error.startswith("judge ") else f"judge call failed: {error}"


def _timings(record: TrialRecord):
    from .models import Timings

    spans: dict[str, int] = {}
    for s in record.phases:
        spans[s.phase] = spans.get(s.phase, 0) + (s.end_ms - s.start_ms)
    prep = ("image", "container", "env", "workspace", "files", "setup", "snapshot", "harness")
    return Timings(slot_ms=spans.get("slot", 0), setup_ms=sum(spans.get(p, 0) for p in prep),
                   agent_ms=spans.get("turn", 0), diff_ms=spans.get("diff", 0),
                   checks_ms=spans.get("check", 0), judge_ms=spans.get("judge", 0),
                   teardown_ms=spans.get("teardown", 0))


def _capped(record: TrialRecord, redactor: Redactor) -> TrialRecord:
    """A cleaned record redacted, then cut to SPEC.md's limits, so no fragment of a key survives
    a cut, nor one made while reading (`limits.redact`)."""
    record = limits.redact(redactor, record)
    record.trajectory = [limits.cap_item(item) for item in record.trajectory]
    for v in record.validations:
        v.evidence, truncated = limits.cap_evidence(v.evidence)
        v.truncated = v.truncated or truncated
    last = next((t for t in reversed(record.turns) if t.cumulative_diff), None)
    diffs, cumulative = limits.cap_diffs([t.diff for t in record.turns],
                                         last.cumulative_diff if last else "")
    for turn, diff in zip(record.turns, diffs):
        turn.diff, turn.files_changed = diff, limits.cap_list(turn.files_changed)
        turn.raw_output, _ = limits.truncate(turn.raw_output, limits.RAW_OUTPUT)
        turn.final_message, _ = limits.truncate(turn.final_message, limits.FINAL_MESSAGE)
        if turn.finished_reason:
            turn.finished_reason, _ = limits.truncate(turn.finished_reason, limits.ITEM_TEXT)
    if last is not None:
        last.cumulative_diff = cumulative
    if record.failure is not None:
        record.failure.reason, _ = limits.truncate(record.failure.reason, limits.FAILURE_REASON)
    record.setup_log, _ = limits.truncate(record.setup_log, limits.EVIDENCE_TOTAL)
    return record
