"""The agent's user made from the host (container._HAND_OVER's steps without an exec), with
the safe writer of hostfs.py: found or added to /etc/passwd and /etc/group, its HOME made,
/workspace chowned, git told to trust it. Anything the script would decide differently
raises Unsafe, and the script runs instead.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import weakref
from typing import TYPE_CHECKING

from .hostfs import (RACY_NS, HostRoot, Stat, Unsafe, Walker, chown_tree, exists, is_folder, read_small,
                     replace_file)

if TYPE_CHECKING:
    from .container import Sandbox

# Past this many files or bytes chowned within RACY_NS of the hand-over's end, it waits that
# tick out rather than have the first turn read them all again (~25 ms of reads and hashing).
SETTLE_FILES, SETTLE_BYTES = 500, 16 << 20

# Per sandbox: each file's stat before and after the hand-over's chown, and when it ended.
_REKEYED: "weakref.WeakKeyDictionary[object, tuple[dict[str, tuple[Stat, Stat]], int]]" = \
    weakref.WeakKeyDictionary()

_LOCK = threading.Lock()
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
                or not is_folder(host, "root")):
        raise Unsafe("git's global config exists, or /root does not: git itself decides")
    for rel, (_, st) in (("etc/group", group), ("etc/passwd", passwd)):
        if (st.st_uid, st.st_gid) != (0, 0) or not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"/{rel} is not root's")  # replaced as root's below
    if new_group:
        replace_file(host, "etc/group", group[0] + f"agent:x:{agent_uid}:\n".encode(), group[1].st_mode)
    if new_user:
        replace_file(host, "etc/passwd", passwd[0] + f"{entry}\n".encode(), passwd[1].st_mode)
    walker = Walker(host)
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
        replace_file(host, "root/.gitconfig", GITCONFIG, 0o644)
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
        walker = Walker(host)
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


def rekeyed(sandbox: Sandbox) -> tuple[dict[str, tuple[Stat, Stat]], int]:
    """The hand-over's stats of `sandbox`'s files (once: a later tree no longer needs them)."""
    with _LOCK:
        return _REKEYED.pop(sandbox, ({}, 0))
