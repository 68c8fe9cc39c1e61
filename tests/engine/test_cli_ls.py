"""`proctor ls` on a store of many batches (issue 11, item 9): `--limit N` newest first and
how many more there are, `--outcome` and `--case` pick batches holding such trials and list
only those trials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.models import Failure, TrialRecord
from engine.store import Store
from tests.engine.test_cli import cli

OUTCOME_OF = ["pass", "fail", "infra_error", "skipped"]


def many_batches(path: Path, count: int = 25) -> None:
    """Batch i (b_00 oldest … b_24 newest) holds a run of case greet_i%3 with two trials:
    a pass and one of OUTCOME_OF[i % 4]."""
    with Store(path) as store:
        for i in range(count):
            batch, run, case = f"b_{i:02d}", f"r_{i:02d}", f"greet_{i % 3}"
            store.create_batch(batch, "cli", "", f"2026-11-{1 + i:02d}T10:00:00.000Z")
            store.create_run(run, batch, case, "scripted", 0)
            for n, outcome in enumerate(["pass", OUTCOME_OF[i % 4]], 1):
                failure = (None if outcome in ("pass", "skipped")
                           else Failure(kind="assertion", reason="exit 1"))
                store.save_trial(TrialRecord(id=f"t_{i:02d}{n}", batch_id=batch, run_id=run,
                                             case_id=case, variant="scripted", trial=n,
                                             trigger="cli", outcome=outcome, failure=failure))
            store.finish_batch(batch, "finished", f"2026-11-{1 + i:02d}T10:01:00.000Z")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ls") / "proctor.db"
    many_batches(path)
    return path


def batch_lines(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines() if line.startswith("b_")]


def trial_ids(out: str) -> list[str]:
    return [word for word in out.split() if word.startswith("t_")]


def test_ls_lists_the_newest_20_and_says_how_many_more(store_path, capsys):
    code, out, err = cli(capsys, "ls", "--store", store_path)
    assert code == 0 and err == ""
    assert batch_lines(out) == [f"b_{i:02d}" for i in range(24, 4, -1)]
    assert "5 older batches" in out.splitlines()[-1] and "--limit 25" in out


def test_ls_limit_n(store_path, capsys):
    code, out, _ = cli(capsys, "ls", "--limit", "3", "--store", store_path)
    assert batch_lines(out) == ["b_24", "b_23", "b_22"]
    assert "22 older batches" in out
    _, out, _ = cli(capsys, "ls", "--limit", "25", "--store", store_path)
    assert len(batch_lines(out)) == 25 and "older" not in out


def test_ls_outcome_picks_batches_and_their_trials(store_path, capsys):
    code, out, err = cli(capsys, "ls", "--outcome", "fail", "--limit", "3", "--store", store_path)
    assert code == 0 and err == ""
    # fail is batch i with i % 4 == 1: 21, 17, 13 are the newest three, of six
    assert batch_lines(out) == ["b_21", "b_17", "b_13"]
    assert trial_ids(out) == ["t_212", "t_172", "t_132"]  # the passes beside them are left out
    assert "3 older batches" in out


def test_ls_outcome_repeats(store_path, capsys):
    _, out, _ = cli(capsys, "ls", "--outcome", "skipped", "--outcome", "infra_error",
                    "--store", store_path)
    assert batch_lines(out) == [f"b_{i:02d}" for i in range(24, -1, -1) if i % 4 in (2, 3)]


def test_ls_case_picks_batches_of_that_case(store_path, capsys):
    _, out, _ = cli(capsys, "ls", "--case", "greet_1", "--store", store_path)
    assert batch_lines(out) == [f"b_{i:02d}" for i in range(24, -1, -1) if i % 3 == 1]


def test_ls_outcome_and_case_together(store_path, capsys):
    _, out, _ = cli(capsys, "ls", "--case", "greet_0", "--outcome", "fail", "--store", store_path)
    assert batch_lines(out) == ["b_21", "b_09"]  # i % 3 == 0 and i % 4 == 1


def test_ls_filter_json_lists_whole_batches(store_path, capsys):
    _, out, _ = cli(capsys, "ls", "--outcome", "fail", "--limit", "2", "--json",
                    "--store", store_path)
    batches = json.loads(out)
    assert [b["batch_id"] for b in batches] == ["b_21", "b_17"]
    assert [t["outcome"] for t in batches[0]["runs"][0]["trials"]] == ["pass", "fail"]


def test_ls_filter_that_picks_nothing_says_so(store_path, capsys):
    code, out, err = cli(capsys, "ls", "--case", "nope", "--store", store_path)
    assert code == 0 and err == ""
    assert "no batch" in out and "nope" in out and "proctor run examples/demo" not in out


def test_ls_unknown_outcome_is_a_usage_error(store_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli(capsys, "ls", "--outcome", "passed", "--store", store_path)
    assert exited.value.code == 2
    assert "infra_error" in capsys.readouterr().err  # the choices are named
