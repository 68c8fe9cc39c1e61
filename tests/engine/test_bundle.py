"""`proctor export` and `proctor import` of bundles: a real recorded batch (tests/data/recorded.db,
made by the engine in Docker) travels to an empty store and back out exactly as it was."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.bundle import export_bundle
from engine.cli import main
from engine.importer import ImportRefused, import_file
from engine.store import Store

RECORDED = Path(__file__).resolve().parents[1] / "data" / "recorded.db"
with sqlite3.connect(f"file:{RECORDED}?mode=ro", uri=True) as _db:  # regenerated, ids change
    BATCH = _db.execute("SELECT id FROM batch").fetchone()[0]
    GREET = _db.execute("SELECT id FROM trial WHERE case_id = 'writes_greet'").fetchone()[0]
    ADDS = _db.execute("SELECT id FROM trial WHERE case_id = 'adds_numbers'").fetchone()[0]
ROOT = Path(__file__).resolve().parents[2]


def proctor(*args: str) -> subprocess.CompletedProcess:
    """The real `proctor` command, in its own process."""
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def source(tmp_path) -> Path:
    """A copy of the recorded store: one finished batch of four trials of every kind."""
    path = tmp_path / "source.db"
    shutil.copy(RECORDED, path)
    return path


def recorded_bundle(folder: Path) -> bytes:
    """The recorded batch exported as a bundle."""
    shutil.copy(RECORDED, folder / "source.db")
    with Store(folder / "source.db") as store:
        export_bundle(store, [BATCH], folder / "b.zip")
    return (folder / "b.zip").read_bytes()


@pytest.fixture(scope="module")
def bundle_bytes(tmp_path_factory) -> bytes:
    return recorded_bundle(tmp_path_factory.mktemp("bundle"))


def members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def rezip(items: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return out.getvalue()


def tables(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table of a store, to see that nothing changed."""
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: sorted(conn.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}


