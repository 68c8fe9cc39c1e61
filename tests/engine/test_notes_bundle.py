"""Bundles carry the notes of the trials they hold (issue 17): a note travels with its trial, a
bundle from before notes still imports, and a hand-written bundle's notes are refused or
bounded as its other members are. The bundles are made from the recorded batch (real trials)."""

from __future__ import annotations

import io
import json
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from engine import bundle
from engine.bundle import export_bundle
from engine.cli import main
from engine.importer import import_file
from engine.models import Note
from engine.store import Store
from tests.engine.test_bundle import ADDS, BATCH, GREET, RECORDED, members, rezip, tables

AT = "2026-12-01T06:00:00.000Z"
NOTES = f"batches/{BATCH}/notes.json"


def noted_bundle(folder: Path) -> bytes:
    """The recorded batch, two of its trials and one failure group noted, exported."""
    shutil.copy(RECORDED, folder / "noted.db")
    with Store(folder / "noted.db") as store:
        for note in (Note(target=GREET, label="looks fine", text="the judge was generous",
                          updated_at=AT),
                     Note(target=ADDS, label="env problem", updated_at=AT),
                     Note(target="group:abc123", label="env problem", text="pip", updated_at=AT)):
            store.set_note(note).result()
        export_bundle(store, [BATCH], folder / "noted.zip")
    return (folder / "noted.zip").read_bytes()


@pytest.fixture(scope="module")
def noted(tmp_path_factory) -> bytes:
    return noted_bundle(tmp_path_factory.mktemp("noted"))


def imported(folder: Path, data: bytes) -> dict[str, Note]:
    (folder / "in.zip").write_bytes(data)
    with Store(folder / "dest.db") as store:
        import_file(store, folder / "in.zip")
        return store.notes()


def test_a_bundle_carries_its_trials_notes_and_not_its_groups(tmp_path, noted):
    held = dict(members(noted))
    assert json.loads(held["manifest.json"])["version"] == 1  # notes are an optional member
    assert sorted(n["target"] for n in json.loads(held[NOTES])) == sorted([ADDS, GREET])
    notes = imported(tmp_path, noted)
    assert set(notes) == {GREET, ADDS}, "a group's key is not bound to the bundle's trials"
    assert notes[GREET] == Note(target=GREET, label="looks fine", text="the judge was generous",
                                updated_at=AT)
    assert notes[ADDS].label == "env problem" and notes[ADDS].text == ""


def test_a_note_the_store_has_is_kept_and_a_missing_one_added(tmp_path, noted):
    path, dest = tmp_path / "b.zip", tmp_path / "dest.db"
    path.write_bytes(noted)
    with Store(dest) as store:
        assert import_file(store, path).notes_added == 2
        store.set_note(Note(target=GREET, label="mine", updated_at=AT)).result()
        store.set_note(Note(target=ADDS, updated_at=AT)).result()  # taken away
        report = import_file(store, path)
        assert (report.trials_added, report.notes_added, report.nothing_added) == (0, 1, False)
        assert store.notes()[GREET].label == "mine", "the store's own note wins"
        assert store.notes()[ADDS].label == "env problem"


def test_a_bundle_without_notes_holds_no_notes_member_and_imports(tmp_path):
    shutil.copy(RECORDED, tmp_path / "plain.db")
    with Store(tmp_path / "plain.db") as store:
        export_bundle(store, [BATCH], tmp_path / "plain.zip")
    plain = dict(members((tmp_path / "plain.zip").read_bytes()))
    assert json.loads(plain["manifest.json"])["version"] == 1 and NOTES not in plain
    assert imported(tmp_path, (tmp_path / "plain.zip").read_bytes()) == {}


def test_a_version_1_bundle_made_before_notes_imports(tmp_path, noted):
    """As issue 16's Proctor wrote it: version 1, no notes member."""
    old = [(n, d) for n, d in members(noted) if n != NOTES]
    with Store(tmp_path / "dest.db") as store:
        (tmp_path / "old.zip").write_bytes(rezip(old))
        assert import_file(store, tmp_path / "old.zip").trials_added == 4
        assert store.notes() == {}


