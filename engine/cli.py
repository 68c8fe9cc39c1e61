"""`proctor …`: run, ls, rm, show, search, groups, replay, export, import, mcp, cleanup.

Exit status: 0 every scored trial passed; 1 a trial failed; 3 infra errors and
no failures; 2 a usage or eval-file error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from fractions import Fraction
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .batch import MAX_RETRY_VOID, BatchPlan, Engine, detect_trigger
from .cluster.runner import ClusterUnavailable, RayMissing, join
from .config import ClusterConfig, cluster_address, find_config, load_config
from .events import Event, PhaseEnded, PhaseProgress, TrialFinished, TrialStarted
from .models import BatchSummary
from .replay import delays, replay_events
from .text import fmt_ms, plural
from .sandbox.client import DockerUnavailable, connect
from .spec import MAX_CONCURRENCY, MAX_TRIALS, EvalFileError, find_eval_files, load_cases, shown
from .reports import ReportError, github
from .reports.ci import CiReports
from .reports.gate import pass_rate_status, parse_rate
from .store import Store, StoreError, default_store_path
from .store.browse import RUNNING, BrowseFilter, Sort, batches_page, count_batches, locate

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INFRA, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
OUTCOMES = ("pass", "fail", "infra_error", "skipped", RUNNING)  # RUNNING: no outcome yet
LS_LIMIT = 20  # batches `ls` lists unless told
GLYPH = {"pass": "✓", "fail": "✗", "infra_error": "○", "skipped": "–"}


class UserError(Exception):
    """One line for the user, then exit with `code`."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # a stored lone surrogate must not end a listing
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        with _workflow_commands_stopped(args):
            return args.func(args)
    except (EvalFileError, StoreError, ReportError) as e:
        _say(f"proctor: {_one_line(e)}")
        return EXIT_USAGE
    except (DockerUnavailable, ClusterUnavailable) as e:
        _say(f"proctor: {_one_line(e)}")
        return EXIT_INFRA
    except RayMissing as e:
        _say(f"proctor: {_one_line(e)}")
        return EXIT_USAGE
    except UserError as e:
        _say(f"proctor: {_one_line(e)}")
        return e.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `proctor ls --json | head`
        sys.stderr.close()
        return EXIT_OK


# `run` guards its own output (reports/ci.py); `mcp`'s stdout is its protocol.
_GUARDS_ITSELF = ("run", "mcp", "studio")


