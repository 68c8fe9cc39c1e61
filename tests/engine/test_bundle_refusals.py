"""What `proctor import` refuses: each kind of bad bundle is one line naming the file and what
is wrong, exit 2, and the store exactly as it was. The bad bundles are made from a real one
(the recorded batch exported), changed the way a damaged disk or a hostile author would."""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.safezip import size_words
from engine import bundle
from engine.cli import main
from engine.importer import ImportRefused, import_file
from engine.store import Store
from tests.engine.test_bundle import BATCH, GREET, members, recorded_bundle, rezip, tables

TRIAL = f"batches/{BATCH}/trials/{GREET}.json"


@pytest.fixture(scope="module")
def bundle_bytes(tmp_path_factory) -> bytes:
    return recorded_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.fixture
def dest(tmp_path) -> Path:
    path = tmp_path / "dest.db"
    Store(path).close()
    return path


def refused(path: Path, data: bytes, dest: Path, capsys) -> str:
    """Import `data` as `path` with the real CLI: exit 2, one line naming the file, and the
    store as it was."""
    path.write_bytes(data)
    before = tables(dest)
    capsys.readouterr()
    assert main(["import", str(path), "--store", str(dest)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"proctor: {path}: "), err
    assert "Traceback" not in err
    assert tables(dest) == before
    return err


def changed(data: bytes, name: str, change) -> bytes:
    return rezip([(n, change(d) if n == name else d) for n, d in members(data)])


def test_a_truncated_zip(tmp_path, bundle_bytes, dest, capsys):
    err = refused(tmp_path / "cut.zip", bundle_bytes[:-200], dest, capsys)
    assert "damaged or truncated zip" in err


def test_a_corrupt_zip(tmp_path, bundle_bytes, dest, capsys):
    info = zipfile.ZipFile(io.BytesIO(bundle_bytes)).getinfo(TRIAL)
    data = bytearray(bundle_bytes)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0x55  # inside the packed record: its CRC fails
    err = refused(tmp_path / "flip.zip", bytes(data), dest, capsys)
    assert "damaged or truncated zip" in err


def test_a_zip_that_claims_a_newer_zip_version(tmp_path, bundle_bytes, dest, capsys):
    """Found by fuzzing: zipfile raises NotImplementedError for a "version needed" it lacks."""
    data = bytearray(bundle_bytes)
    central = bytes(data).index(b"PK\x01\x02")
    data[central + 6] = 0xD5  # version needed to extract: 21.3
    assert "damaged or truncated zip (zip file version 21.3)" in refused(
        tmp_path / "b.zip", bytes(data), dest, capsys)


def test_not_a_zip_at_all(tmp_path, dest, capsys):
    assert "damaged or truncated zip" in refused(tmp_path / "b.zip", b"hello\n" * 50, dest, capsys)


def test_a_member_that_is_not_json(tmp_path, bundle_bytes, dest, capsys):
    err = refused(tmp_path / "b.zip", changed(bundle_bytes, TRIAL, lambda d: d[:-3]), dest, capsys)
    assert f"member {TRIAL} is not JSON" in err


def test_a_member_that_does_not_match_the_schema(tmp_path, bundle_bytes, dest, capsys):
    def bad(data: bytes) -> bytes:
        record = json.loads(data)
        record["outcome"] = "probably"
        return json.dumps(record).encode()

    err = refused(tmp_path / "b.zip", changed(bundle_bytes, TRIAL, bad), dest, capsys)
    assert f"member {TRIAL} does not match the TrialRecord schema (outcome:" in err


def test_an_event_line_that_is_not_an_event(tmp_path, bundle_bytes, dest, capsys):
    name = TRIAL.replace("/trials/", "/events/") + "l"
    err = refused(tmp_path / "b.zip", changed(bundle_bytes, name, lambda d: d + b'{"type": "x"}\n'),
                  dest, capsys)
    assert f"member {name} line " in err and "is not a Proctor event" in err


def test_a_batch_that_does_not_hold_together(tmp_path, bundle_bytes, dest, capsys):
    def elsewhere(data: bytes) -> bytes:
        record = json.loads(data)
        record["batch_id"] = "b_victim"
        return json.dumps(record).encode()

    err = refused(tmp_path / "b.zip", changed(bundle_bytes, TRIAL, elsewhere), dest, capsys)
    assert f"batch {BATCH} does not hold together" in err and "b_victim" in err


def test_a_number_past_what_the_store_holds(tmp_path, bundle_bytes, dest, capsys):
    def huge(data: bytes) -> bytes:
        return data.replace(b'"trial": 1,', b'"trial": 99999999999999999999999,', 1)

    assert f"member {TRIAL} is not JSON" in refused(
        tmp_path / "b.zip", changed(bundle_bytes, TRIAL, huge), dest, capsys)


@pytest.mark.parametrize("manifest, words", [
    ({"format": "other-tool", "version": 1}, 'its manifest\'s format is "other-tool"'),
    ({"format": "proctor-bundle", "version": 2}, "bundle format version 2 is unknown"),
    ({"format": "proctor-bundle", "version": 1, "holds": "all"},
     "does not match the manifest schema"),
])
def test_an_unknown_format_or_version(tmp_path, bundle_bytes, dest, capsys, manifest, words):
    assert words in refused(tmp_path / "b.zip", changed(bundle_bytes, "manifest.json",
                                                        lambda _: json.dumps(manifest).encode()),
                            dest, capsys)


def test_a_manifest_that_does_not_tell_what_it_holds(tmp_path, bundle_bytes, dest, capsys):
    fewer = rezip([(n, d) for n, d in members(bundle_bytes) if n != TRIAL])
    assert "holds 4 runs and 4 trials, but it holds 4 and 3" in refused(
        tmp_path / "b.zip", fewer, dest, capsys)


@pytest.mark.parametrize("name, words", [
    (f"batches/{BATCH}/../../evil.json", "climbs out of the zip"),
    ("../evil.json", "climbs out of the zip"),
    ("/etc/evil.json", "is absolute"),
    ("C:/evil.json", "is absolute"),
    ("batches\\evil.json", "not a plain relative path"),
    ("batches/x/notes.txt", "is not part of a Proctor bundle"),
])
def test_a_member_path_outside_the_bundle(tmp_path, bundle_bytes, dest, capsys, name, words):
    data = rezip(members(bundle_bytes) + [(name, b"{}")])
    assert words in refused(tmp_path / "b.zip", data, dest, capsys)


def test_duplicate_members(tmp_path, bundle_bytes, dest, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate it is told to write
        data = rezip(members(bundle_bytes) + [(TRIAL, dict(members(bundle_bytes))[TRIAL])])
    assert f"member {TRIAL} appears twice" in refused(tmp_path / "b.zip", data, dest, capsys)


def with_zeros(items: list[tuple[str, bytes]], name: str, size: int) -> bytes:
    """A zip of `items` and a member `name` of `size` zero bytes (packed about 1000 to 1),
    streamed so the test never holds it."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for item, data in items:
            zf.writestr(item, data)
        with zf.open(name, "w", force_zip64=True) as f:
            block = bytes(1 << 20)
            for _ in range(size >> 20):
                f.write(block)
    return out.getvalue()


def test_an_oversized_member(tmp_path, bundle_bytes, dest, capsys):
    data = with_zeros(members(bundle_bytes), TRIAL.replace(GREET, "t_big"),
                      bundle.MAX_MEMBER + (1 << 20))
    err = refused(tmp_path / "b.zip", data, dest, capsys)
    assert f"more than the {size_words(bundle.MAX_MEMBER)} a member may hold" in err


def test_a_zip_bomb(tmp_path, bundle_bytes, dest, capsys):
    data = with_zeros(members(bundle_bytes), TRIAL.replace(GREET, "t_bomb"), 8 << 20)
    err = refused(tmp_path / "b.zip", data, dest, capsys)
    assert f"times its packed size, past {bundle.MAX_RATIO}: a zip bomb" in err


def test_a_directory_that_lies_about_a_size(tmp_path, bundle_bytes, dest, capsys, monkeypatch):
    """The directory says 100 bytes of a member that inflates to 8 MiB: no more is inflated."""
    name = TRIAL.replace(GREET, "t_liar")
    lying = bytearray(rezip(members(bundle_bytes) + [(name, bytes(8 << 20))]))
    with zipfile.ZipFile(io.BytesIO(bytes(lying))) as zf:
        info = zf.getinfo(name)
    central = bytes(lying).rindex(name.encode()) - 46  # its directory entry: the name comes last
    assert lying[central:central + 4] == b"PK\x01\x02"
    hundred = (100).to_bytes(4, "little")
    lying[central + 24:central + 28] = hundred  # the directory's inflated size
    lying[info.header_offset + 22:info.header_offset + 26] = hundred  # the local header's
    inflated = []
    real_read = zipfile.ZipExtFile.read

    def read(self, n=-1):
        chunk = real_read(self, n)
        inflated.append(len(chunk))
        return chunk

    monkeypatch.setattr(zipfile.ZipExtFile, "read", read)
    err = refused(tmp_path / "b.zip", bytes(lying), dest, capsys)
    assert "damaged or truncated zip (Bad CRC-32" in err
    assert sum(inflated) < 1 << 20, "the lie is caught before the 8 MiB are inflated"


def test_an_inspect_log_is_not_read_as_a_bundle(tmp_path, dest):
    log = tmp_path / "run.eval"
    log.write_bytes(b"not even a zip")
    with Store(dest) as store, pytest.raises(ImportRefused, match=f"^{log}: "):
        import_file(store, log)


# --- corrupting valid bundles byte by byte ---------------------------------------------------

def header_bytes(data: bytes) -> list[int]:
    """The offsets of every byte of the zip's headers: local, directory and end records."""
    offsets = []
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            offsets += range(info.header_offset, info.header_offset + 30 + len(info.filename))
    start = data.index(b"PK\x01\x02")
    return offsets + list(range(start, len(data)))


@st.composite
def corruptions(draw, data: bytes):
    """A few flips, cuts and insertions at random offsets of a bundle, half of them in its
    headers, where one byte says the most (sizes, offsets, names, versions)."""
    offsets = st.one_of(st.integers(0, len(data) - 1), st.sampled_from(header_bytes(data)))
    return draw(st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert"]),
                                   offsets, st.sampled_from(range(1, 256))),
                         min_size=1, max_size=3))


