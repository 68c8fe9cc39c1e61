"""Search without Docker: the query language, hostile queries, and the index kept current by
every store write that changes a trial (save again, import, delete, void)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from engine.models import Failure, TrajectoryItem, TrialRecord, TurnRecord, Validation
from engine.portable import Portable, PortableBatch, PortableRun
from engine.store import Store, StoreError
from engine.store.search import MAX_QUERY_CHARS, QueryError, parse_query


def record(trial_id: str, batch_id: str = "b_1", word: str = "kangaroo", outcome: str = "fail",
           started_at: str = "2026-11-29T17:40:47.120Z", case_id: str = "c") -> TrialRecord:
    return TrialRecord(
        id=trial_id, batch_id=batch_id, run_id=f"r_{batch_id}", case_id=case_id, variant="v",
        trial=1, trigger="cli", outcome=outcome, started_at=started_at,
        failure=Failure(kind="assertion", reason=f"pytest exited 1 on {word}") if outcome == "fail" else None,
        turns=[TurnRecord(index=0, prompt=f"fix the {word} module", status="completed", ms=1)],
        trajectory=[TrajectoryItem(kind="message", turn=0, role="assistant", text=f"looking at {word}"),
                    TrajectoryItem(kind="command", turn=0, command=f"grep -r {word} .", output="src/x.py: found")],
        validations=[Validation(kind="command", name="pytest", status="failed",
                                evidence={"stdout": f"FAILED test_{word}", "exit_code": 1})])


def index_rows(store: Store, word: str) -> int:
    """Rows of the index holding `word`, read straight from the table."""
    store.flush()
    with sqlite3.connect(store.path) as conn:
        return conn.execute("SELECT count(*) FROM search_index WHERE search_index MATCH ?",
                            (f'"{word}"',)).fetchone()[0]


def test_the_query_language_parses_words_phrases_scopes_and_filters():
    query = parse_query('in:command pip "I cannot" outcome:fail case:c1 variant:mini label:"env problem" batch:b_1')
    assert query.phrases == ["pip", "I cannot"]
    assert (query.scopes, query.outcomes, query.cases, query.variants, query.labels, query.batches) == (
        ["command"], ["fail"], ["c1"], ["mini"], ["env problem"], ["b_1"])


@pytest.mark.parametrize("text, says", [
    ("colour:red pip", "unknown filter colour:"),
    ("in:elsewhere pip", "in:elsewhere is not a place"),
    ("outcome:maybe pip", "outcome:maybe is not an outcome"),
    ("case: pip", "case: needs a value"),
    ("outcome:fail", "no words to search for"),
    ("x" * (MAX_QUERY_CHARS + 1), "at most"),
    (" ".join(["w"] * 40), "more than 32 terms"),
])
def test_a_malformed_query_is_one_sentence(text, says):
    with pytest.raises(QueryError, match=says) as caught:
        parse_query(text)
    assert "\n" not in str(caught.value)


HOSTILE = ['"unbalanced', 'kangaroo"', 'kangaroo OR wombat', 'NEAR(kangaroo wombat)', '-kangaroo',
           'kangaroo*', '*', '"', '""', '(kangaroo', 'kangaroo)', '^kangaroo', 'body:kangaroo',
           '"kangaroo" AND "x"', '\x00kangaroo\x00', 'kan\x00garoo', "'; DROP TABLE trial; --",
           'kangaroo' + ' ' * 900, '\u202e\ufffdkangaroo', '"in:command kangaroo"', '12:30 kangaroo']


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_query_is_a_query_error_or_a_plain_search(store, text):
    store.save_trial(record("t_1")).result()
    try:
        hits = store.search(text)
    except QueryError:
        return
    # Operators are text: a hit is only ever a text holding the query's words.
    assert all("kangaroo" in h.snippet.lower() or "or" in h.snippet.lower() for h in hits)
    assert store.search("kangaroo")  # the store and its index still work


def test_ten_thousand_characters_and_a_nul_are_refused_in_one_sentence(store):
    with pytest.raises(QueryError):
        store.search("kangaroo " * 1200)
    assert store.search("kan\x00garoo") == []  # a NUL separates words like a space


def test_operators_are_searched_as_text(store):
    store.save_trial(record("t_1", word="NEAR")).result()
    store.save_trial(record("t_2", word="quoll")).result()
    assert {h.trial_id for h in store.search("NEAR")} == {"t_1"}
    assert store.search("quoll OR NEAR") == []  # OR is a word that must match too


def test_a_hit_names_its_place_and_marks_the_match(store):
    store.save_trial(record("t_1")).result()
    hits = {(h.where, h.position, h.field): h for h in store.search("kangaroo")}
    assert set(hits) == {("reason", None, "reason"), ("prompt", 0, "prompt"), ("item", 0, "message"),
                         ("item", 1, "command"), ("evidence", 0, "evidence")}
    assert list(hits)[0] == ("reason", None, "reason")  # within a trial: the reason first
    for hit in hits.values():
        assert [hit.snippet[a:b] for a, b in hit.marks] == ["kangaroo"]
    long = record("t_2", word="numbat").model_copy(update=dict(trajectory=[TrajectoryItem(
        kind="command", turn=0, command="make", output="x\n" * 5_000 + "the numbat line" + " y" * 500)]))
    store.save_trial(long).result()
    [hit] = store.search("in:output numbat")
    assert len(hit.snippet) <= 200 and "\n" not in hit.snippet
    assert [hit.snippet[a:b] for a, b in hit.marks] == ["numbat"]


def test_pages_come_newest_trial_first(store):
    for n in range(5):
        store.save_trial(record(f"t_{n}")).result()
    trials = [h.trial_id for h in store.search("in:message kangaroo")]
    assert trials == ["t_4", "t_3", "t_2", "t_1", "t_0"]
    assert [h.trial_id for h in store.search("in:message kangaroo", limit=2, offset=2)] == ["t_2", "t_1"]


def test_saving_a_trial_again_replaces_its_texts(store):
    store.save_trial(record("t_1", word="bilby")).result()
    store.save_trial(record("t_1", word="dingo")).result()
    assert store.search("bilby") == [] and index_rows(store, "bilby") == 0
    assert len(store.search("dingo")) == 5


def test_deleting_a_batch_or_a_trial_takes_its_texts_out_of_the_index(store):
    store.save_trial(record("t_1", batch_id="b_1", word="wallaby")).result()
    store.save_trial(record("t_1b", batch_id="b_1", word="wallaby")).result()
    store.save_trial(record("t_2", batch_id="b_2", word="wallaby")).result()
    store.save_trial(record("t_3", batch_id="b_2", word="possum")).result()
    store.create_batch("b_1", "cli", "", "2026-11-29T17:40:00Z")
    store.finish_batch("b_1", "finished", "2026-11-29T17:50:00Z")
    store.flush()
    assert store.delete_batches(["b_1"]) == 1
    assert {h.trial_id for h in store.search("wallaby")} == {"t_2"}
    assert index_rows(store, "wallaby") == 5  # t_2's five texts, none of batch b_1's trials
    assert store.delete_trials(["t_2"]) == 1
    assert store.search("wallaby") == [] and index_rows(store, "wallaby") == 0
    assert store.search("possum")


def test_an_imported_batch_is_searchable(store):
    trial = record("t_imp", batch_id="b_imp", word="cassowary")
    store.import_portable(Portable(batches=[PortableBatch(
        id="b_imp", trigger="cli", status="finished", started_at="2026-11-29T17:40:00Z",
        runs=[PortableRun(id="r_b_imp", case_id="c", variant="v")], trials=[trial])]))
    assert {h.trial_id for h in store.search("cassowary")} == {"t_imp"}
    assert [h.trial_id for h in store.search("batch:b_imp cassowary in:reason")] == ["t_imp"]
    assert [h.trial_id for h in store.search("batch:b_i batch:b_none cassowary in:reason")] == ["t_imp"]
    store.save_trial(record("t_alone", batch_id="b_unlisted", word="cassowary")).result()
    assert {h.trial_id for h in store.search("batch:b_unlisted cassowary")} == {"t_alone"}


def test_a_trial_voided_after_its_process_died_is_found_by_its_new_reason(store):
    store.save_trial(record("t_1", word="bandicoot")).result()
    store.close_trial_as_infra("t_1", "the process running trial t_1 died (pid 4242)", "2026-11-29T18:00:00Z")
    store.flush()
    assert [(h.field, h.outcome) for h in store.search("in:reason died")] == [("reason", "infra_error")]
    assert store.search("in:reason exited bandicoot") == [] and index_rows(store, "exited") == 0
    assert store.search("outcome:infra_error bandicoot")


def test_proctor_search_prints_a_line_a_hit_with_the_match_marked(store, capsys):
    from tests.engine.test_cli import cli

    store.save_trial(record("t_1", word="echidna")).result()
    store.flush()
    code, out, _ = cli(capsys, "search", "in:command echidna", "--store", store.path)
    assert code == 0
    assert out.splitlines() == ["t_1  c  v  fail  item 1 command  grep -r «echidna» ."]
    code, out, _ = cli(capsys, "search", "echidna", "--json", "--limit", "2", "--store", store.path)
    hits = json.loads(out)
    assert code == 0 and len(hits) == 2 and hits[0]["where"] == "reason" and hits[0]["marks"]
    code, out, err = cli(capsys, "search", "colour:red echidna", "--store", store.path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "colour:" in err


def test_a_damaged_index_costs_no_record_and_no_delete(store):
    store.save_trial(record("t_1", word="quokka")).result()
    store.flush()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE search_index_data SET block = x'ffffffff' WHERE id > 1")
    store.save_trial(record("t_1", word="bettong")).result()  # the index cannot take it: saved all the same
    assert "bettong" in store.get_trial("t_1").failure.reason
    assert store.delete_trials(["t_1"]) == 1


def test_a_damaged_index_does_not_keep_the_writer_indexing(store):
    """A trial the index refuses is not tried again: catching up ends, and writes go on."""
    store.save_trial(record("t_1", word="quokka")).result()
    store.flush()
    with sqlite3.connect(store.path) as conn:
        conn.execute("DROP TABLE search_index_data")  # the index's segments: any write to it fails
        conn.execute("DELETE FROM search_trial")  # as if t_1 had never been indexed
    store.index_for_search()  # returns: the one trial failed once, and is left
    assert store.search_pending() == 1
    store.save_trial(record("t_2", word="bettong")).result(timeout=30)


def test_a_save_is_committed_before_its_trial_is_indexed(store, monkeypatch):
    """A big record's index takes seconds: its save (and what is queued behind it) must not wait."""
    import threading

    from engine.store import search

    release, indexing = threading.Event(), threading.Event()
    index_stored = search.index_stored

    def slow(conn, trial_id, older=False):
        indexing.set()
        release.wait(30)
        return index_stored(conn, trial_id, older)

    monkeypatch.setattr(search, "index_stored", slow)
    try:
        store.save_trial(record("t_1", word="bilby")).result(timeout=10)
        assert indexing.wait(10)
        assert store.get_trial("t_1").failure.reason.endswith("bilby")
    finally:
        release.set()
    assert [h.field for h in store.search("bilby")][:1] == ["reason"]  # its own save, waited for