@contextmanager
def _workflow_commands_stopped(args: argparse.Namespace) -> Iterator[None]:
    """Under GitHub Actions, no line a command prints is a workflow command: `show`, `search`,
    `ls` and `replay` print what agents wrote, which could say `::add-mask::` on a line of its
    own. JSON keeps stdout to itself: its guard lines go to stderr, and its `##[` is escaped
    (github.JsonOut), as the runner may read the two streams out of order."""
    if not github.active(os.environ) or args.command in _GUARDS_ITSELF:
        yield
        return
    if not getattr(args, "json", False):
        with github.commands_stopped(sys.stdout):
            yield
        return
    real = sys.stdout
    sys.stdout = github.JsonOut(real)  # type: ignore[assignment]
    try:
        with github.commands_stopped(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stdout = real


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="proctor", description="Evaluate AI coding agents in Docker sandboxes.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        p.add_argument("--store", type=Path, help="the SQLite store (default: $PROCTOR_STORE or the user data folder)")
        p.set_defaults(func=func)
        return p

    run = command("run", cmd_run, "start a batch and wait for it")
    run.add_argument("paths", nargs="+", help="eval files or folders holding *.eval.py")
    run.add_argument("--case", action="append", dest="cases", help="only this case (repeatable)")
    run.add_argument("--variant", action="append", dest="variants", help="only this variant (repeatable)")
    run.add_argument("--trials", type=_whole(MAX_TRIALS),
                     help=f"trials per run, at most {MAX_TRIALS:,} (overrides the eval file)")
    run.add_argument("--concurrency", type=_whole(MAX_CONCURRENCY),
                     help=f"trials running at once, at most {MAX_CONCURRENCY:,}")
    run.add_argument("--retry-void", type=_whole(MAX_RETRY_VOID, least=0), default=0, metavar="N",
                     help="run a void trial (infra_error) again, up to N times, as a new attempt of the "
                          "same trial; scored trials are never run again")
    run.add_argument("--cluster", type=_cluster, metavar="ADDRESS",
                     help='run the trials on a Ray cluster\'s nodes: "auto", HOST:PORT or ray://HOST:10001 '
                          "(overrides [cluster] address; needs the extra proctor[ray])")
    run.add_argument("-v", "--verbose", action="store_true", help="print every phase as it happens")
    run.add_argument("--json", action="store_true", help="print the batch as JSON when it ends")
    run.add_argument("--junit", type=Path, metavar="FILE",
                     help="also write the batch as JUnit XML, the test report a CI system shows")
    run.add_argument("--min-pass-rate", type=_rate, metavar="R",
                     help="exit 0 when passes / (passes + fails) is at least R (0 to 1), else 1, "
                          "instead of 1 on any failure; void and skipped trials never count")
    run.add_argument("--config", type=Path, help="proctor.toml (default: next to the eval file or above)")

    ls = command("ls", cmd_ls, "batches, runs and trials in the store, newest first")
    ls.add_argument("--batch", help="one batch")
    ls.add_argument("--json", action="store_true", help="print whole batches as JSON")
    ls.add_argument("--limit", type=_whole(), default=LS_LIMIT,
                    help=f"at most N batches (default {LS_LIMIT})")
    ls.add_argument("--outcome", action="append", dest="outcomes", choices=OUTCOMES,
                    help="only batches holding a trial with this outcome, and only such trials "
                         "(repeatable)")
    ls.add_argument("--case", action="append", dest="cases", metavar="ID",
                    help="only batches holding a trial of this case, and only its trials "
                         "(repeatable)")

    rm = command("rm", cmd_rm, "delete batches (with their runs, trials and events) or single "
                               "trials (with their events) from the store")
    rm.add_argument("batch_ids", nargs="+", metavar="ID",
                    help="a batch or trial id, or a unique start of one")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask first")

    show = command("show", cmd_show, "one trial's record")
    show.add_argument("trial_id")
    show.add_argument("--json", action="store_true")

    groups = command("groups", cmd_groups, "a batch's failed and void trials grouped by cause, "
                     "largest group first")
    groups.add_argument("batch_id", metavar="BATCH_ID", help="a batch id, or a unique start of one")
    groups.add_argument("--json", action="store_true", help="print the groups as JSON")

    search = command("search", cmd_search, "find text in every stored trial: its trajectory, "
                     "evidence, failure reason and prompts, newest trials first")
    search.add_argument("query", metavar="QUERY",
                        help='words and "phrases", all of which must match; scope with in:command, '
                             "in:message, in:output, in:tool, in:path, in:evidence, in:reason or "
                             'in:prompt; filter with outcome:fail, case:ID, variant:NAME, label:"env problem", '
                             "batch:ID")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.add_argument("--limit", type=_whole(SEARCH_LIMIT_MAX), default=SEARCH_LIMIT,
                        help=f"at most N hits (default {SEARCH_LIMIT})")

    replay = command("replay", cmd_replay, "print a stored trial's `run -v` lines again, at their recorded pace")
    replay.add_argument("trial_id")
    replay.add_argument("--speed", type=_speed, default=1.0,
                        help="N times the recorded pace (default 1); 0 or `max`: no waiting")

    export = command("export", cmd_export, "write trials, runs or batches into one bundle "
                     "another store can import")
    export.add_argument("ids", nargs="+", metavar="ID",
                        help="a batch, run or trial id, or a unique start of one")
    export.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                        help="the bundle to write (a zip)")

    import_ = command("import", cmd_import, "add bundles or Inspect AI logs to the store, "
                      "each file all or nothing")
    import_.add_argument("files", nargs="+", type=Path, metavar="FILE",
                         help="a Proctor bundle, or an Inspect AI .eval or .json log")
    import_.add_argument("--threshold", type=float, default=None, metavar="X",
                         help="an Inspect log's numeric score passes at X or more")

    from .mcp import CLIENT_CONFIG  # text only: the SDK loads in cmd_mcp, for this command alone

    mcp = command("mcp", cmd_mcp, "serve Proctor's tools to an agent over MCP (stdio): list, run "
                  "and read the evals under FOLDER")
    mcp.formatter_class, mcp.epilog = argparse.RawDescriptionHelpFormatter, CLIENT_CONFIG
    mcp.add_argument("folder", nargs="?", type=Path, default=Path("."), metavar="FOLDER",
                     help="the folder whose eval files the server may read (default: here)")
    mcp.add_argument("--config", type=Path, help="proctor.toml (default: next to the eval file or above)")

    # Commands other packages add (the studio), found by entry point so the engine imports none of them.
    for entry in entry_points(group="proctor.commands"):
        entry.load()(sub)

    cleanup = command("cleanup", cmd_cleanup, "remove the containers, networks, volumes, "
                      "and gateway, git and tree folders that stopped engines left behind")
    cleanup.add_argument("--all", action="store_true",
                         help="also remove those of engines still running (a studio, another run)")
    return parser