def test_a_secret_in_a_note_is_redacted_on_import(tmp_path, noted):
    secret = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"
    notes = json.loads(dict(members(noted))[NOTES])
    next(n for n in notes if n["target"] == ADDS)["text"] = f"token {secret}"
    data = rezip([(n, json.dumps(notes).encode() if n == NOTES else d) for n, d in members(noted)])
    note = imported(tmp_path, data)[ADDS]
    assert secret not in note.text and "[redacted]" in note.text


def refused(folder: Path, data: bytes, capsys) -> str:
    """The real CLI refuses the bundle: exit 2, one line, and the store as it was."""
    path, dest = folder / "hostile.zip", folder / "dest.db"
    path.write_bytes(data)
    Store(dest).close()
    before = tables(dest)
    capsys.readouterr()
    assert main(["import", str(path), "--store", str(dest)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"proctor: {path}: "), err
    assert tables(dest) == before
    return err


def with_notes(noted: bytes, notes) -> bytes:
    return rezip([(n, json.dumps(notes).encode() if n == NOTES else d) for n, d in members(noted)])


@pytest.mark.parametrize("change, words", [
    (lambda n: n[0].update(text="x" * 2_001),
     "does not match the Note schema (0.text: String should have at most 2000"),
    (lambda n: n[0].update(label="l" * 41), "does not match the Note schema (0.label:"),
    (lambda n: n[0].update(label=7), "does not match the Note schema (0.label:"),
    (lambda n: n[0].update(colour="red"), "does not match the Note schema (0.colour:"),
    (lambda n: n[0].update(target="t_of_another_batch"), "a note on t_of_another_batch"),
    (lambda n: n.append(dict(n[0])), "notes a trial twice"),
    (lambda n: n.append(dict(n[0], target="group:abc123")), "a note on group:abc123"),
    (lambda n: n[0].update(updated_at="9" * 10_000), "whose time is not a time"),
])
def test_a_hostile_note_is_refused(tmp_path, noted, capsys, change, words):
    notes = json.loads(dict(members(noted))[NOTES])
    change(notes)
    assert words in refused(tmp_path, with_notes(noted, notes), capsys)


def test_notes_that_are_not_a_list_are_refused(tmp_path, noted, capsys):
    err = refused(tmp_path, with_notes(noted, {"notes": []}), capsys)
    assert f"member {NOTES} does not match the Note schema" in err


def test_a_million_notes_are_refused_unread(tmp_path, noted, capsys):
    """10^6 notes for a batch of four trials: refused by their size, before one is inflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members(noted):
            if name != NOTES:
                zf.writestr(name, data)
        with zf.open(NOTES, "w", force_zip64=True) as f:  # streamed: the test never holds them
            f.write(b"[")
            for start in range(0, 1_000_000, 10_000):
                f.write(b",".join(b'{"target":"t_%d","updated_at":"x"}' % n
                                  for n in range(start, start + 10_000)) + b",")
            f.write(b'{"target":"t","updated_at":"x"}]')
    began = time.perf_counter()
    err = refused(tmp_path, out.getvalue(), capsys)
    assert f"member {NOTES} is larger than the notes of 4 trials can be" in err
    assert time.perf_counter() - began < 5
    assert bundle.NOTE_BYTES * 4 < 1 << 20


def test_an_import_that_adds_only_notes_says_so(tmp_path, noted, capsys):
    path, dest = tmp_path / "b.zip", tmp_path / "dest.db"
    path.write_bytes(noted)
    assert main(["import", str(path), "--store", str(dest)]) == 0
    with Store(dest) as store:
        store.set_note(Note(target=ADDS, updated_at=AT)).result()  # taken away: the import brings it back
    capsys.readouterr()
    assert main(["import", str(path), "--store", str(dest)]) == 0
    out, err = capsys.readouterr()
    assert "0 trials added, 1 note" in out + err, out + err