def unindexed_store(tmp_path, trials: int = 600):
    """A store whose finished trials the index does not hold: written as schema 3 wrote them."""
    from tests.make_store import make_store

    path = make_store(tmp_path / "old.db", trials=trials, batches=6)
    with sqlite3.connect(path) as conn:
        done = conn.execute("SELECT count(*) FROM trial WHERE status = 'done'").fetchone()[0]
        word = conn.execute("SELECT failure_reason FROM trial WHERE failure_reason IS NOT NULL "
                            "LIMIT 1").fetchone()[0].split()[0]
    return path, done, word


def test_an_older_store_opens_at_once_and_is_indexed_between_other_writes(tmp_path):
    path, done, word = unindexed_store(tmp_path)
    with Store(path) as s:
        assert s.search_pending() == done > 0 and s.search(word) == []
        s.start_indexing()
        s.save_trial(record("t_new", word="potoroo")).result(timeout=30)  # not behind the backlog
        s.index_for_search()
        assert s.search_pending() == 0 and s.search(word) and s.search("potoroo")
    with sqlite3.connect(path) as conn:  # each trial once
        assert conn.execute("SELECT count(*), count(DISTINCT trial_id) FROM search_trial").fetchone() == (
            done + 1, done + 1)


def test_proctor_search_indexes_an_older_store_first_and_says_so(tmp_path, capsys):
    from tests.engine.test_cli import cli

    path, done, word = unindexed_store(tmp_path)
    code, out, err = cli(capsys, "search", word, "--store", path)
    assert code == 0 and out and all(f"«{word}»" in line for line in out.splitlines()), (out, err)
    lines = err.splitlines()
    assert lines[0] == f"indexing {done:,} trials for search (once): 0 done"
    assert lines[-1] == f"indexing {done:,} trials for search (once): {done:,} done"
    code, out, err = cli(capsys, "search", word, "--store", path)
    assert code == 0 and err == ""  # once


