"""A workspace placed from the host: a tar's tree (a git source's, hashed once per batch) or
a host folder, written into the sandbox with hostfs.py's safe writer as Docker's
put_archive would extract it, the bytes copied in the kernel. What it placed (each file's
stat and sha256) lets the snapshot skip reading it again.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tarfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .hostfs import WALK_MAX, HostRoot, Owner, Stat, Unsafe, Walker, new_file, set_owner

if TYPE_CHECKING:
    from .container import Sandbox

_CHUNK = 1 << 20
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)  # a batch's tar keeps one per entry
class Member:
    """One entry to place: a folder, a file (its bytes at `offset` of a host tar, or the host
    file `path`) or a link; `digest` is the file's sha256 where known (b"": not hashed)."""

    name: str
    kind: str  # "dir", "file", "link"
    mode: int
    owner: Owner
    mtime_ns: int
    size: int = 0
    offset: int = 0
    digest: bytes = b""
    target: str = ""
    path: str = ""


@dataclass
class Placed:
    """What a placement wrote: per workspace path its stat, size and sha256, trusted by the
    snapshot while the stat is the same (files hashed on the host only); `done_ns` bounds
    the racy ones (layer.RACY_NS). `source` and `contents` say where each content lies in
    the host's tar, read again when a diff shows it."""

    source: str = ""
    files: dict[str, tuple[Stat, int, bytes]] = field(default_factory=dict)
    contents: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # digest: offset, size
    done_ns: int = 0


_PLACED: "weakref.WeakKeyDictionary[object, Placed]" = weakref.WeakKeyDictionary()


def placed(sandbox: Sandbox) -> Placed | None:
    """What the host placed in `sandbox`'s workspace, if it did."""
    with _LOCK:
        return _PLACED.get(sandbox)


def remember(sandbox: Sandbox, what: Placed) -> None:
    with _LOCK:
        _PLACED[sandbox] = what


_MANIFESTS: dict[tuple[str, int, int, int], list[Member]] = {}
_MANIFESTS_MAX = 8


def tar_manifest(tar_path: Path) -> list[Member]:
    """The tar's entries and each file's sha256, read once per tar (the batch's trials share it)."""
    st = os.stat(tar_path)
    key = (str(tar_path), st.st_ino, st.st_size, st.st_mtime_ns)
    with _LOCK:
        found = _MANIFESTS.get(key)
    if found is not None:
        return found
    members: list[Member] = []
    with open(tar_path, "rb") as raw, tarfile.open(fileobj=raw, mode="r:") as tar:
        for info in tar:
            owner, mtime = (info.uid, info.gid), int(info.mtime) * 10**9
            if info.isdir():
                members.append(Member(info.name.rstrip("/"), "dir", info.mode & 0o7777, owner, mtime))
            elif info.isreg():
                raw.seek(info.offset_data)
                digest, left = hashlib.sha256(), info.size
                while left > 0:
                    chunk = raw.read(min(_CHUNK, left))
                    if not chunk:
                        raise Unsafe("the tar ends inside a file")
                    digest.update(chunk)
                    left -= len(chunk)
                members.append(Member(info.name, "file", info.mode & 0o7777, owner, mtime,
                                      info.size, info.offset_data, digest.digest()))
            elif info.issym():
                members.append(Member(info.name, "link", 0o777, owner, mtime, target=info.linkname))
            else:
                raise Unsafe(f"a tar entry the host route does not place: {info.name}")
            tar.members.clear()
    with _LOCK:
        while len(_MANIFESTS) >= _MANIFESTS_MAX:
            _MANIFESTS.pop(next(iter(_MANIFESTS)))
        _MANIFESTS[key] = members
    return members


def folder_members(folder: Path, workspace: str) -> list[Member]:
    """A host folder as `tarfile.add(folder, arcname=workspace)` lists it (the workspace's
    own folder first; links kept as links); Unsafe for what it would store otherwise
    (hard links, FIFOs, devices)."""
    top = workspace.strip("/")
    members: list[Member] = []

    def add(path: str, name: str, st: os.stat_result) -> None:
        owner, mtime = (st.st_uid, st.st_gid), _tar_mtime_ns(st)
        if stat.S_ISDIR(st.st_mode):
            members.append(Member(name, "dir", st.st_mode & 0o7777, owner, mtime))
            for child in sorted(os.listdir(path)):
                add(os.path.join(path, child), f"{name}/{child}", os.lstat(os.path.join(path, child)))
        elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            members.append(Member(name, "file", st.st_mode & 0o7777, owner, mtime, st.st_size, path=path))
        elif stat.S_ISLNK(st.st_mode):
            members.append(Member(name, "link", 0o777, owner, mtime, target=os.readlink(path)))
        else:
            raise Unsafe(f"{path} is not a plain file, folder or link")
        if len(members) > WALK_MAX:
            raise Unsafe("too many files to place")

    add(str(folder), top, os.stat(folder))
    return members