def _whole(most: int | None = None, least: int = 1) -> Callable[[str], int]:
    """An argparse type: a whole number from `least` to `most`, its mistake said in one line."""
    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*\+?[0-9]+\s*", text):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number")
        try:
            value = int(text)
        except ValueError:  # more digits than int() reads (4,300): past any bound
            value = sys.maxsize
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {shown(text)}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most:,}, not {shown(text)}")
        return value
    return parse


def _rate(text: str) -> Fraction:
    """An argparse type: --min-pass-rate's fraction (engine.reports.gate)."""
    try:
        return parse_rate(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cluster(text: str) -> str:
    """An argparse type: a Ray cluster's address, as [cluster] address takes it."""
    try:
        return cluster_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _speed(text: str) -> float:
    """An argparse type: a replay speed, a number of 0 or more, or `max` (as fast as possible)."""
    if text.strip().lower() == "max":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is neither a number nor `max`") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 (`max`) or more, not {shown(text)}")
    return value


def _open_store(args: argparse.Namespace) -> Store:
    return Store(args.store or default_store_path())


# --- run ----------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    files = find_eval_files(args.paths)
    config_path = args.config or find_config(files[0])
    if args.config and not args.config.is_file():
        raise UserError(f"{args.config}: no such config file")
    config = load_config(config_path)
    if args.cluster:
        config = config.model_copy(update={"cluster": ClusterConfig(address=args.cluster)})
    cases = load_cases(files, args.cases)
    variants = config.select_variants(args.variants)
    reports = CiReports(args.junit, cases, os.environ, json_out=args.json)  # a bad --junit: now
    plan = BatchPlan(cases=cases, variants=variants, config=config, trials=args.trials,
                     concurrency=args.concurrency, trigger=detect_trigger("cli"),
                     retry_void=args.retry_void, link=reports.link)
    store = _open_store(args)
    stop = _StopSignals()
    started: list[str] = []  # the batch's id once it is stored
    try:
        store.check_writable()  # at once, not after the batch: nothing could be saved
        if config.cluster is not None:  # before the batch is stored: an unreachable cluster runs nothing
            join(config.cluster.address)
        client = connect()
        with stop:
            engine = Engine(store, client)
            if config.cluster is None:  # a cluster's nodes take their images from their own daemons
                engine.check_images(plan)
            swept = engine.sweep()
            if swept.trials and not args.json:
                print(f"closed {len(swept.trials)} trials left running by a stopped engine", file=sys.stderr)
            with reports.guarded():  # under GitHub Actions: agents' words are never commands
                summary = _run_batch(engine, plan, args, stop, started)
    except Exception:
        # The engine failed mid-batch (Docker went away): the store still says what ran, and CI
        # still gets its report of that; the error is what the run says and exits with.
        if started and (ended := _stored_batch(store, started[0])) is not None:
            _write_reports(reports, ended)
        raise
    finally:
        store.close()
    with reports.guarded():
        if args.json:
            print(reports.json_text(summary))
        else:
            _print_grid(summary)
    reported = _write_reports(reports, summary)  # also when interrupted: the trials that ended
    if stop.received:
        return EXIT_INTERRUPTED
    code = (pass_rate_status(summary, args.min_pass_rate) if args.min_pass_rate is not None
            else _exit_code(summary))
    # A report that could not be written is said above; the batch's own status stands, but a
    # batch that passed does not exit 0 without the report CI asked for.
    return EXIT_USAGE if not reported and code == EXIT_OK else code