def test_a_case_or_variant_is_named_by_its_beginning_in_any_letter_case(store):
    for trial_id, case_id in (("t_1", "greet"), ("t_2", "greets_user"), ("t_3", "Parses_CSV"),
                              ("t_4", "p%_odd")):
        store.save_trial(record(trial_id, case_id=case_id, word="wombat")).result()

    def found(query: str) -> set[str]:
        return {h.trial_id for h in store.search(query)}

    assert found("case:greet wombat") == {"t_1"}  # the case itself, not every case it begins
    assert found("case:greets wombat") == {"t_2"}
    assert found("case:GREETS_USER wombat") == {"t_2"}
    assert found("case:parses wombat") == found("case:parses_csv wombat") == {"t_3"}
    assert found("case:p% wombat") == {"t_4"}  # % and _ are themselves, not wildcards
    assert found("case:p wombat") == {"t_3", "t_4"}
    assert found("case:nothing wombat") == set()
    assert found("variant:V wombat") == {"t_1", "t_2", "t_3", "t_4"}
    assert found("case:greet case:parses wombat") == {"t_1", "t_3"}


def test_proctor_search_that_cannot_index_still_searches_what_is_indexed(tmp_path, capsys, monkeypatch):
    """A full disk while indexing an older store: one line says so, and the hits of the
    trials already indexed are printed (exit 0)."""
    from engine.store import search
    from tests.engine.test_cli import cli

    path, done, word = unindexed_store(tmp_path)
    with Store(path) as s:
        s.save_trial(record("t_new", word="numbat")).result()
        s.flush()

    def full(conn, trial_id, older=False):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(search, "index_stored", full)
    code, out, err = cli(capsys, "search", "numbat", "--store", path)
    assert code == 0 and "t_new" in out, (out, err)
    said = [line for line in err.splitlines() if line.startswith("proctor:")]
    assert len(said) == 1 and "disk is full" in said[0] and f"{done:,} trials are not indexed" in said[0]


