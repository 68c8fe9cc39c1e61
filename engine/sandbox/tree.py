"""A workspace tree read from outside the sandbox, at a memory cost that does not grow
with what the files hold.

In memory a tree keeps, per path, 40 bytes: the file's size and sha256 (`Tree.entries`).
Contents go to the sandbox's tree folder on the host's disk (`Blobs`), one row per
sha256, written once however many paths and trees share it, and are read back only for
the files a diff shows. What is not a file's content (a link's `-> target`, the mark of
a file not kept, the note of a cut tree) is held as that text. A tree is a read-only
mapping from each path to its content or that text, read from disk when asked for.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
import weakref
from contextlib import contextmanager
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

_HELD = -1  # the size an entry holds for a text that is no file's content


def entry(size: int, digest: bytes) -> bytes:
    """What a tree keeps of one path: its size and sha256, compared as one value."""
    return size.to_bytes(8, "big", signed=True) + digest


def _digest(value: bytes) -> bytes:
    return value[8:]


class Blobs:
    """A sandbox's file contents on the host, one row per sha256, in an SQLite file in a
    folder only this user reaches (0700): one file, not one per content, because creating
    50,000 small files costs seconds. It is scratch, removed with the sandbox, so nothing
    is synced. A failed write (a full disk) stops further writes; their files are then kept
    as hashes only. Safe to use from the trial's threads one at a time, and to remove from
    another."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.failed = False
        self._lock = threading.Lock()
        # Also gone when no sandbox or tree holds it any more, or when the process exits.
        self._removal = weakref.finalize(self, shutil.rmtree, folder, True)
        self._db: sqlite3.Connection | None = sqlite3.connect(
            folder / "contents.db", isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("CREATE TABLE content (digest BLOB UNIQUE NOT NULL, data BLOB NOT NULL)")
        # Contents left where the host placed them from: sha256 -> (host file, offset, size).
        self._sources: dict[bytes, tuple[str, int, int]] = {}

    def add_source(self, path: str, contents: Mapping[bytes, tuple[int, int]]) -> None:
        """Contents a diff may read from the host file `path` (a tar the engine keeps, at
        each one's offset and size) instead of a copy here; checked against their sha256."""
        with self._lock:
            for digest, (offset, size) in contents.items():
                self._sources.setdefault(digest, (path, offset, size))

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for a tree's writes: one journal, not one per content."""
        self._write(lambda db: db.execute("BEGIN").rowcount)
        try:
            yield
        finally:
            if self._db is not None:
                self._write(lambda db: db.execute("COMMIT").rowcount)

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            raise FileNotFoundError("the tree's contents were removed with its sandbox")
        return self._db

    def has(self, digest: bytes) -> bool:
        with self._lock:
            if digest in self._sources:
                return True
            row = self._open().execute("SELECT 1 FROM content WHERE digest = ?", (digest,)).fetchone()
        return row is not None

    def read(self, digest: bytes) -> bytes:
        with self._lock:
            row = self._open().execute("SELECT data FROM content WHERE digest = ?", (digest,)).fetchone()
            source = self._sources.get(digest)
        if row is not None:
            return row[0]
        if source is not None and (data := _read_source(*source, digest)) is not None:
            return data
        raise FileNotFoundError(f"no content {digest.hex()[:16]} in {self.folder}")

    def __len__(self) -> int:
        with self._lock:
            return self._open().execute("SELECT count(*) FROM content").fetchone()[0]

    def put(self, digest: bytes, data: bytes, write: bool) -> tuple[bool, int]:
        """Whether the content `digest` is here (written now when `write`, or before), and how
        many bytes were written now."""
        if not write or self.failed:
            return self.has(digest), 0
        new = self._write(lambda db: db.execute(
            "INSERT OR IGNORE INTO content VALUES (?, ?)", (digest, data)).rowcount)
        if new is None:
            return self.has(digest), 0
        return True, len(data) if new else 0

    def _write(self, change: Callable[[sqlite3.Connection], int]) -> int | None:
        """`change` made, or None when the disk refused it (from then on, nothing is written)."""
        with self._lock:
            db = self._open()
            try:
                return change(db)
            except sqlite3.Error:
                self.failed = True
                return None

    def release(self, old: "Tree", live: "Tree", pinned: "Tree") -> None:
        """`old` is no longer needed: remove the contents it wrote that neither `live` nor
        `pinned` uses; those `live` uses become its own to release."""
        left = set(old.wrote)
        if not left:
            return
        for value in live.entries.values():
            if (digest := _digest(value)) in left:
                left.discard(digest)
                live.wrote.add(digest)
        for value in pinned.entries.values():
            left.discard(_digest(value))
        self._write(lambda db: db.executemany("DELETE FROM content WHERE digest = ?",
                                              [(d,) for d in left]).rowcount)
        old.wrote.clear()

    def remove(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
        self._removal()


def _read_source(path: str, offset: int, size: int, digest: bytes) -> bytes | None:
    """`size` bytes of the host file `path` at `offset`, if they still have that sha256."""
    try:
        with open(path, "rb") as source:
            source.seek(offset)
            data = source.read(size)
    except OSError:
        return None
    return data if len(data) == size and hashlib.sha256(data).digest() == digest else None


class Tree(Mapping[str, bytes]):
    """Path -> content (read from `blobs`) or held text. `entries` is what a diff compares;
    `wrote` the contents this tree added to `blobs`, for `Blobs.release`."""

    def __init__(self, blobs: Blobs | None = None, base: "Tree | None" = None):
        self.blobs = blobs
        self.entries: dict[str, bytes] = {}
        self.held: dict[str, bytes] = {}
        # Files not kept that a diff names by their own size (too large to diff), not by their mark.
        self.sized: set[str] = set()
        self.wrote: set[bytes] = set()
        # How the host saw the files when this tree was read (layer.LayerIndex), if it did.
        self.layer: object | None = None
        self._share = _Sharing(base) if base is not None else None

    def add(self, path: str, size: int, digest: bytes, held: bytes | None = None,
            sized: bool = False) -> None:
        """A file: its size, its sha256, and the text it shows as when its content is not kept
        (`sized`: the diff names it by its size)."""
        value = entry(size, digest)
        if self._share is not None:
            path, value = self._share(path, value)
        self.entries[path] = value
        if held is not None:
            self.held[path] = held
        if sized:
            self.sized.add(path)

    def kept_before(self, path: str, size: int, digest: bytes) -> bool:
        """The tree read before this one (`base`) kept this very content at `path`: no need to
        look it up or write it again."""
        return self._share is not None and self._share.kept(path, entry(size, digest))

    def add_text(self, path: str, text: bytes) -> None:
        """A path that shows as `text` and has no content: a link, the note of a cut."""
        self.add(path, _HELD, hashlib.sha256(text).digest(), text)

    def __getitem__(self, path: str) -> bytes:
        value = self.entries[path]
        held = self.held.get(path)
        if held is not None:
            return held
        assert self.blobs is not None
        return self.blobs.read(_digest(value))

    def __contains__(self, path: object) -> bool:
        return path in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Tree):  # no content read
            return self.entries == other.entries and self.held == other.held
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def shown_size(self, path: str) -> int:
        """The size a diff judges a path by, without reading it: len(self[path]), or for a file
        `sized`, its own size."""
        held = self.held.get(path)
        if held is None or path in self.sized:
            return int.from_bytes(self.entries[path][:8], "big", signed=True)
        return len(held)

    def size(self, path: str) -> int | None:
        """A file's own size (None: no file), whether or not its content is kept."""
        size = int.from_bytes(self.entries[path][:8], "big", signed=True)
        return None if size == _HELD else size

    def changed(self, other: "Tree") -> list[str]:
        """The paths whose size, hash or kind differ from `other`'s, or that only one has; no
        content is read."""
        mine, theirs = self.entries, other.entries
        return sorted(p for p in mine.keys() | theirs.keys() if mine.get(p) != theirs.get(p))


class _Sharing:
    """Hands back a base tree's own path and entry objects where they did not change, so a
    tree read again after a turn costs little more than its dict. The tar lists a workspace
    in the same order each time, so the base is walked alongside."""

    def __init__(self, base: Tree):
        self.entries = base.entries
        self.held = base.held
        self.paths = iter(base.entries)
        self.next = next(self.paths, None)

    def __call__(self, path: str, value: bytes) -> tuple[str, bytes]:
        if path != self.next and path in self.entries:  # paths were removed since the base
            while self.next is not None and self.next != path:
                self.next = next(self.paths, None)
        if path == self.next:
            path, self.next = self.next, next(self.paths, None)
        old = self.entries.get(path)
        return path, old if old == value else value

    def kept(self, path: str, value: bytes) -> bool:
        return self.entries.get(path) == value and path not in self.held
