"""Writes into a sandbox's file system from the host, on a local overlay2 daemon, as
layer.py reads it: the engine's own files here, the workspace (placement.py) and the
agent's user (host_user.py) without a daemon round trip (an archive or an exec costs the
daemon ~50 ms of CPU each).

Once agent code has run, the container's tree is hostile: a link there resolves against
the HOST's root when the host follows it. So no write ever follows one: every folder on
the way is opened with O_DIRECTORY|O_NOFOLLOW relative to its parent's fd, a final entry
is unlinked and created anew (O_CREAT|O_EXCL|O_NOFOLLOW), never opened, so a planted
link, hard link, FIFO or device is never written through, and owner and mode are set on
the fd. Anything unexpected (a link or a non-folder on the way, a path under a mount, a
remote daemon, remapped users, not root here) raises Unsafe, and the caller takes the
archive or exec path, which resolves paths inside the container.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from docker.errors import DockerException

if TYPE_CHECKING:
    from .container import Sandbox

# Off (PROCTOR_HOST_WRITES=0): every write goes through the daemon, as before (benches, tests).
ENV_SWITCH = "PROCTOR_HOST_WRITES"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What one walk of a tree may visit or nest before the daemon's path is taken instead.
WALK_MAX = 200_000
DEPTH_MAX = 128
READ_MAX = 1 << 20  # /etc/passwd, /etc/group
# A file whose ctime falls within this of when it was last seen may change again unseen in
# the same clock tick (layer.py's racily clean entries): twice the coarsest tick (10 ms at
# HZ=100), with room for the walk's own start.
RACY_NS = 50_000_000

Stat = tuple[int, int, int, int]  # inode, ctime (ns), size, mode: as layer.Stat
Owner = tuple[int, int]


class Unsafe(Exception):
    """The host route cannot make this write as the daemon would: take the daemon's."""