def _stored_batch(store: Store, batch_id: str) -> BatchSummary | None:
    try:
        store.flush(timeout=30)
        return store.batch_summary(batch_id)
    except StoreError:
        return None


def _write_reports(reports: CiReports, summary: BatchSummary) -> bool:
    """Write the CI reports; False (said in one line) when one could not be written."""
    try:
        reports.write(summary)
        return True
    except ReportError as e:
        _say(f"proctor: {_one_line(e)}")
        return False


def _run_batch(engine: Engine, plan: BatchPlan, args: argparse.Namespace, stop: _StopSignals,
               started: list[str]) -> BatchSummary:
    """Run the batch and wait; a stop signal cancels it, and the batch still closes."""
    printer = _Printer(verbose=args.verbose, quiet=args.json)
    # While the batch runs a signal is only noted, and acted on here: a KeyboardInterrupt
    # raised inside planning or a wait could leave the batch unclosed or its result unread.
    # One noted during planning starts the batch cancelled, so no trial starts.
    with stop.held():
        handle = engine.start_batch(plan, printer, stopped=lambda: stop.received is not None)
        started.append(handle.batch_id)
        said = False
        while True:
            if stop.received and not said:
                handle.cancel()
                said = True
                _say(f"\ninterrupted ({stop.received}): stopping running trials, skipping the rest…")
            if (summary := handle.wait(0.2)) is not None:
                return summary


class _StopSignals:
    """SIGTERM and SIGHUP (`timeout`, a CI cancel, a shutdown, a closed terminal) do what
    Ctrl-C does: they raise KeyboardInterrupt in the main thread or, while the batch runs
    (`held`), are noted for the wait to cancel it. A signal ignored at start is left so."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}
        self._held = False

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = self.received or signal.Signals(signum).name
        if not self._held:
            raise KeyboardInterrupt

    @contextmanager
    def held(self) -> Iterator[None]:
        """Inside, a signal is only noted in `received`, for the caller to act on."""
        self._held = True
        try:
            yield
        finally:
            self._held = False

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():  # signal() works only there
            # One ignored when proctor started stays ignored: `nohup` ignores SIGHUP so that a
            # closed terminal leaves the run going, and a script's background job (`&`) ignores
            # SIGINT so that Ctrl-C stops only the script's foreground.
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS
                              if signal.getsignal(s) is not signal.SIG_IGN}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _one_line(message: object) -> str:
    """A message as one printable line, whatever a damaged store put in the ids it names."""
    return "".join(ch if ch.isprintable() else " " for ch in str(message))


def _say(line: str) -> None:
    """A line on stderr that never fails: after SIGHUP the terminal may be gone."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _exit_code(summary: BatchSummary) -> int:
    """By each trial's last attempt: a void trial that `--retry-void` ran again to a score is scored."""
    last = {(run.run_id, t.trial): t.outcome for run in summary.runs for t in run.trials}
    outcomes = list(last.values())
    if "fail" in outcomes:
        return EXIT_FAIL
    if "infra_error" in outcomes:
        return EXIT_INFRA
    return EXIT_OK


