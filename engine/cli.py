"""`proctor …`: run, ls, show, cleanup.

Exit status: 0 every scored trial passed; 1 a trial failed; 3 infra errors and
no failures; 2 a usage or eval-file error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from datetime import datetime
from importlib.metadata import entry_points
from pathlib import Path
from typing import Sequence

from .batch import BatchPlan, Engine, detect_trigger
from .config import find_config, load_config
from .events import Event, PhaseEnded, PhaseProgress, TrialFinished
from .models import BatchSummary
from .recorder import fmt_ms
from .sandbox.client import DockerUnavailable, connect
from .spec import EvalFileError, find_eval_files, load_cases
from .store import Store, StoreError, default_store_path

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INFRA, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
GLYPH = {"pass": "✓", "fail": "✗", "infra_error": "○", "skipped": "–"}


class UserError(Exception):
    """One line for the user, then exit with `code`."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (EvalFileError, StoreError) as e:
        print(f"proctor: {e}", file=sys.stderr)
        return EXIT_USAGE
    except DockerUnavailable as e:
        print(f"proctor: {e}", file=sys.stderr)
        return EXIT_INFRA
    except UserError as e:
        print(f"proctor: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `proctor ls --json | head`
        sys.stderr.close()
        return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="proctor", description="Evaluate AI coding agents in Docker sandboxes.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--store", type=Path, help="the SQLite store (default: $PROCTOR_STORE or the user data folder)")
        p.set_defaults(func=func)
        return p

    run = command("run", cmd_run, "start a batch and wait for it")
    run.add_argument("paths", nargs="+", help="eval files or folders holding *.eval.py")
    run.add_argument("--case", action="append", dest="cases", help="only this case (repeatable)")
    run.add_argument("--variant", action="append", dest="variants", help="only this variant (repeatable)")
    run.add_argument("--trials", type=_positive, help="trials per run (overrides the eval file)")
    run.add_argument("--concurrency", type=_positive, help="trials running at once")
    run.add_argument("-v", "--verbose", action="store_true", help="print every phase as it happens")
    run.add_argument("--json", action="store_true", help="print the batch as JSON when it ends")
    run.add_argument("--config", type=Path, help="proctor.toml (default: next to the eval file or above)")

    ls = command("ls", cmd_ls, "batches, runs and trials in the store")
    ls.add_argument("--batch", help="one batch")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--limit", type=_positive, default=20)

    show = command("show", cmd_show, "one trial's record")
    show.add_argument("trial_id")
    show.add_argument("--json", action="store_true")

    # Commands other packages add (the studio), found by entry point so the engine imports none of them.
    for entry in entry_points(group="proctor.commands"):
        entry.load()(sub)

    cleanup = command("cleanup", cmd_cleanup, "remove every container, network and volume the engine left behind")
    cleanup.add_argument("--all", action="store_true",
                         help="also remove those of engines still running (a studio, another run)")
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
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
    cases = load_cases(files, args.cases)
    variants = config.select_variants(args.variants)
    plan = BatchPlan(cases=cases, variants=variants, config=config, trials=args.trials,
                     concurrency=args.concurrency, trigger=detect_trigger("cli"))
    client = connect()
    store = _open_store(args)
    try:
        engine = Engine(store, client)
        engine.check_images(plan)
        swept = engine.sweep()
        if swept.trials and not args.json:
            print(f"closed {len(swept.trials)} trials left running by a stopped engine", file=sys.stderr)
        handle = engine.plan(plan)
        printer = _Printer(verbose=args.verbose, quiet=args.json)
        result: dict[str, BatchSummary] = {}
        errors: list[BaseException] = []
        done = threading.Event()

        def work() -> None:
            try:
                result["summary"] = engine.run(plan, handle, printer)
            except BaseException as e:  # surfaced on the main thread below
                errors.append(e)
            finally:
                done.set()

        runner = threading.Thread(target=work, name="batch")
        runner.start()
        interrupted = False
        # Wait on an Event, not on runner.join(): a KeyboardInterrupt inside
        # Thread.join() can leave the thread marked as stopped while it still
        # runs (CPython gh-90882), and the batch's result would be read too early.
        while not done.is_set():
            try:
                done.wait(0.2)
            except KeyboardInterrupt:
                if not interrupted:
                    interrupted = True
                    print("\ninterrupted: stopping running trials, skipping the rest…", file=sys.stderr)
                    handle.cancel()
        if errors:
            raise errors[0]
        summary = result["summary"]
    finally:
        store.close()
    if args.json:
        print(json.dumps(summary.model_dump(mode="json"), indent=2))
    else:
        _print_grid(summary)
    if interrupted:
        return EXIT_INTERRUPTED
    return _exit_code(summary)


def _exit_code(summary: BatchSummary) -> int:
    outcomes = [t.outcome for run in summary.runs for t in run.trials]
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
                print(line, flush=True)

    def line(self, event: Event) -> str | None:
        if not hasattr(event, "trial_id"):
            return None
        tag = f"[{event.case_id}#{event.trial} {event.variant}]"  # type: ignore[union-attr]
        clock = datetime.fromtimestamp(event.at / 1000).strftime("%H:%M:%S")
        if isinstance(event, TrialFinished):
            if self.verbose and event.outcome != "skipped":
                return None  # teardown already said it
            reason = f" · {event.failure.kind}: {event.failure.reason}" if event.failure else ""
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
    try:
        if args.batch:
            one = store.batch_summary(args.batch)
            if one is None:
                raise UserError(f"no batch {args.batch} in {store.path}")
            batches = [one]
        else:
            batches = store.list_batches(limit=args.limit)
    finally:
        store.close()
    if args.json:
        print(json.dumps([b.model_dump(mode="json") for b in batches], indent=2))
        return EXIT_OK
    if not batches:
        print(f"no batches in {store.path} yet: run `proctor run examples/demo -v`")
    for batch in batches:
        print(f"{batch.batch_id}  {batch.trigger:<6} {batch.status:<11} {batch.started_at or ''}")
        for run in batch.runs:
            d = run.distribution
            rate = "—" if d.pass_rate is None else f"{d.pass_rate:.0%}"
            print(f"  {run.case_id} · {run.variant}  {rate}")
            for t in run.trials:
                reason = f"  {t.failure.kind}: {t.failure.reason}" if t.failure else ""
                print(f"    {GLYPH.get(t.outcome or '', '●')} {t.id}  #{t.trial} {t.outcome or 'running'}{reason}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        data = store.trial_json(args.trial_id)
    finally:
        store.close()
    if data is None:
        raise UserError(f"no trial {args.trial_id} in {store.path}")
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print(f"{data['id']}  {data['case_id']}#{data['trial']} · {data['variant']}  {data['outcome']}")
    if data.get("failure"):
        f = data["failure"]
        print(f"  {f['kind']}: {f['reason']}" + (f" ({f['where']})" if f.get("where") else ""))
    for span in data["phases"]:
        index = f" {span['index']}" if span.get("index") is not None else ""
        print(f"  {span['phase'] + index:<12} {span['status']:<8} {fmt_ms(span['end_ms'] - span['start_ms']):>7}  {span['detail']}")
    for v in data["validations"]:
        print(f"  {v['kind']:<8} {v['status']:<7} {v['name']}")
    return EXIT_OK


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
