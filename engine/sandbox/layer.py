"""Workspace trees read from the container's file system as the host sees it, so a diff
costs what changed, not what the workspace holds.

On a local overlay2 daemon the container's merged tree is a folder on this host. The
snapshot reads every file there once (each hash, and the content a diff can show, into the
sandbox's tree folder, as `Sandbox.read_tree` does) and keeps each file's inode, ctime,
size and mode. A turn's tree stats every file again and reads only those whose stat
differs. Nothing inside the sandbox can hide a change: mtimes are the agent's to set, but
ctime is set by the kernel on every write, chmod or utime and no process can set it back.
A file whose ctime falls within RACY_NS of the walk that saw it could change again within
the same clock tick unseen, so it is read again next time (git's "racily clean" entries).
The walk never follows a link (`os.fwalk` holds each folder open, files are opened with
O_NOFOLLOW), so a link the agent makes cannot lead it out of the sandbox. Elsewhere (a
remote daemon, another storage driver, a stopped container, a cut tree) the archive read
is used, as before.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass, field

from docker.errors import DockerException

from .. import limits
from . import host_user, hostfs, placement
from .container import (TREE_FILE_MAX, TREE_FILES_MAX, TREE_NAMES_MAX, TREE_NOTE, TREE_STREAM_MAX,
                        TREE_TOTAL_MAX, WORKSPACE, Sandbox, _not_kept)
from .tree import Tree, entry

RACY_NS = hostfs.RACY_NS  # twice the coarsest kernel clock tick, with room for the walk's start
_CHUNK = 1 << 20
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)

Stat = tuple[int, int, int, int]  # inode, ctime (ns), size, mode


@dataclass
class LayerIndex:
    """What the walk that read a tree saw: per path its stat, and the paths to read again
    whatever their stat says (racy, or not read in full)."""

    root: str
    stats: dict[str, Stat] = field(default_factory=dict)
    again: set[str] = field(default_factory=set)


class _Fallback(Exception):
    """The host's view cannot give this tree: read it from the archive."""


def snapshot(sandbox: Sandbox) -> Tree:
    """The workspace as it is now, read from the host where the daemon is local. Files the
    host placed (hostfs) whose stat has not changed since keep the hash placement took, and
    their content stays in the host's source until a diff shows it."""
    root = _root(sandbox)
    if root is not None:
        try:
            return _read(sandbox, LayerIndex(root), None, placement.placed(sandbox))
        except _Fallback:
            pass
    return sandbox.read_tree()


def turn_tree(sandbox: Sandbox, previous: Tree) -> Tree:
    """The workspace after a turn: `previous` with the files whose stat changed read again."""
    index = previous.layer
    if isinstance(index, LayerIndex) and TREE_NOTE not in previous.entries and not sandbox.destroyed:
        try:
            return _read(sandbox, index, previous)
        except _Fallback:
            pass
    return sandbox.read_tree(base=previous)


def _root(sandbox: Sandbox) -> str | None:
    """The host path of the sandbox's /workspace, when the daemon is on this host and the
    workspace is part of the container's own file system (no volume or bind mount on it)."""
    if sandbox.api.base_url != "http+docker://localhost":  # docker-py's name for a Unix socket
        return None  # tcp://, ssh:// (docker-py calls it http+docker://ssh): another host
    if (host := hostfs.root(sandbox)) is not None:  # inspected once already
        if any(m in ("/", WORKSPACE) or m.startswith(WORKSPACE + "/") for m in host.mounts):
            return None
        root = host.merged + WORKSPACE
        return root if os.path.isdir(root) and not os.path.islink(root) else None
    try:
        info = sandbox.api.inspect_container(sandbox.id)
    except DockerException:
        return None
    driver = info.get("GraphDriver") or {}
    merged = (driver.get("Data") or {}).get("MergedDir")
    if driver.get("Name") != "overlay2" or not merged:
        return None
    for mount in info.get("Mounts") or []:
        if (mount.get("Destination") or "").rstrip("/") in ("", "/", WORKSPACE) or \
                (mount.get("Destination") or "").startswith(WORKSPACE + "/"):
            return None
    root = merged + WORKSPACE
    return root if os.path.isdir(root) and not os.path.islink(root) else None