class _Printer:
    """`-v`: one line per phase end and per agent step; otherwise one line per finished trial."""

    def __init__(self, verbose: bool, quiet: bool):
        self.verbose, self.quiet = verbose, quiet
        self.lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        line = self.line(event)
        if line and not self.quiet:
            with self.lock:
                try:
                    print(line, flush=True)
                except OSError:  # the terminal went away (SIGHUP): the batch goes on unprinted
                    self.quiet = True

    def line(self, event: Event) -> str | None:
        if not hasattr(event, "trial_id"):
            return None
        tag = f"[{event.case_id}#{event.trial} {event.variant}]"  # type: ignore[union-attr]
        clock = datetime.fromtimestamp(event.at / 1000).strftime("%H:%M:%S")
        if isinstance(event, TrialStarted) and event.attempt > 1:
            return f"↻ {tag} void: running it again, attempt {event.attempt}"
        if isinstance(event, TrialFinished):
            if self.verbose and event.outcome != "skipped":
                return None  # teardown already said it
            # One line: an agent writes part of a reason, and a line of its own could pose as ours.
            failure = event.failure
            reason = f" · {failure.kind}: {_one_line(failure.reason)}" if failure else ""
            took = f" in {fmt_ms(event.duration_ms)}" if event.duration_ms else ""
            return f"{GLYPH[event.outcome]} {tag} {event.outcome}{took}{reason}"
        if not self.verbose:
            return None
        if isinstance(event, PhaseEnded):
            return f"{tag} {clock} {event.phase:<10} {event.summary}"
        if isinstance(event, PhaseProgress) and event.phase in ("image", "turn", "setup"):
            return f"{tag} {clock} {event.phase:<10}   {event.message}"
        return None


def _print_grid(summary: BatchSummary) -> None:
    if not summary.runs:
        return
    print(f"\nbatch {summary.batch_id} · {summary.status}")
    width = max(len(r.case_id) for r in summary.runs)
    for run in summary.runs:
        d = run.distribution
        rate = "—" if d.pass_rate is None else f"{d.pass_rate:.0%}"
        marks = "".join(GLYPH.get(t.outcome or "", "?") for t in run.trials)
        det = " deterministic" if d.deterministic else ""
        print(f"  {run.case_id:<{width}}  {run.variant:<12} {rate:>5}  {marks}  "
              f"{d.passed}/{d.scored} passed, {d.voided} void{det}")


# --- ls / show / cleanup --------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    store = _open_store(args)
    damaged: list[str] = []
    flt = BrowseFilter(outcomes=frozenset(args.outcomes or ()), cases=frozenset(args.cases or ()))
    total = 0
    try:
        if args.batch:
            one = store.batch_summary(args.batch, damaged=damaged)
            if one is None:
                raise UserError(f"no batch {args.batch} in {store.path}")
            batches = [one]
        elif flt.active:
            total = count_batches(store, flt)
            page = batches_page(store, flt, Sort("started", True), limit=min(args.limit, total))
            batches = [b for item in page if (b := _summary(store, item.id, damaged))]
        else:
            total = count_batches(store)
            batches = store.list_batches(limit=args.limit, damaged=damaged)
    finally:
        store.close()
    if damaged:
        more = f" and {len(damaged) - 3} more" if len(damaged) > 3 else ""
        _say("proctor: " + _one_line(f"left out {len(damaged)} damaged rows of {store.path} "
                                     f"({', '.join(damaged[:3])}{more}): restore the store "
                                     "from a backup to see them"))
    if args.json:
        print(json.dumps([b.model_dump(mode="json") for b in batches], indent=2))
        return EXIT_OK
    if not batches and flt.active:
        print(f"no batch in {store.path} holds {_picked(flt)}")
    elif not batches:
        print(f"no batches in {store.path} yet: run `proctor run examples/demo -v`")
    for batch in batches:
        print(f"{batch.batch_id}  {batch.trigger:<6} {batch.status:<11} {batch.started_at or ''}")
        for run in batch.runs:
            if flt.cases and run.case_id not in flt.cases:
                continue
            trials = [t for t in run.trials
                      if not flt.outcomes or (t.outcome or RUNNING) in flt.outcomes]
            if flt.outcomes and not trials:
                continue
            d = run.distribution
            rate = "—" if d.pass_rate is None else f"{d.pass_rate:.0%}"
            print(f"  {run.case_id} · {run.variant}  {rate}")
            for t in trials:
                reason = f"  {t.failure.kind}: {t.failure.reason}" if t.failure else ""
                print(f"    {GLYPH.get(t.outcome or '', '●')} {t.id}  #{t.trial} {t.outcome or 'running'}{reason}")
    if (more := total - args.limit) > 0 and not args.batch:
        print(f"… and {plural(more, 'older batch', 'older batches')}: "
              f"`--limit {total}` lists them all")
    return EXIT_OK


