"""Search over a store of real trials recorded by the engine in Docker: a command found by a
word of its output, scopes, filters, labels, and a redacted secret that stays unfindable."""

from __future__ import annotations

import sqlite3
import textwrap
from datetime import datetime, timezone

import pytest

from engine.models import Note
from engine.store import Store, SCHEMA_VERSION
from tests.conftest import suite_toml

SECRET_VALUE = "search-secret-" + "Zq8Wm3Lk5Vt2Hp9R"  # a host variable named *_TOKEN: redacted
AGENT = textwrap.dedent("""
    printf '{"type":"command","command":"pip install zebracorn","exitCode":1,"output":"ERROR: no matching distribution for zebracorn quokkaphrase"}\\n'
    printf '{"type":"message","role":"assistant","text":"I cannot reach the package index, so I gave up on %s"}\\n' "$PROCTOR_CASE_WORD"
    printf '{"type":"toolCall","name":"read_file","input":{"path":"notes/wombat.txt"},"output":"wombat notes"}\\n'
    printf '{"type":"fileChange","path":"src/widget_loader.py","change":"add"}\\n'
    printf '{"type":"command","command":"env | grep TOKEN","exitCode":0,"output":"PROCTOR_SEARCH_TOKEN=SECRET"}\\n'
    echo '{"type":"finished","reason":"done"}'
""").replace("SECRET", SECRET_VALUE)

EVAL = f"""
from pathlib import Path
from engine import evaluation, git

@evaluation(workspace=git(init=True), files={{".agent/run.sh": Path("agent.sh")}},
            env={{"PROCTOR_CASE_WORD": "platypus"}})
def installs_a_package(c):
    c.send("install zebracorn, and keep {SECRET_VALUE} out of it")
    c.exec("echo marsupialevidence; exit 3").to_succeed()

@evaluation(workspace=git(init=True), files={{".agent/run.sh": Path("agent.sh")}},
            env={{"PROCTOR_CASE_WORD": "echidna"}})
def writes_docs(c):
    c.send("write the docs")
    c.exec("true").to_succeed()
"""

TOML = suite_toml({"scripted": "sh .agent/run.sh", "scripted-b": "sh .agent/run.sh"})


@pytest.fixture(scope="module")
def recorded(docker_client, tmp_path_factory):
    """One batch (two cases by two variants) recorded into a store, shared by this module's
    tests: they only read it, but for the label test's note."""
    from engine.batch import BatchPlan, Engine
    from engine.config import find_config, load_config
    from engine.spec import load_cases

    folder = tmp_path_factory.mktemp("search")
    (folder / "test.eval.py").write_text(EVAL)
    (folder / "proctor.toml").write_text(TOML)
    (folder / "agent.sh").write_text(AGENT)
    patch = pytest.MonkeyPatch()
    patch.setenv("PROCTOR_SEARCH_TOKEN", SECRET_VALUE)
    try:
        config = load_config(find_config(folder / "test.eval.py"))
        store = Store(folder / "proctor.db")
        plan = BatchPlan(cases=load_cases([folder / "test.eval.py"]),
                         variants=config.select_variants(None), config=config, trials=1)
        summary = Engine(store, docker_client).run(plan, lambda e: None)
        store.flush()
    finally:
        patch.undo()
    outcomes = {(r.case_id, r.variant): t.outcome for r in summary.runs for t in r.trials}
    assert outcomes == {("installs_a_package", "scripted"): "fail", ("installs_a_package", "scripted-b"): "fail",
                        ("writes_docs", "scripted"): "pass", ("writes_docs", "scripted-b"): "pass"}, outcomes
    yield store, summary
    store.close()


def where(hits):
    return sorted({(h.case_id, h.variant, h.where, h.field) for h in hits})


def test_a_command_is_found_by_a_word_of_its_output(recorded):
    store, _ = recorded
    hits = store.search("quokkaphrase")
    assert {(h.where, h.field) for h in hits} == {("item", "output")}
    assert len(hits) == 4  # each case's agent printed it, under each variant
    hit = hits[0]
    assert hit.snippet[hit.marks[0][0]:hit.marks[0][1]].lower() == "quokkaphrase"
    record = store.get_trial(hit.trial_id)
    assert record.trajectory[hit.position].command == "pip install zebracorn"