def trial_ids(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM trial ORDER BY id")]


def shown_json(store: Path, trial_id: str, capsys) -> str:
    capsys.readouterr()
    assert main(["show", trial_id, "--json", "--store", str(store)]) == 0
    return capsys.readouterr().out


def test_round_trip_reproduces_every_record_event_and_artifact(source, tmp_path, capsys):
    out, dest = tmp_path / "batch.zip", tmp_path / "empty.db"
    done = proctor("export", BATCH[:6], "-o", str(out), "--store", str(source))
    assert (done.returncode, done.stdout.strip()) == (0, f"wrote {out}: 4 trials"), done.stderr
    done = proctor("import", str(out), "--store", str(dest))
    added = f"{out}: {BATCH}: 4 trials added"
    assert (done.returncode, done.stdout.strip()) == (0, added), done.stderr

    ids = trial_ids(source)
    assert trial_ids(dest) == ids and len(ids) == 4
    for trial_id in ids:
        assert shown_json(dest, trial_id, capsys) == shown_json(source, trial_id, capsys)
    with Store(source) as before, Store(dest) as after:
        for trial_id in ids:
            theirs, ours = list(before.trial_events(trial_id)), list(after.trial_events(trial_id))
            assert len(ours) == len(theirs) > 0
            for a, b in zip(theirs, ours):
                assert type(a) is type(b) and a.model_dump() == b.model_dump()
        artifacts = [a for t in ids for a in after.get_trial(t).artifacts]
        assert [(a.path, bool(a.text)) for a in artifacts] == [("greet.py", True)]
        assert artifacts == [a for t in ids for a in before.get_trial(t).artifacts]
        assert after.batch_summary(BATCH) == before.batch_summary(BATCH)


def test_importing_twice_adds_nothing_and_says_so(tmp_path, bundle_bytes, capsys):
    path, dest = tmp_path / "b.zip", tmp_path / "s.db"
    path.write_bytes(bundle_bytes)
    assert main(["import", str(path), "--store", str(dest)]) == 0
    first = tables(dest)
    capsys.readouterr()
    assert main(["import", str(path), "--store", str(dest)]) == 0
    assert capsys.readouterr().out == f"{path}: {BATCH}: nothing new: already in the store\n"
    assert tables(dest) == first


def test_an_id_with_other_content_is_refused_by_name(tmp_path, bundle_bytes, capsys):
    path, dest = tmp_path / "b.zip", tmp_path / "s.db"
    path.write_bytes(bundle_bytes)
    assert main(["import", str(path), "--store", str(dest)]) == 0
    before = tables(dest)
    changed = []
    for name, data in members(bundle_bytes):
        if name.endswith(f"/trials/{GREET}.json"):
            record = json.loads(data)
            record["command_count"] += 1
            data = json.dumps(record).encode()
        changed.append((name, data))
    other = tmp_path / "other.zip"
    other.write_bytes(rezip(changed))
    capsys.readouterr()
    assert main(["import", str(other), "--store", str(dest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"proctor: {other}: trial {GREET} is already in the store")
    assert tables(dest) == before


def test_a_trial_or_a_run_exports_alone_with_its_run(source, tmp_path, capsys):
    with Store(source) as store:
        record = store.get_trial(ADDS)
        assert export_bundle(store, [ADDS[:6]], tmp_path / "one.zip") == 1
        assert export_bundle(store, [record.run_id, ADDS], tmp_path / "run.zip") == 1
    dest = tmp_path / "s.db"
    for name in ("one.zip", "run.zip"):
        assert main(["import", str(tmp_path / name), "--store", str(dest)]) == 0
    assert trial_ids(dest) == [ADDS]
    with Store(dest) as store:
        summary = store.batch_summary(BATCH)
        assert [(r.run_id, len(r.trials)) for r in summary.runs] == [(record.run_id, 1)]
    capsys.readouterr()
    # The rest of the batch joins the trial already there.
    whole = tmp_path / "whole.zip"
    with Store(source) as store:
        export_bundle(store, [BATCH], whole)
    assert main(["import", str(whole), "--store", str(dest)]) == 0
    said = capsys.readouterr().out
    assert said == f"{whole}: {BATCH}: 3 trials added (1 already in the store)\n"


def test_export_refuses_a_running_batch_or_an_unknown_id(source, tmp_path, capsys):
    out = tmp_path / "b.zip"
    assert main(["export", "t_nope", "-o", str(out), "--store", str(source)]) == 2
    assert "t_nope names no batch, run or trial" in capsys.readouterr().err
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE batch SET status = 'running'")
    assert main(["export", GREET[:6], "-o", str(out), "--store", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"batch {BATCH} is running" in err
    assert [p.name for p in tmp_path.iterdir() if "zip" in p.name] == [], "no file, not even a part"


def test_redaction_is_applied_again_on_import(tmp_path, bundle_bytes):
    secret = "sk-proj-" + "A1b2C3d4" * 5
    hand_written = []
    for name, data in members(bundle_bytes):
        if name.endswith(f"/trials/{GREET}.json"):
            record = json.loads(data)
            record["trajectory"].append({"kind": "message", "turn": 1, "role": "assistant",
                                         "text": f"my key is {secret}", "truncated": False})
            record["artifacts"][0]["text"] = f"KEY = '{secret}'\n"
            data = json.dumps(record).encode()
        if name.endswith(f"/events/{GREET}.jsonl"):
            event = json.loads(data.splitlines()[0])
            event.update(type="phase_progress", phase="setup", message=f"export KEY={secret}",
                         n=999)
            for key in ("detail", "index", "status", "duration_ms", "run_id", "attempt"):
                event.pop(key, None)
            data += json.dumps(event).encode() + b"\n"
        hand_written.append((name, data))
    path = tmp_path / "hand.zip"
    path.write_bytes(rezip(hand_written))
    with Store(tmp_path / "s.db") as store:
        report = import_file(store, path)
        assert report.trials_added == 4
        record = store.get_trial(GREET)
        assert record.trajectory[-1].text == "my key is [redacted]"
        assert record.artifacts[0].text == "KEY = '[redacted]'\n"
        assert [e.message for e in store.trial_events(GREET)
                if getattr(e, "n", 0) == 999] == ["export KEY=[redacted]"]
    assert secret.encode() not in (tmp_path / "s.db").read_bytes()


def test_each_file_is_its_own_transaction(tmp_path, bundle_bytes, capsys):
    good, bad, dest = tmp_path / "good.zip", tmp_path / "bad.zip", tmp_path / "s.db"
    good.write_bytes(bundle_bytes)
    bad.write_bytes(bundle_bytes[: len(bundle_bytes) // 2])
    assert main(["import", str(bad), str(good), "--store", str(dest)]) == 2
    out, err = capsys.readouterr()
    assert out == f"{good}: {BATCH}: 4 trials added\n"
    assert err.startswith(f"proctor: {bad}: ") and err.count("\n") == 1
    assert len(trial_ids(dest)) == 4


def test_an_inspect_log_goes_to_the_inspect_reader(tmp_path):
    log = tmp_path / "run.zip"
    log.write_bytes(rezip([("header.json", b"{}"), ("_journal/start.json", b"{}")]))
    with Store(tmp_path / "s.db") as store, pytest.raises(ImportRefused) as refused:
        import_file(store, log)
    assert str(refused.value).startswith(f"{log}: ")
    assert "manifest" not in str(refused.value), "not read as a bundle"


@pytest.mark.parametrize("attempt", [10 ** 30, 0, -1, 12, "2", 1.5, True])
@pytest.mark.parametrize("where", ["record", "event"])
def test_an_attempt_no_retry_can_make_is_refused(tmp_path, bundle_bytes, capsys, attempt, where):
    """`attempt` (issue 15) comes from the file: 1 and up to --retry-void's 10 more, or nothing."""
    changed = []
    for name, data in members(bundle_bytes):
        if where == "record" and name.endswith(f"/trials/{GREET}.json"):
            record = json.loads(data)
            record["attempt"] = attempt
            data = json.dumps(record).encode()
        if where == "event" and name.endswith(f"/events/{GREET}.jsonl"):
            lines = data.splitlines()
            first = json.loads(lines[0])
            assert first["type"] == "trial_started"
            first["attempt"] = attempt
            data = b"\n".join([json.dumps(first).encode(), *lines[1:]]) + b"\n"
        changed.append((name, data))
    path = tmp_path / "hostile.zip"
    path.write_bytes(rezip(changed))
    assert main(["import", str(path), "--store", str(tmp_path / "s.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attempt" in err, err
