"""`engine.run_batch(...)`: what `proctor run` does, from Python. Its batches carry the trigger
`api`, under CI too (`detect_trigger` turns only the CLI's `cli` into `ci`).

    from engine import run_batch

    summary = run_batch(["evals/"], variants=["scripted"], trials=3)
    for run in summary.runs:
        print(run.case_id, run.variant, run.distribution.pass_rate)

Mistakes raise what the CLI reports in one line: EvalFileError (an eval file or proctor.toml,
naming the file and line), StoreError, DockerUnavailable, and ValueError for an argument out
of bounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .batch import BatchPlan, Engine
from .config import Config, find_config, load_config
from .events import EventSink
from .models import BatchSummary
from .sandbox.client import connect
from .spec import MAX_CONCURRENCY, MAX_TRIALS, EvalFileError, find_eval_files, load_cases
from .store import Store, default_store_path


def run_batch(paths: str | Path | Sequence[str | Path], *,
              cases: Sequence[str] | None = None,
              variants: Sequence[str] | None = None,
              trials: int | None = None,
              concurrency: int | None = None,
              store: Store | str | Path | None = None,
              config: Config | str | Path | None = None,
              on_event: EventSink | None = None) -> BatchSummary:
    """Run the cases of the eval files (or folders of `*.eval.py`) at `paths` under their
    variants, wait for the batch and return it as `proctor run --json` prints it.

    `cases` / `variants` pick by id and name (default: all); `trials` and `concurrency`
    override the eval file and proctor.toml; `store` is a Store (left open) or a file
    (default: $PROCTOR_STORE or the user data folder); `config` is a proctor.toml path or a
    loaded Config (default: next to the first eval file or above); `on_event` hears every
    event, on the batch's threads. Ctrl-C stops the batch, closes it and is raised here.
    """
    files = find_eval_files([paths] if isinstance(paths, (str, Path)) else list(paths))
    if isinstance(config, Config):
        loaded = config
    else:
        if config is not None and not Path(config).is_file():
            raise EvalFileError("no such config file", Path(config))
        loaded = load_config(Path(config) if config is not None else find_config(files[0]))
    plan = BatchPlan(cases=load_cases(files, _names(cases, "cases")),
                     variants=loaded.select_variants(_names(variants, "variants")),
                     config=loaded, trials=_bounded(trials, "trials", MAX_TRIALS),
                     concurrency=_bounded(concurrency, "concurrency", MAX_CONCURRENCY))
    own = not isinstance(store, Store)
    opened = Store(Path(store) if store is not None else default_store_path()) if own else store
    assert isinstance(opened, Store)
    try:
        opened.check_writable()  # before Docker and the batch: nothing could be saved
        client = connect()
        engine = Engine(opened, client)
        try:
            if loaded.cluster is None:  # a cluster's nodes take their images from their own daemons
                engine.check_images(plan)
            engine.sweep()
            return engine.run(plan, on_event)
        finally:
            engine.gateways.close()
            client.close()
    finally:
        if own:
            opened.close()


def _names(given: Sequence[str] | None, what: str) -> list[str] | None:
    """Ids or names as a list; a bare string is one name, not its characters. An empty list
    is a mistake, not "all": a filter that came out empty must not run everything."""
    if given is None:
        return None
    names = [given] if isinstance(given, str) else list(given)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what} must be names (strings), not {names!r:.80}")
    if not names:
        raise ValueError(f"{what} is empty: name at least one, or pass None for all")
    return names


def _bounded(value: int | None, what: str, most: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValueError(f"{what} must be a whole number from 1 to {most:,}, not {value!r:.40}")
    return value