@dataclass(frozen=True)
class HostRoot:
    """The container's merged tree on this host, and where mounts hide it."""

    merged: str
    mounts: tuple[str, ...]
    path: str = ""  # the container's own PATH, which a command finds git by

    def check(self, rel: str) -> list[str]:
        """`rel` (relative to the container's /) as components; Unsafe if it is not plain or
        lies under a mount (a write there would land beneath the mount, unseen)."""
        parts = rel.strip("/").split("/")
        if not rel.strip("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise Unsafe(f"not a plain path: {rel!r}")
        full = "/" + "/".join(parts)
        for mount in self.mounts:
            if full == mount or full.startswith(mount + "/") or mount.startswith(full + "/"):
                raise Unsafe(f"{full} is under a mount")
        return parts


_ROOTS: "weakref.WeakKeyDictionary[Sandbox, HostRoot | None]" = weakref.WeakKeyDictionary()
_DAEMONS: "weakref.WeakKeyDictionary[object, bool]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def root(sandbox: Sandbox) -> HostRoot | None:
    """The sandbox's tree as this host sees it, where the host route applies (else None)."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or os.geteuid() != 0 or sandbox.destroyed:
        return None  # only root here can set the owners the daemon would
    with _LOCK:
        if sandbox in _ROOTS:
            found = _ROOTS[sandbox]
            return found if found is not None and os.path.isdir(found.merged) else None
    found = _find_root(sandbox)
    with _LOCK:
        _ROOTS[sandbox] = found
    return found


def _find_root(sandbox: Sandbox) -> HostRoot | None:
    api = sandbox.api
    if api.base_url != "http+docker://localhost" or not _plain_ids(api):
        return None  # another host, or container root is not host root
    try:
        info = api.inspect_container(sandbox.id)
    except DockerException:
        return None
    driver = info.get("GraphDriver") or {}
    merged = (driver.get("Data") or {}).get("MergedDir")
    if driver.get("Name") != "overlay2" or not merged or (info.get("HostConfig") or {}).get("UsernsMode"):
        return None
    mounts = tuple(sorted((m.get("Destination") or "/").rstrip("/") or "/" for m in info.get("Mounts") or []))
    if "/" in mounts or not os.path.isdir(merged) or os.path.islink(merged):
        return None
    env = dict(e.split("=", 1) for e in (info.get("Config") or {}).get("Env") or [] if "=" in e)
    return HostRoot(merged, mounts, env.get("PATH", ""))


def _plain_ids(api) -> bool:
    """The daemon maps no user namespace and is not rootless: uid 0 inside is uid 0 here."""
    with _LOCK:
        if api in _DAEMONS:
            return _DAEMONS[api]
    try:
        options = " ".join(api.info().get("SecurityOptions") or [])
        plain = "userns" not in options and "rootless" not in options
    except DockerException:
        plain = False
    with _LOCK:
        _DAEMONS[api] = plain
    return plain


class Walker:
    """Folder fds from the root down, opened with O_NOFOLLOW, kept for the folders the
    writes share (a tar lists a folder's entries together). Close with `close()`."""

    def __init__(self, host: HostRoot):
        self.host = host
        self.stack: list[tuple[str, int]] = [("", os.open(host.merged, _DIR))]

    def folder(self, parts: list[str],
               make: Callable[[list[str]], tuple[int, Owner] | None] | None = None) -> int:
        """The fd of the folder `parts` (from the container's /), each component opened
        without following links. With `make`, a missing one is made: with the mode and owner
        `make(parts so far)` gives (then also applied to an existing one, as a tar's folder
        entry is), or root's 0755 for None; without, FileNotFoundError."""
        keep = 0
        while keep < len(parts) and keep + 1 < len(self.stack) and self.stack[keep + 1][0] == parts[keep]:
            keep += 1
        while len(self.stack) > keep + 1:
            os.close(self.stack.pop()[1])
        for i in range(keep, len(parts)):
            if len(self.stack) > DEPTH_MAX:
                raise Unsafe("folders nested too deep")
            sofar = parts[: i + 1]
            self.stack.append((parts[i], _open_folder(
                self.stack[-1][1], parts[i], (lambda: make(sofar)) if make is not None else None)))
        return self.stack[-1][1]

    def close(self) -> None:
        while self.stack:
            os.close(self.stack.pop()[1])


def _open_folder(parent: int, name: str, make: Callable[[], tuple[int, Owner] | None] | None) -> int:
    how = make() if make is not None else None
    try:
        fd = os.open(name, _DIR, dir_fd=parent)
    except FileNotFoundError:
        if make is None:
            raise
        os.mkdir(name, 0o700, dir_fd=parent)
        how = how or (0o755, (0, 0))  # as Docker makes a missing parent folder
        try:
            fd = os.open(name, _DIR, dir_fd=parent)
        except OSError as e:
            raise Unsafe(f"{name} changed while it was made: {e}") from None
        set_owner(fd, *how)
        return fd
    except OSError as e:  # ELOOP: a link; ENOTDIR: a file; anything else: not ours to judge
        raise Unsafe(f"{name} is not a plain folder: {e.strerror}") from None
    if how is not None:
        set_owner(fd, *how)
    return fd


def set_owner(fd: int, mode: int, owner: Owner) -> None:
    os.fchown(fd, *owner)
    os.fchmod(fd, mode)  # after the owner: a chown drops setuid bits


def new_file(folder: int, name: str) -> int:
    """A fresh file `name` in `folder`, open for writing: whatever was there (a link, a hard
    link, a FIFO, a device, a file) is unlinked, never opened."""
    for _ in range(3):
        try:
            return os.open(name, _NEW, 0o600, dir_fd=folder)
        except FileExistsError:
            pass  # there (again, after the unlink): unlink it, never open it
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        except OSError as e:  # a folder (EISDIR), or not ours to remove
            raise Unsafe(f"cannot replace {name}: {e.strerror}") from None
    raise Unsafe(f"{name} keeps being made again")


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_files(host: HostRoot, files: Mapping[str, bytes], base: str, mode: int,
                owner: Owner | None, workspace: str) -> None:
    """`Sandbox.put_files` from the host: each file replaced (never written through) with
    `mode`; under `workspace`, it and the folders made for it (0755, as the tar's folder
    entries, existing ones too) belong to `owner`; elsewhere missing folders are root's 0755."""
    top = workspace.strip("/")
    inside = owner or (0, 0)
    walker = Walker(host)
    try:
        for rel, data in files.items():
            parts = host.check(f"{base.rstrip('/')}/{rel}")
            under = len(parts) > 1 and parts[0] == top

            def make(sofar: list[str]) -> tuple[int, Owner] | None:
                return (0o755, inside) if under and len(sofar) > 1 else None

            folder = walker.folder(parts[:-1], make)
            fd = new_file(folder, parts[-1])
            try:
                _write_all(fd, data)
                set_owner(fd, mode, inside if under else (0, 0))
            finally:
                os.close(fd)
    finally:
        walker.close()


def chown_tree(host: HostRoot, rel: str, owner: Owner,
               seen: dict[str, tuple[Stat, Stat]] | None = None) -> None:
    """`chown -hR` of `rel` and all it holds, from the host: links are changed, never followed.
    `seen`: each regular file's stat before and after, by its path under `rel`."""
    walker = Walker(host)
    try:
        parts = host.check(rel)
        parent = walker.folder(parts[:-1])
        try:
            top = os.open(parts[-1], _DIR, dir_fd=parent)
        except OSError as e:
            raise Unsafe(f"{rel} is not a plain folder: {e.strerror}") from None
        try:
            if (os.fstat(top).st_uid, os.fstat(top).st_gid) != owner:
                os.fchown(top, *owner)
            _chown_in(top, "", owner, seen, [0], 0)
        finally:
            os.close(top)
    finally:
        walker.close()


def _chown_in(fd: int, prefix: str, owner: Owner, seen: dict[str, tuple[Stat, Stat]] | None,
              visited: list[int], depth: int) -> None:
    """What the folder `fd` holds, depth first: one fd open per level."""
    if depth > DEPTH_MAX:
        raise Unsafe("folders nested too deep")
    with os.scandir(fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    visited[0] += len(names)
    if visited[0] > WALK_MAX:
        raise Unsafe("too many files to walk")
    for name, is_dir in names:
        try:
            before = os.stat(name, dir_fd=fd, follow_symlinks=False)
            # Left as it is where a chown would change nothing: its ctime stays, so the next
            # turn's tree does not read it again (a chown drops setuid/setgid bits: not those).
            if (before.st_uid, before.st_gid) != owner or (
                    not stat.S_ISDIR(before.st_mode) and before.st_mode & (stat.S_ISUID | stat.S_ISGID)):
                os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
                if seen is not None and stat.S_ISREG(before.st_mode):
                    after = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    seen[prefix + name] = (_key(before), _key(after))
        except FileNotFoundError:
            continue
        if not is_dir:
            continue
        try:
            child = os.open(name, _DIR, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone, or swapped: its new entry was changed above, not followed
        except OSError as e:
            if e.errno == errno.ELOOP:
                continue
            raise
        try:
            _chown_in(child, f"{prefix}{name}/", owner, seen, visited, depth + 1)
        finally:
            os.close(child)


def _key(st: os.stat_result) -> Stat:
    return (st.st_ino, st.st_ctime_ns, st.st_size, st.st_mode)


def read_small(host: HostRoot, rel: str) -> tuple[bytes, os.stat_result] | None:
    """A small regular file's bytes and stat, never through a link (None: it does not exist)."""
    parts = host.check(rel)
    walker = Walker(host)
    try:
        folder = walker.folder(parts[:-1])
        try:
            # Never opened unless a plain file: a device's open may act (the image may hold one).
            if not stat.S_ISREG(os.stat(parts[-1], dir_fd=folder, follow_symlinks=False).st_mode):
                raise Unsafe(f"{rel} is not a plain file")
            fd = os.open(parts[-1], _READ, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Unsafe(f"cannot read {rel}: {e.strerror}") from None
        with os.fdopen(fd, "rb", buffering=0) as source:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > READ_MAX:
                raise Unsafe(f"{rel} is not a small file")
            return source.read(READ_MAX + 1), st
    finally:
        walker.close()


def exists(host: HostRoot, rel: str) -> bool:
    """Whether `rel` names anything (a link included), looked up without following links."""
    parts = host.check(rel)
    walker = Walker(host)
    try:
        folder = walker.folder(parts[:-1])
        os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        return True
    except (Unsafe, FileNotFoundError, NotADirectoryError):
        return False
    finally:
        walker.close()

def replace_file(host: HostRoot, rel: str, data: bytes, mode: int) -> None:
    """`rel` (its folder there already) replaced by root's file of `data` and `mode`."""
    parts = host.check(rel)
    walker = Walker(host)
    try:
        fd = new_file(walker.folder(parts[:-1]), parts[-1])
        try:
            _write_all(fd, data)
            set_owner(fd, mode & 0o7777, (0, 0))
        finally:
            os.close(fd)
    finally:
        walker.close()


def is_folder(host: HostRoot, rel: str) -> bool:
    walker = Walker(host)
    try:
        walker.folder(host.check(rel))
        return True
    except (Unsafe, FileNotFoundError):
        return False
    finally:
        walker.close()


@contextmanager
def fallback_on_error() -> Iterator[None]:
    """OSError from a host write becomes Unsafe: the daemon's path decides."""
    try:
        yield
    except OSError as e:
        raise Unsafe(str(e)) from None