def test_each_scope_narrows_to_its_field(recorded):
    store, _ = recorded
    assert {h.field for h in store.search("zebracorn")} >= {"command", "output", "prompt"}
    assert {h.field for h in store.search("in:command zebracorn")} == {"command"}
    assert {h.field for h in store.search("in:prompt zebracorn")} == {"prompt"}
    assert {h.field for h in store.search('in:message "I cannot reach"')} == {"message"}
    assert {h.field for h in store.search("in:tool wombat")} == {"tool"}
    assert {h.field for h in store.search("in:output wombat")} == {"output"}
    assert {h.field for h in store.search("in:path widget_loader.py")} == {"path"}
    assert {(h.where, h.field) for h in store.search("in:evidence marsupialevidence")} == {("evidence", "evidence")}
    reasons = store.search("in:reason exited")
    assert reasons and {(h.where, h.position, h.case_id) for h in reasons} == {("reason", None, "installs_a_package")}
    assert store.search("in:command wombat") == []
    # A phrase matches its words in order only.
    assert store.search('"cannot reach"') and store.search('"reach cannot"') == []


def test_filters_narrow_to_their_trials(recorded):
    store, summary = recorded
    assert {(h.case_id, h.outcome) for h in store.search("outcome:fail zebracorn")} == {("installs_a_package", "fail")}
    assert {h.case_id for h in store.search("outcome:pass zebracorn")} == {"writes_docs"}
    assert {h.case_id for h in store.search("case:writes_docs zebracorn")} == {"writes_docs"}
    assert {h.variant for h in store.search("variant:scripted-b zebracorn")} == {"scripted-b"}
    assert {h.variant for h in store.search("variant:scripted zebracorn")} == {"scripted"}
    assert where(store.search("platypus")) == [("installs_a_package", v, "item", "message")
                                               for v in ("scripted", "scripted-b")]
    assert store.search(f"batch:{summary.batch_id[:6]} platypus") and \
        store.search("batch:b_nosuchbatch platypus") == []
    assert store.search("platypus", batch_id="b_other") == []
    # Newest first: the trials come in the reverse of the order they were saved.
    hits = store.search("zebracorn in:command")
    assert len({h.trial_id for h in hits}) == 4


def test_label_filters_to_the_trials_whose_note_carries_it(recorded):
    store, summary = recorded
    labelled = next(t.id for r in summary.runs if r.variant == "scripted-b" for t in r.trials
                    if r.case_id == "writes_docs")
    store.set_note(Note(target=labelled, label="env problem", text="the index was down",
                        updated_at=datetime.now(timezone.utc).isoformat())).result()
    assert {h.trial_id for h in store.search('label:"env problem" zebracorn')} == {labelled}
    assert store.search('label:"agent gave up" zebracorn') == []
    store.set_note(Note(target=labelled, updated_at="x")).result()  # takes it away again


def test_a_redacted_secret_is_not_findable_by_its_value(recorded):
    store, _ = recorded
    assert store.search("PROCTOR_SEARCH_TOKEN")  # the line the agent printed is indexed
    for query in (SECRET_VALUE, "Zq8Wm3Lk5Vt2Hp9R", '"search secret"', "in:prompt Zq8Wm3Lk5Vt2Hp9R"):
        assert store.search(query) == [], query
    assert {h.field for h in store.search("redacted")} >= {"output", "prompt"}


def test_a_store_written_before_the_index_migrates_and_becomes_searchable(recorded, tmp_path):
    store, _ = recorded
    old = tmp_path / "old.db"
    with sqlite3.connect(store.path) as source, sqlite3.connect(old) as copy:
        source.backup(copy)
    with sqlite3.connect(old) as conn:  # as schema 3 wrote it: no index
        conn.execute("DROP TABLE search_index")
        conn.execute("DROP TABLE search_trial")
        conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    with Store(old) as migrated:  # opens at once: the index is filled after, with progress
        assert migrated.search_pending() == 4 and migrated.search("quokkaphrase") == []
        progress: list[tuple[int, int]] = []
        migrated.index_for_search(lambda done, total: progress.append((done, total)))
        assert progress[-1] == (4, 4) and migrated.search_pending() == 0
        assert where(migrated.search("quokkaphrase")) == where(store.search("quokkaphrase"))
        assert [h.trial_id for h in migrated.search("in:evidence marsupialevidence")] != []
    with sqlite3.connect(old) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