def _tar_mtime_ns(st: os.stat_result) -> int:
    """The mtime a PAX tar carries for `st` (its float, as text) as Docker reads it back."""
    whole, _, frac = str(st.st_mtime).partition(".")
    if not (whole.isdigit() and frac.isdigit()):  # before 1970, or in e-notation
        return st.st_mtime_ns
    return int(whole) * 10**9 + int(frac.ljust(9, "0")[:9])


def place(host: HostRoot, members: list[Member], workspace: str, tar_path: Path | None = None) -> Placed:
    """`members` written into the sandbox as Docker's put_archive extracts a tar of them:
    their modes, owners and mtimes, existing folders taking their entry's mode, existing
    entries replaced; bytes copied in the kernel from the host tar or file."""
    top = workspace.strip("/")
    placed = Placed(str(tar_path) if tar_path is not None else "")
    modes = {m.name: (m.mode, m.owner) for m in members if m.kind == "dir"}
    walker = Walker(host)
    folders: list[tuple[list[str], int]] = []
    source = os.open(tar_path, os.O_RDONLY | os.O_CLOEXEC) if tar_path is not None else -1
    try:
        for member in members:
            parts = host.check(member.name)
            if parts[0] != top:
                raise Unsafe(f"{member.name} is outside {workspace}")
            if member.kind == "dir":
                walker.folder(parts, lambda sofar: modes.get("/".join(sofar)))
                folders.append((parts, member.mtime_ns))
                continue
            folder = walker.folder(parts[:-1], lambda sofar: modes.get("/".join(sofar)))
            if member.kind == "link":
                _new_link(folder, parts[-1], member)
                continue
            fd = new_file(folder, parts[-1])
            try:
                if source >= 0:
                    _copy(source, fd, member.offset, member.size)
                else:
                    with open(member.path, "rb") as own:
                        _copy(own.fileno(), fd, 0, member.size)
                set_owner(fd, member.mode, member.owner)
                os.utime(fd, ns=(member.mtime_ns, member.mtime_ns))
                st = os.fstat(fd)
            finally:
                os.close(fd)
            if member.digest:
                key = (st.st_ino, st.st_ctime_ns, st.st_size, st.st_mode)
                placed.files["/".join(parts[1:])] = (key, member.size, member.digest)
                placed.contents[member.digest] = (member.offset, member.size)
        for parts, mtime_ns in reversed(folders):  # after what they hold, as a tar's folders are
            os.utime(walker.folder(parts), ns=(mtime_ns, mtime_ns))
    finally:
        if source >= 0:
            os.close(source)
        walker.close()
    placed.done_ns = time.time_ns()
    return placed


def _new_link(folder: int, name: str, member: Member) -> None:
    for _ in range(3):
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise Unsafe(f"cannot replace {name}: {e.strerror}") from None
        try:
            os.symlink(member.target, name, dir_fd=folder)
            break
        except FileExistsError:
            continue
    else:
        raise Unsafe(f"{name} keeps being made again")
    os.chown(name, *member.owner, dir_fd=folder, follow_symlinks=False)
    os.utime(name, ns=(member.mtime_ns, member.mtime_ns), dir_fd=folder, follow_symlinks=False)


_RANGE_COPY = [True]  # False once copy_file_range is refused (overlay over another fs: EXDEV)


def _copy(source: int, target: int, offset: int, size: int) -> None:
    """`size` bytes of `source` from `offset` into `target`, in the kernel."""
    done = 0
    while done < size:
        n = -1
        if _RANGE_COPY[0]:
            try:
                n = os.copy_file_range(source, target, size - done, offset + done)
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                _RANGE_COPY[0] = False
        if n < 0:
            n = os.sendfile(target, source, offset + done, size - done)
        if n == 0:
            raise Unsafe("the source ended early")
        done += n