def _read(sandbox: Sandbox, index: LayerIndex, previous: Tree | None,
          placed: placement.Placed | None = None) -> Tree:
    """A tree of the workspace under `index.root`: entries of `previous` (or of what was
    `placed`) whose stat did not change are kept as they are, the rest read now. Raises
    _Fallback where the archive read must decide (a cut tree, the folder gone)."""
    blobs = sandbox._tree_blobs()
    known = placed.files if placed is not None else {}
    # The hand-over's chown changed every ctime after the snapshot; what it saw is trusted,
    # but for files it changed within RACY_NS of its end (a write may follow unseen).
    chowned, chown_ns = host_user.rekeyed(sandbox) if previous is not None else ({}, 0)
    if placed is not None:
        blobs.add_source(placed.source, placed.contents)
    tree = Tree(blobs)
    new = LayerIndex(index.root)
    tree.layer = new
    old_entries = previous.entries if previous is not None else {}
    started = time.time_ns()
    written = names = visited = 0
    try:
        with blobs.batch():
            for folder, dirs, files, dir_fd in os.fwalk(index.root, follow_symlinks=False):
                rel_folder = os.path.relpath(folder, index.root)
                prefix = "" if rel_folder == "." else rel_folder + "/"
                # fwalk lists a link to a folder with the folders (and never enters it): a link here.
                links = [d for d in dirs if _is_link(d, dir_fd)]
                visited += len(dirs) + len(files)
                if visited > 4 * TREE_FILES_MAX:  # a maze of empty folders: the archive read bounds it
                    raise _Fallback()
                dirs[:] = [d for d in dirs if d not in links and not _left_out(prefix, d)]
                for name in files + links:
                    if _left_out(prefix, name):
                        continue
                    rel = prefix + name
                    try:
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except FileNotFoundError:  # removed while walked
                        continue
                    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        continue  # the archive read skips fifos, sockets and devices too
                    if len(new.stats) >= TREE_FILES_MAX:
                        raise _Fallback()
                    key: Stat = (st.st_ino, st.st_ctime_ns, st.st_size, st.st_mode)
                    new.stats[rel] = key
                    if st.st_ctime_ns >= started - RACY_NS:
                        new.again.add(rel)
                    if (was := known.get(rel)) is not None and was[0] == key and placed is not None \
                            and st.st_ctime_ns < placed.done_ns - RACY_NS and rel not in new.again:
                        _add_placed(tree, rel, was[1], was[2])
                        names += len(rel)
                        continue
                    if previous is not None and rel in old_entries and rel not in index.again \
                            and (index.stats.get(rel) == key or (
                                chowned.get(rel) == (index.stats.get(rel), key)
                                and st.st_ctime_ns < chown_ns - RACY_NS)):
                        _keep(tree, previous, rel)
                        names += len(rel) + len(previous.held.get(rel, b""))
                        continue
                    if stat.S_ISLNK(st.st_mode):
                        target = os.readlink(name, dir_fd=dir_fd)
                        names += len(rel) + len(target)
                        tree.add_text(rel, f"-> {target}".encode())
                    else:
                        names += len(rel)
                        written += _add_file(tree, previous, rel, name, dir_fd, written, new)
                    if names > TREE_NAMES_MAX:
                        raise _Fallback()
    except (OSError, RecursionError):  # gone, unmounted, or folders nested past what a walk holds
        raise _Fallback() from None
    if not os.path.isdir(index.root):  # unmounted while walked: the container stopped
        raise _Fallback()
    return tree


def _left_out(prefix: str, name: str) -> bool:
    """container._skipped for a name whose folder was not left out: the walk prunes as it goes."""
    return name == "__pycache__" or (not prefix and name == ".git")


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _add_placed(tree: Tree, rel: str, size: int, digest: bytes) -> None:
    """A file as the host placed it: its hash known, its content in the host's source."""
    if size > limits.DIFF_SOURCE:
        tree.add(rel, size, digest, f"<large file: {size} bytes>".encode(), sized=size <= TREE_FILE_MAX)
    else:
        tree.add(rel, size, digest)


def _keep(tree: Tree, previous: Tree, rel: str) -> None:
    """`rel` as `previous` has it: the same objects, nothing read."""
    tree.entries[rel] = previous.entries[rel]
    if (held := previous.held.get(rel)) is not None:
        tree.held[rel] = held
    if rel in previous.sized:
        tree.sized.add(rel)


def _add_file(tree: Tree, previous: Tree | None, rel: str, name: str, dir_fd: int,
              written: int, index: LayerIndex) -> int:
    """Reads one regular file into `tree` as `Sandbox.read_tree` would; returns the bytes
    of new content written to the tree folder."""
    assert tree.blobs is not None
    try:
        fd = os.open(name, _OPEN, dir_fd=dir_fd)
    except FileNotFoundError:
        index.stats.pop(rel, None)
        return 0
    with os.fdopen(fd, "rb", buffering=0) as source:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since its stat
            index.again.add(rel)
            return 0
        data = source.read(limits.DIFF_SOURCE + 1)
        if len(data) > limits.DIFF_SOURCE:  # never diffed: hashed as it is read, not kept
            digest, size = hashlib.sha256(data), len(data)
            while size <= TREE_STREAM_MAX and (chunk := source.read(_CHUNK)):
                digest.update(chunk)
                size += len(chunk)
            tree.add(rel, size, digest.digest(), f"<large file: {size} bytes>".encode(),
                     sized=size <= TREE_FILE_MAX)
            return 0
    size, digest = len(data), hashlib.sha256(data).digest()
    value = entry(size, digest)
    if previous is not None and previous.entries.get(rel) == value and rel not in previous.held:
        kept, new = True, 0  # touched, not changed: its content is there already
    else:
        kept, new = tree.blobs.put(digest, data, write=written + size <= TREE_TOTAL_MAX)
    tree.add(rel, size, digest, None if kept else _not_kept(size, digest))
    if new:
        tree.wrote.add(digest)
    return new

