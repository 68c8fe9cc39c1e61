"""`engine.run_batch(...)`, the Python API: a real batch in Docker, recorded with the trigger
`api` even under CI (detect_trigger turns only the CLI's runs into `ci`); its mistakes raise
what the CLI reports in one line."""

from __future__ import annotations

import textwrap

import pytest

import engine
from engine import EvalFileError, run_batch
from engine.events import BatchFinished, BatchStarted, TrialFinished
from engine.store import Store
from tests.conftest import suite_toml

CASES = """
    from engine import evaluation


    @evaluation(trials=1)
    def passes(c):
        c.send("hi")
        c.exec("true").to_succeed()


    @evaluation(trials=1)
    def fails(c):
        c.send("hi")
        c.exec("false").to_succeed()
"""


@pytest.fixture
def suite_dir(tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "tiny.eval.py").write_text(textwrap.dedent(CASES))
    (folder / "proctor.toml").write_text(suite_toml({"scripted": "true", "other": "true"}))
    return folder


def test_run_batch_records_the_trigger_api_even_under_ci(docker_client, suite_dir, tmp_path, monkeypatch):
    for name in ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE"):
        monkeypatch.setenv(name, "true")
    heard = []
    summary = run_batch(suite_dir, cases=["passes"], variants="scripted", trials=2,
                        store=tmp_path / "proctor.db", on_event=heard.append)
    assert summary.trigger == "api" and summary.status == "finished"
    (run,) = summary.runs
    assert (run.case_id, run.variant) == ("passes", "scripted")
    assert [t.outcome for t in run.trials] == ["pass", "pass"]
    assert isinstance(heard[0], BatchStarted) and isinstance(heard[-1], BatchFinished)
    assert sum(isinstance(e, TrialFinished) for e in heard) == 2
    with Store(tmp_path / "proctor.db") as store:  # what the store kept, read anew
        (stored,) = store.list_batches()
        assert stored.batch_id == summary.batch_id and stored.trigger == "api"
        record = store.trial_json(run.trials[0].id)
        assert record["trigger"] == "api"


def test_run_batch_takes_an_open_store_and_leaves_it_open(docker_client, suite_dir, tmp_path):
    with Store(tmp_path / "proctor.db") as store:
        summary = run_batch([suite_dir / "tiny.eval.py"], variants=["other"], store=store)
        assert [(r.case_id, r.variant) for r in summary.runs] == [("passes", "other"), ("fails", "other")]
        assert [r.distribution.pass_rate for r in summary.runs] == [1.0, 0.0]
        assert store.batch_summary(summary.batch_id).trigger == "api"  # still open


def test_run_batch_is_the_public_api():
    assert "run_batch" in engine.__all__ and engine.run_batch is run_batch


@pytest.mark.parametrize("options, error, words", [
    ({"trials": 0}, ValueError, "trials must be a whole number from 1 to 10,000"),
    ({"trials": True}, ValueError, "trials must be"),
    ({"concurrency": 2000}, ValueError, "concurrency must be a whole number from 1 to 1,024"),
    ({"cases": ["nope"]}, EvalFileError, "nope"),
    ({"variants": ["nope"]}, EvalFileError, "no variant named nope"),
    ({"cases": [1]}, ValueError, "cases must be names"),
    ({"config": "missing.toml"}, EvalFileError, "no such config file"),
    ({"cases": []}, ValueError, "cases is empty"),  # a filter that came out empty runs nothing
    ({"variants": ()}, ValueError, "variants is empty"),
], ids=["trials-zero", "trials-bool", "concurrency", "case", "variant", "case-type", "config",
        "cases-empty", "variants-empty"])
def test_mistakes_raise_before_anything_runs(suite_dir, tmp_path, options, error, words):
    store = tmp_path / "proctor.db"
    with pytest.raises(error, match=None) as raised:
        run_batch(suite_dir, store=store, **options)
    assert words in str(raised.value)
    assert not store.exists(), "a mistake still opened the store"


def test_a_path_that_does_not_exist_is_an_eval_file_error(tmp_path):
    with pytest.raises(EvalFileError, match="no such file or folder"):
        run_batch(tmp_path / "nowhere.eval.py", store=tmp_path / "proctor.db")