def _summary(store: Store, batch_id: str, damaged: list[str]) -> BatchSummary | None:
    """One listed batch, or None (named in `damaged`) when its row cannot be read."""
    try:
        return store.batch_summary(batch_id, damaged=damaged)
    except StoreError:
        damaged.append(f"batch {batch_id}")
        return None


def _picked(flt: BrowseFilter) -> str:
    """What the filter asks for, in words: `a trial that is fail or skipped, of case greet`."""
    words = []
    if flt.outcomes:
        words.append("that is " + " or ".join(sorted(flt.outcomes)))
    if flt.cases:
        words.append("of case " + " or ".join(sorted(flt.cases)))
    return "a trial " + ", ".join(words)


def cmd_rm(args: argparse.Namespace) -> int:
    """Batches (with all they hold) or single trials (with their events), as SPEC says."""
    store = _open_store(args)
    try:
        batches: dict[str, BatchSummary] = {}
        trials: dict[str, str] = {}  # trial id -> its batch
        for given in args.batch_ids:
            located = locate(store, given)
            if located is None:
                raise UserError(f"no batch or trial {given} in {store.path}: nothing deleted")
            if located.kind == "run":
                raise UserError(f"{given} is a run: rm deletes batches or trials; nothing deleted")
            if located.kind == "trial":
                record = store.get_trial(located.trial_id or given)
                if record is not None and record.outcome is None:
                    raise UserError(f"trial {record.id} has not finished: stop it first; "
                                    "nothing deleted")
                trials[located.trial_id or given] = located.batch_id
                continue
            batch = store.batch_summary(located.batch_id)
            if batch is None:
                raise UserError(f"no batch {given} in {store.path}: nothing deleted")
            if batch.status == "running":
                raise UserError(f"batch {batch.batch_id} is running: stop it first (Ctrl-C its "
                                "`proctor run`, or Stop in the studio); nothing deleted")
            batches[batch.batch_id] = batch
        trials = {t: b for t, b in trials.items() if b not in batches}  # going with their batch
        in_batches = sum(len(run.trials) for b in batches.values() for run in b.runs)
        parts = []
        if batches:
            parts.append(f"{', '.join(batches)} ({plural(len(batches), 'batch', 'batches')}, "
                         f"{plural(in_batches, 'trial')})")
        if trials:
            parts.append(f"{', '.join(trials)} ({plural(len(trials), 'trial')})")
        what = " and ".join(parts)
        if not args.yes and not _confirmed(f"delete {what} from {store.path}?"):
            _say("nothing deleted")
            return EXIT_FAIL
        deleted = store.delete_batches(list(batches)) + store.delete_trials(list(trials))
    except StoreError as exc:
        raise UserError(f"{exc}; nothing more deleted") from None
    finally:
        store.close()
    wanted = len(batches) + len(trials)
    print(f"deleted {what}" if deleted == wanted else
          f"deleted {deleted} of {what}: the others were gone already")
    return EXIT_OK


