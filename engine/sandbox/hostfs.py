"""Writes into a sandbox's file system from the host, on a local overlay2 daemon, as
layer.py reads it: the engine's own files, the workspace and the agent's user without a
daemon round trip (an archive or an exec costs the daemon ~50 ms of CPU each).

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
import hashlib
import os
import stat
import tarfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
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
# Past this many files or bytes chowned within RACY_NS of the hand-over's end, it waits that
# tick out rather than have the first turn read them all again (~25 ms of reads and hashing).
SETTLE_FILES, SETTLE_BYTES = 500, 16 << 20
_CHUNK = 1 << 20

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


class _Walker:
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
        _own(fd, *how)
        return fd
    except OSError as e:  # ELOOP: a link; ENOTDIR: a file; anything else: not ours to judge
        raise Unsafe(f"{name} is not a plain folder: {e.strerror}") from None
    if how is not None:
        _own(fd, *how)
    return fd


def _own(fd: int, mode: int, owner: Owner) -> None:
    os.fchown(fd, *owner)
    os.fchmod(fd, mode)  # after the owner: a chown drops setuid bits


def _new_file(folder: int, name: str) -> int:
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
    walker = _Walker(host)
    try:
        for rel, data in files.items():
            parts = host.check(f"{base.rstrip('/')}/{rel}")
            under = len(parts) > 1 and parts[0] == top

            def make(sofar: list[str]) -> tuple[int, Owner] | None:
                return (0o755, inside) if under and len(sofar) > 1 else None

            folder = walker.folder(parts[:-1], make)
            fd = _new_file(folder, parts[-1])
            try:
                _write_all(fd, data)
                _own(fd, mode, inside if under else (0, 0))
            finally:
                os.close(fd)
    finally:
        walker.close()


def chown_tree(host: HostRoot, rel: str, owner: Owner,
               seen: dict[str, tuple[Stat, Stat]] | None = None) -> None:
    """`chown -hR` of `rel` and all it holds, from the host: links are changed, never followed.
    `seen`: each regular file's stat before and after, by its path under `rel`."""
    walker = _Walker(host)
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
    walker = _Walker(host)
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
    walker = _Walker(host)
    try:
        folder = walker.folder(parts[:-1])
        os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        return True
    except (Unsafe, FileNotFoundError, NotADirectoryError):
        return False
    finally:
        walker.close()


# --- the agent's user -------------------------------------------------------------------

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GITCONFIG = b"[safe]\n\tdirectory = *\n"  # what `git config --global --add` writes to a new file


def hand_over(sandbox: Sandbox, host: HostRoot, env_path: str | None, workspace: str,
              agent_uid: int) -> tuple[str, int, int, str]:
    """container._HAND_OVER from the host: the agent's user found or added to /etc/passwd
    (and its group), its HOME made, `workspace` chowned, git told to trust it. Everything
    is checked before anything is written, so an Unsafe leaves the script a clean start.
    The chown changes every file's ctime: each one's stat before and after is kept for the
    first turn's tree (`rekeyed`), which would otherwise read the whole workspace again."""
    passwd, group = read_small(host, "etc/passwd"), read_small(host, "etc/group")
    if passwd is None or group is None:
        raise Unsafe("no /etc/passwd or /etc/group")
    lines = _lines(passwd[0])
    entry = next((x for x in lines if _match(x, name="agent", uid_from=1)), None) or \
        next((x for x in lines if _match(x, uid=agent_uid)), None)
    new_group = new_user = False
    if entry is None:
        new_group = not any(_match(x, uid=agent_uid) for x in _lines(group[0]))
        entry = f"agent:x:{agent_uid}:{agent_uid}:Proctor agent:/home/agent:/bin/sh"
        new_user = True
    fields = entry.split(":")
    if len(fields) < 6 or not (fields[2].isdigit() and fields[3].isdigit()):
        raise Unsafe(f"an entry the script would refuse: {entry[:80]!r}")
    name, uid, gid, home = fields[0], int(fields[2]), int(fields[3]), fields[5]
    if home in ("/", "") or home.startswith("/nonexistent"):
        home = f"/home/{name}"
    home_parts = host.check(home)
    git = _has_git(host, env_path or host.path or _DEFAULT_PATH)
    if git and (exists(host, "root/.gitconfig") or exists(host, "root/.config/git/config")
                or not _is_folder(host, "root")):
        raise Unsafe("git's global config exists, or /root does not: git itself decides")
    for rel, (_, st) in (("etc/group", group), ("etc/passwd", passwd)):
        if (st.st_uid, st.st_gid) != (0, 0) or not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"/{rel} is not root's")  # replaced as root's below
    if new_group:
        _replace(host, "etc/group", group[0] + f"agent:x:{agent_uid}:\n".encode(), group[1].st_mode)
    if new_user:
        _replace(host, "etc/passwd", passwd[0] + f"{entry}\n".encode(), passwd[1].st_mode)
    walker = _Walker(host)
    try:
        os.fchown(walker.folder(home_parts, lambda _: None), uid, gid)  # mkdir -p: root's 0755
    finally:
        walker.close()
    seen: dict[str, tuple[Stat, Stat]] = {}
    chown_tree(host, workspace, (uid, gid), seen)
    ended = time.time_ns()
    racy = [after[2] for _, after in seen.values() if after[1] >= ended - RACY_NS]
    if len(racy) > SETTLE_FILES or sum(racy) > SETTLE_BYTES:
        time.sleep(RACY_NS / 1e9)  # no agent runs yet: from now on no file is racy
        ended = time.time_ns()
    with _LOCK:
        _REKEYED[sandbox] = (seen, ended)
    if git:
        _replace(host, "root/.gitconfig", GITCONFIG, 0o644)
    return name, uid, gid, home