# -- the index kept current under concurrency and failure (issue 17's review) -------------

def hold_writer(store: Store):
    """Hold the writer's thread inside a write until the returned event is set."""
    import threading

    release, holding = threading.Event(), threading.Event()
    store._writer.put(lambda conn: (holding.set(), release.wait(30)))
    assert holding.wait(10)
    return release


def slowed(monkeypatch, seconds: float) -> None:
    import time

    from engine.store import search

    index_stored = search.index_stored
    monkeypatch.setattr(search, "index_stored", lambda conn, trial_id, older=False: (
        time.sleep(seconds), index_stored(conn, trial_id, older))[1])


def test_a_flush_taken_with_the_save_waits_for_its_indexing(store, monkeypatch):
    """The writer takes the save and the flush (and search's flush) in one batch: the flush
    must still be set after the trial is indexed."""
    import threading

    slowed(monkeypatch, 0.3)
    release = hold_writer(store)
    store.save_trial(record("t_1", word="bilby"))
    hits: list = []
    searcher = threading.Thread(target=lambda: hits.extend(store.search("bilby")))
    searcher.start()
    store_flushed = threading.Thread(target=store.flush)
    store_flushed.start()
    release.set()
    searcher.join(30)
    store_flushed.join(30)
    assert [h.trial_id for h in hits][:1] == ["t_1"] and index_rows(store, "bilby") == 5


def test_a_save_queued_with_close_is_indexed(tmp_path):
    import threading

    s = Store(tmp_path / "s.db")
    release = hold_writer(s)
    s.save_trial(record("t_1", word="bilby"))
    closer = threading.Thread(target=s.close)
    closer.start()
    release.set()
    closer.join(30)
    with Store(tmp_path / "s.db") as again:
        assert again.search_pending() == 0 and again.search("bilby")