def _confirmed(question: str) -> bool:
    """Ask on the terminal; without one, refuse in one line rather than guess."""
    if not sys.stdin.isatty():
        raise UserError(f"not deleting without asking, and there is no terminal to ask on: "
                        f"add --yes to {question.rstrip('?')}")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_show(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        data = store.trial_json(args.trial_id)
    finally:
        store.close()
    if data is None:
        raise UserError(f"no trial {args.trial_id} in {store.path}")
    if args.json:
        try:
            text = json.dumps(data, indent=2)
        except (ValueError, RecursionError):  # nested deeper than the printer goes
            raise UserError(f"the record of trial {args.trial_id} in {store.path} is damaged "
                            "(nested too deep to print): restore the store from a backup") from None
        print(text)
        return EXIT_OK
    print("\n".join(_record_lines(data, args.trial_id)))
    return EXIT_OK


def _record_lines(data: dict[str, Any], trial_id: str) -> list[str]:
    """`show`'s lines from a stored record, as much of it as is readable."""
    def text(obj: Any, key: str, default: str = "?") -> str:
        value = obj.get(key) if isinstance(obj, dict) else None
        return default if value is None or isinstance(value, (dict, list)) else str(value)

    def items(value: Any) -> list[dict[str, Any]]:
        return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []

    # The id asked for (or the full one it starts); a damaged record's own id may be anything.
    stored_id = data.get("id")
    shown_id = stored_id if isinstance(stored_id, str) and stored_id.startswith(trial_id) else trial_id
    lines = [f"{shown_id}  {text(data, 'case_id')}#{text(data, 'trial')} · "
             f"{text(data, 'variant')}  {text(data, 'outcome', 'running')}"]
    if isinstance(failure := data.get("failure"), dict):
        where = f" ({text(failure, 'where')})" if failure.get("where") else ""
        lines.append(f"  {text(failure, 'kind')}: {text(failure, 'reason')}{where}")
    for span in items(data.get("phases")):
        index = f" {text(span, 'index')}" if span.get("index") is not None else ""
        start, end = span.get("start_ms"), span.get("end_ms")
        took = fmt_ms(end - start) if _is_int(start) and _is_int(end) else "?"
        lines.append(f"  {text(span, 'phase') + index:<12} {text(span, 'status'):<8} {took:>7}  "
                     f"{text(span, 'detail', '')}")
    for v in items(data.get("validations")):
        lines.append(f"  {text(v, 'kind'):<8} {text(v, 'status'):<7} {text(v, 'name')}")
    return lines


GROUP_TRIALS = 5  # trial ids `groups` prints of each group


def cmd_groups(args: argparse.Namespace) -> int:
    """One block per failure group (engine.groups): count, kind, first failing check, an
    example reason, the variants and cases, a few trial ids."""
    from .groups import failure_groups

    store = _open_store(args)
    try:
        found = locate(store, args.batch_id)
        if found is None or found.kind != "batch":
            raise UserError(f"no batch {args.batch_id} in {store.path}: `proctor ls` lists them")
        groups = failure_groups(store, found.batch_id)
    finally:
        store.close()
    if args.json:
        print(json.dumps([g.model_dump(mode="json") for g in groups], indent=2))
        return EXIT_OK
    if not groups:
        print(f"batch {found.batch_id} has no failed or void trial")
    blocks = []
    for g in groups:
        where = f" · {g.where}" if g.where else ""
        void = " (void)" if g.outcome == "infra_error" else ""
        more = f" … and {g.count - GROUP_TRIALS} more" if g.count > GROUP_TRIALS else ""
        blocks.append("\n".join([
            f"{g.count} × {g.kind}{void}{where} · group {g.key}",
            f"  {_one_line(g.reason)}",
            f"  variants: {', '.join(g.variants)} · cases: {', '.join(g.cases)}",
            f"  trials: {' '.join(g.trial_ids[:GROUP_TRIALS])}{more}"]))
    print("\n\n".join(blocks))
    return EXIT_OK


SEARCH_LIMIT, SEARCH_LIMIT_MAX = 50, 10_000


def cmd_search(args: argparse.Namespace) -> int:
    """One line a hit: trial, case, variant, outcome, where, and the snippet with its matches
    marked (bold on a terminal, «» otherwise)."""
    from .store.search import QueryError

    store = _open_store(args)
    try:
        try:
            store.index_for_search(_indexing_progress())
        except StoreError as e:  # a read-only store, a full disk: search what is indexed
            _say(f"proctor: {_one_line(e)}; {store.search_pending():,} trials are not indexed, "
                 "so their hits are missing")
        hits = store.search(args.query, limit=args.limit)
    except QueryError as e:
        raise UserError(f"the query cannot be searched: {e}") from None
    finally:
        store.close()
    if args.json:
        print(json.dumps([h.model_dump(mode="json") for h in hits], indent=2))
        return EXIT_OK
    if not hits:
        _say("no trial matches")
    bold = sys.stdout.isatty()
    for h in hits:
        snippet, last = "", 0
        for start, end in h.marks:
            match = h.snippet[start:end]
            snippet += h.snippet[last:start] + (f"\x1b[1m{match}\x1b[0m" if bold else f"«{match}»")
            last = end
        snippet += h.snippet[last:]
        place = h.where if h.position is None else f"{h.where} {h.position}"
        if h.field != h.where:
            place += f" {h.field}"
        print(f"{h.trial_id}  {h.case_id}  {h.variant}  {h.outcome or RUNNING}  {place}  {snippet.strip()}")
    return EXIT_OK


def _indexing_progress() -> Callable[[int, int], None]:
    """Say on stderr how far indexing an older store for search has got: a line updated in
    place on a terminal, a line at each tenth otherwise."""
    said = [-1]

    def progress(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if sys.stderr.isatty():
            end = "\n" if done >= total else ""
            _say_raw(f"\rindexing {total:,} trials for search (once): {done:,} done{end}")
        elif tenth != said[0]:
            said[0] = tenth
            _say(f"indexing {total:,} trials for search (once): {done:,} done")

    return progress


def _say_raw(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


def cmd_replay(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        events = replay_events(store, args.trial_id)
    finally:
        store.close()
    if events is None:
        raise UserError(f"no trial {args.trial_id} in {store.path}")
    printer = _Printer(verbose=True, quiet=False)  # the very lines `run -v` printed
    with _StopSignals():  # Ctrl-C, SIGTERM, SIGHUP: exit 130 without a traceback
        for wait, event in zip(delays(events, args.speed), events):
            if printer.quiet:  # the reader went away (`| head`, a closed terminal)
                break
            if wait:
                time.sleep(wait)
            printer(event)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from .bundle import export_bundle

    store = _open_store(args)
    try:
        trials = export_bundle(store, args.ids, args.output)
    finally:
        store.close()
    print(f"wrote {args.output}: {plural(trials, 'trial')}")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    """Each file is its own transaction: one refused leaves the store as it was before that
    file, and the others are still imported; any refusal exits 2."""
    from .importer import ImportRefused, add, prepared, report_line

    refused = 0
    store = _open_store(args)
    try:
        for path in args.files:
            try:
                portable = prepared(path, threshold=args.threshold)
                print(report_line(path, portable, add(store, path, portable)), flush=True)
            except ImportRefused as e:
                refused += 1
                _say(f"proctor: {_one_line(e)}")
    finally:
        store.close()
    return EXIT_USAGE if refused else EXIT_OK


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin; a signal (the client's SIGTERM) ends it too. Then
    the batches still running are cancelled and closed, signals only noted meanwhile."""
    from .mcp.server import ProctorServer

    if not args.folder.is_dir():
        raise UserError(f"{args.folder}: no such folder")
    if args.config and not args.config.is_file():
        raise UserError(f"{args.config}: no such config file")
    store = _open_store(args)
    stop = _StopSignals()
    try:
        server = ProctorServer(args.folder, store, args.config)
        with stop:
            try:
                server.run()
            except KeyboardInterrupt:
                pass
            finally:
                with stop.held():
                    server.close()
    finally:
        store.close()
    return EXIT_INTERRUPTED if stop.received else EXIT_OK


def cmd_cleanup(args: argparse.Namespace) -> int:
    client = connect()
    store = _open_store(args)
    try:
        print(Engine(store, client).sweep(everything=args.all))
    finally:
        store.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