def corrupt(data: bytes, steps) -> bytes:
    out = bytearray(data)
    for kind, offset, value in steps:
        if not out:
            break
        offset %= len(out)
        if kind == "flip":
            out[offset] ^= value
        elif kind == "cut":
            del out[offset:]
        else:
            out[offset:offset] = bytes([value]) * (value % 7 + 1)
    return bytes(out)


@pytest.mark.slow
def test_a_corrupted_bundle_is_refused_or_whole_never_partly(tmp_path_factory, bundle_bytes):
    folder = tmp_path_factory.mktemp("fuzz")
    empty = tables(_made(folder / "empty.db"))
    whole_store = _made(folder / "whole.db")
    (folder / "b.zip").write_bytes(bundle_bytes)
    with Store(whole_store) as store:
        import_file(store, folder / "b.zip")
    whole = tables(whole_store)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(corruptions(bundle_bytes))
    def check(steps):
        path, db = folder / "c.zip", folder / "c.db"
        db.unlink(missing_ok=True)
        path.write_bytes(corrupt(bundle_bytes, steps))
        with Store(db) as store:
            try:
                import_file(store, path)
            except ImportRefused as refusal:
                assert str(refusal).startswith(f"{path}: ") and "\n" not in str(refusal)
                done = False
            else:
                done = True
        assert tables(db) == (whole if done else empty), "all of the batch or none of it"

    check()


def _made(path: Path) -> Path:
    Store(path).close()
    return path