def test_a_search_racing_a_save_on_another_thread_still_finds_it_after(store, monkeypatch):
    """A search between a save's start and its submit must not make later searches skip
    waiting for the save's indexing."""
    import threading

    submit = store._writer.submit
    entered, go = threading.Event(), threading.Event()

    def slow_submit(write):
        entered.set()
        go.wait(10)
        return submit(write)

    monkeypatch.setattr(store._writer, "submit", slow_submit)
    slowed(monkeypatch, 0.3)
    saver = threading.Thread(target=lambda: store.save_trial(record("t_1", word="bilby")).result())
    saver.start()
    assert entered.wait(10)
    assert store.search("bilby") == []  # not submitted yet
    go.set()
    saver.join(10)
    assert [h.trial_id for h in store.search("bilby")][:1] == ["t_1"]


def test_a_full_disk_in_a_step_loses_none_of_its_trials(store, monkeypatch):
    """The step's transaction is lost with t_1's index too: its trials go again with the next
    save, and the error is the index's, not the writer's (a batch is not stopped by it)."""
    from engine.store import search

    index_stored = search.index_stored

    def full_on_t2(conn, trial_id, older=False):
        if trial_id == "t_2":
            raise sqlite3.OperationalError("database or disk is full")
        return index_stored(conn, trial_id, older)

    monkeypatch.setattr(search, "index_stored", full_on_t2)
    release = hold_writer(store)
    saves = [store.save_trial(record(f"t_{i}", word=f"w{i}x")) for i in (1, 2, 3)]
    release.set()
    for saved in saves:
        saved.result(10)
    store.flush()  # no error: the records are stored
    assert store._indexer.error is not None and store.search_pending() == 3
    monkeypatch.setattr(search, "index_stored", index_stored)  # space is back
    store.save_trial(record("t_4", word="w4x")).result()
    assert {t for t in ("t_1", "t_2", "t_3", "t_4") if store.search(f"w{t[-1]}x")} == {"t_1", "t_2", "t_3", "t_4"}


def is_index_step(write) -> bool:
    """A write the search indexer queued (whatever the method is called)."""
    return type(getattr(write, "__self__", None)).__name__ == "Indexer"


def test_a_step_whose_commit_fails_puts_its_trials_back(store, monkeypatch):
    """A full disk shows at COMMIT more often than in the step's inserts (the WAL's pages are
    written then): the step's trials must still go again, and be found once each."""
    from engine.store.writer import Writer

    transaction, failed = Writer._transaction, []

    def full_at_commit(self, writes, events):
        if not failed and len(writes) == 1 and is_index_step(writes[0]):
            failed.append(True)
            with self._engine.begin() as conn:
                writes[0](conn)  # the step's body runs to its end
                raise sqlite3.OperationalError("database or disk is full")  # as COMMIT says
        return transaction(self, writes, events)

    monkeypatch.setattr(Writer, "_transaction", full_at_commit)
    store.save_trial(record("t_1", word="wombat")).result()
    store.flush()
    assert failed and "full" in str(store.index_error) and store.search_pending() == 1
    store.save_trial(record("t_2", word="numbat")).result()  # space is back: the next save
    assert [h.trial_id for h in store.search("in:reason wombat")] == ["t_1"]
    assert store.index_error is None and store.search_pending() == 0


def test_searches_during_a_catch_up_never_shorten_its_pauses(tmp_path, monkeypatch):
    """Every search asks the indexer to catch up; asking again must not start a second chain
    of steps, which would take the write lock back to back (no pause for another process)."""
    import threading
    import time

    from engine.store.indexer import PAUSE_S
    from engine.store.writer import Writer

    path, done, word = unindexed_store(tmp_path, trials=300)
    slowed(monkeypatch, 0.01)
    steps: list[tuple[float, float]] = []
    attempt = Writer._attempt

    def timed(self, writes, events):
        began = time.monotonic()
        try:
            return attempt(self, writes, events)
        finally:
            if len(writes) == 1 and is_index_step(writes[0]):
                steps.append((began, time.monotonic()))

    monkeypatch.setattr(Writer, "_attempt", timed)
    with Store(path) as s:
        s.start_indexing()
        stop = threading.Event()

        def searching() -> None:  # the studio's box, a keystroke every 10 ms
            while not stop.is_set():
                s.start_indexing()
                time.sleep(0.01)

        asker = threading.Thread(target=searching)
        asker.start()
        try:
            s.index_for_search()
            caught_up = time.monotonic()
            time.sleep(0.5)  # searches after the catch-up: at most a read of the store
        finally:
            stop.set()
            asker.join()
    assert s.search_pending() == 0
    assert len([step for step in steps if step[0] > caught_up]) <= 1
    steps = [step for step in steps if step[0] < caught_up]
    assert len(steps) > 5
    gaps = [began - ended for (_, ended), (began, _) in zip(steps, steps[1:])]
    assert min(gaps) > PAUSE_S * 0.8, gaps