def _lines(data: bytes) -> list[str]:
    try:
        return data.decode().split("\n")
    except UnicodeDecodeError:
        raise Unsafe("a user database that is not UTF-8") from None


def _match(line: str, name: str = "", uid: int | None = None, uid_from: int | None = None) -> bool:
    """grep -E '^NAME:[^:]*:[1-9]' (uid_from) or '^[^:]*:[^:]*:UID:' on one line."""
    fields = line.split(":")
    if uid_from is not None:
        return len(fields) >= 3 and fields[0] == name and fields[2][:1] in set("123456789")
    return len(fields) >= 4 and fields[2] == str(uid)


def _replace(host: HostRoot, rel: str, data: bytes, mode: int) -> None:
    """`rel` (its folder there already) replaced by root's file of `data` and `mode`."""
    parts = host.check(rel)
    walker = _Walker(host)
    try:
        fd = _new_file(walker.folder(parts[:-1]), parts[-1])
        try:
            _write_all(fd, data)
            _own(fd, mode & 0o7777, (0, 0))
        finally:
            os.close(fd)
    finally:
        walker.close()


def _is_folder(host: HostRoot, rel: str) -> bool:
    walker = _Walker(host)
    try:
        walker.folder(host.check(rel))
        return True
    except (Unsafe, FileNotFoundError):
        return False
    finally:
        walker.close()


def _has_git(host: HostRoot, path: str) -> bool:
    """`command -v git`, looked up without following links: True where a PATH folder holds
    an executable `git` file; Unsafe where it may lie behind a link."""
    behind_link = False
    for folder in path.split(":"):
        if not folder.startswith("/"):
            continue
        try:
            parts = host.check(f"{folder}/git")
        except Unsafe:  # under a mount, or not plain
            behind_link = True
            continue
        walker = _Walker(host)
        try:
            fd = walker.folder(parts[:-1])
            st = os.stat("git", dir_fd=fd, follow_symlinks=False)
        except Unsafe:
            behind_link = True
            continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        finally:
            walker.close()
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return True
        behind_link = True  # a link, or not executable: the shell would judge it
    if behind_link:
        raise Unsafe("git may lie behind a link")
    return False


# --- placing a tar's tree ----------------------------------------------------------------


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
# Per sandbox: each file's stat before and after the hand-over's chown, and when it ended.
_REKEYED: "weakref.WeakKeyDictionary[object, tuple[dict[str, tuple[Stat, Stat]], int]]" = \
    weakref.WeakKeyDictionary()


def rekeyed(sandbox: Sandbox) -> tuple[dict[str, tuple[Stat, Stat]], int]:
    """The hand-over's stats of `sandbox`'s files (once: a later tree no longer needs them)."""
    with _LOCK:
        return _REKEYED.pop(sandbox, ({}, 0))


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
    walker = _Walker(host)
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
            fd = _new_file(folder, parts[-1])
            try:
                if source >= 0:
                    _copy(source, fd, member.offset, member.size)
                else:
                    with open(member.path, "rb") as own:
                        _copy(own.fileno(), fd, 0, member.size)
                _own(fd, member.mode, member.owner)
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


@contextmanager
def fallback_on_error() -> Iterator[None]:
    """OSError from a host write becomes Unsafe: the daemon's path decides."""
    try:
        yield
    except OSError as e:
        raise Unsafe(str(e)) from None