def test_saves_taken_with_close_are_indexed_before_it_returns(tmp_path, monkeypatch):
    """A run's last saves, or a big import, queued as the store closes: the indexing a save
    starts goes on to its end, past the first step, before the writer stops."""
    import threading

    slowed(monkeypatch, 0.1)  # 8 trials take about 3 steps
    s = Store(tmp_path / "s.db")
    release = hold_writer(s)
    for i in range(8):
        s.save_trial(record(f"t_{i}", word="bilby"))
    closer = threading.Thread(target=s.close)
    closer.start()
    release.set()
    closer.join(30)
    with Store(tmp_path / "s.db") as again:
        assert again.search_pending() == 0


def test_hits_stay_newest_first_when_an_older_store_is_caught_up_after_a_run(tmp_path):
    """Upgrade, `proctor run` (a new trial), then `proctor search` (the older ones indexed
    last): the new trial is still listed first, and the older ones newest first."""
    path = tmp_path / "s.db"
    with Store(path) as s:
        for n, day in enumerate(("2025-01-01", "2025-03-01", "2025-02-01")):
            s.save_trial(record(f"t_old{n}", word="quoll", started_at=f"{day}T00:00:00.000Z")).result()
    with sqlite3.connect(path) as conn:  # as schema 3 left it: no index
        conn.execute("DROP TABLE search_index")
        conn.execute("DROP TABLE search_trial")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with Store(path) as s:  # proctor run
        s.save_trial(record("t_new", word="quoll", started_at="2026-11-30T00:00:00.000Z")).result()
    with Store(path) as s:  # proctor search
        s.index_for_search()
        assert [h.trial_id for h in s.search("in:reason quoll")] == ["t_new", "t_old1", "t_old2", "t_old0"]


def test_indexing_ends_on_a_closed_store_and_a_read_only_one_closes_quietly(tmp_path, monkeypatch):
    import engine.store.store as store_module

    path, done, word = unindexed_store(tmp_path, trials=60)
    closed = Store(path)
    closed.close()
    closed.index_for_search()  # returns: nothing can be indexed
    create = store_module.create_engine
    monkeypatch.setattr(store_module, "create_engine",
                        lambda url, **kw: create(f"sqlite:///file:{path}?mode=ro&uri=true", **kw))
    read_only = Store(path)
    read_only.start_indexing()  # the studio at open
    assert read_only.search(word) == []
    with pytest.raises(StoreError):
        read_only.index_for_search()
    read_only.close()  # no error: the records were never at stake


def test_catching_up_lets_another_process_write_between_steps(tmp_path, monkeypatch):
    """A studio catching up an older store pauses between steps: a CLI run's write in another
    process waits about a step, not the whole catch-up (it waited 11 s before the pause)."""
    import subprocess
    import sys
    import textwrap

    path, done, word = unindexed_store(tmp_path, trials=300)
    slowed(monkeypatch, 0.02)
    with Store(path):
        pass  # migrated
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from engine.store import Store
        from engine.models import Note
        s = Store(sys.argv[1])
        time.sleep(1.0)  # the other store is catching up now
        worst = 0.0
        for i in range(5):
            began = time.monotonic()
            s.set_note(Note(target=f"x{i}", label="l", text="", updated_at="2026-01-01T00:00:00Z")).result()
            worst = max(worst, time.monotonic() - began)
        print(f"{worst:.2f}")
        s.close()
    """), str(path)], stdout=subprocess.PIPE, text=True)
    with Store(path) as s:
        s.start_indexing()
        out, _ = other.communicate(timeout=120)
        s.index_for_search()
    assert float(out.strip()) < 1.5, out
