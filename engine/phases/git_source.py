"""Git workspaces, fetched on the host once per batch.

A source at a ref becomes two tars: the ref's tree (no `.git`), and, for
`init=True`, a fresh `.git` whose one commit holds that tree. Nothing else of
the source reaches the sandbox: no other commit, ref, tag, stash, reflog,
remote, hook, config or object, so the answer in a later commit stays on the
host. Every trial of the batch that uses the same source and ref reuses them.
The host copies live in a folder named after the engine's process, so the
sweep removes them when a killed engine leaves them behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Void
from ..sandbox.cleanup import GIT_PREFIX, owner_folder, owner_id
from ..sandbox.container import WORKSPACE

GIT_TIMEOUT_S = 600
BRANCH = "main"
# The one commit's author, committer and date are fixed, so one tree gives one commit id.
IDENTITY = {"GIT_AUTHOR_NAME": "proctor", "GIT_AUTHOR_EMAIL": "proctor@localhost",
            "GIT_AUTHOR_DATE": "946684800 +0000", "GIT_COMMITTER_NAME": "proctor",
            "GIT_COMMITTER_EMAIL": "proctor@localhost", "GIT_COMMITTER_DATE": "946684800 +0000"}
MESSAGE = "workspace"
ROOT = WORKSPACE.lstrip("/")  # tar members are relative to the sandbox's /
FIXED_MTIME = 946684800
# Who commits when the agent does; the same as in an empty git(init=True).
AGENT_CONFIG = {"user.name": "agent", "user.email": "agent@proctor.local"}


class GitFailed(Exception):
    """A host git command exited non-zero; the message is its last line of stderr."""


@dataclass
class Fetched:
    """One source at one ref, on the host."""

    commit: str  # the source's commit; stays on the host
    tree_tar: Path  # `workspace/…`: the commit's tree
    repo_tar: Path | None = None  # `workspace/.git`: one commit of that tree, made on first use


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    fetched: Fetched | None = None
    error: Void | None = None


class GitSources:
    """The git sources of one batch, each fetched once however many trials use it.

    Thread-safe: concurrent trials asking for one source wait for a single fetch.
    `close()` removes the host copies when the batch ends.
    """

    def __init__(self, owner: str | None = None) -> None:
        self.owner = owner or owner_id()
        self.root: Path | None = None  # made on the first fetch: most batches have no git source
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str | None], _Entry] = {}
        self.fetches = 0  # real fetches from sources (the tests and the figures count them)

    def get(self, source: str, ref: str | None, init: bool) -> tuple[Fetched, bool]:
        """The fetched source, with its one-commit `.git` when `init`; and whether it was cached."""
        with self._lock:
            entry = self._entries.setdefault((source, ref), _Entry())
        with entry.lock:
            cached = entry.fetched is not None or entry.error is not None
            if not cached:
                try:
                    entry.fetched = self._fetch(source, ref)
                except Void as e:
                    entry.error = e  # a bad source fails every trial the same way, fetched once
            if entry.error is not None:
                raise Void(entry.error.reason, "workspace")
            assert entry.fetched is not None
            if init and entry.fetched.repo_tar is None:
                entry.fetched.repo_tar = _one_commit_repository(entry.fetched)
            return entry.fetched, cached

    def close(self) -> None:
        with self._lock:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)

    def _fetch(self, source: str, ref: str | None) -> Fetched:
        with self._lock:
            self.fetches += 1
            if self.root is None:
                self.root = owner_folder(GIT_PREFIX, self.owner)
            folder = Path(tempfile.mkdtemp(dir=self.root))
        bare = folder / "source.git"
        at = f" at {ref}" if ref else ""
        try:
            _git(None, "init", "-q", "--bare", "--template=", str(bare))
            try:
                # Only the one commit's objects: a shallow fetch of the ref by name or full id.
                _git(bare, "fetch", "-q", "--no-tags", "--depth=1", source, ref or "HEAD",
                     user=True)
                commit = _git(bare, "rev-parse", "--verify", "-q", "FETCH_HEAD^{commit}")
            except GitFailed:
                if ref is None:
                    raise
                # An abbreviated id, `HEAD~1`, or a ref the server will not send by name:
                # every ref and the source's HEAD, then resolve it here.
                _git(bare, "fetch", "-q", "--no-tags", source, "+refs/*:refs/*",
                     "+HEAD:refs/proctor/source-head", user=True)
                _git(bare, "update-ref", "--no-deref", "HEAD", "refs/proctor/source-head")
                try:
                    commit = _git(bare, "rev-parse", "--verify", "-q", "--end-of-options",
                                  f"{ref}^{{commit}}")
                except GitFailed:
                    raise GitFailed(f"no branch, tag or commit {ref!r} in it") from None
            # The tree as it is, not as a release tarball: ignore export-ignore and export-subst.
            (bare / "info").mkdir(exist_ok=True)
            (bare / "info" / "attributes").write_text("* -export-ignore -export-subst\n")
            tree_tar = folder / "tree.tar"
            _git(bare, "-c", "tar.umask=022", "archive", "--format=tar", f"--prefix={ROOT}/",
                 "-o", str(tree_tar), commit)
        except (GitFailed, OSError, subprocess.TimeoutExpired) as e:
            raise Void(f"could not fetch {source}{at} on the host: {e}", "workspace") from None
        return Fetched(commit=commit, tree_tar=tree_tar)


def _one_commit_repository(fetched: Fetched) -> Path:
    """`workspace/.git` as a tar: a fresh repository whose one commit holds the fetched tree,
    with no remote, no tag, no reflog, no hook and no object of any other commit."""
    folder = fetched.tree_tar.parent
    bare, repo = folder / "source.git", folder / "repo"
    dot_git = repo / ".git"
    try:
        commit = _git(bare, "commit-tree", "--no-gpg-sign", "-m", MESSAGE,
                      f"{fetched.commit}^{{tree}}", env=IDENTITY)
        _git(None, "init", "-q", "--template=", str(repo))
        (dot_git / "objects" / "pack").mkdir(parents=True, exist_ok=True)
        (dot_git / "info").mkdir(exist_ok=True)
        (dot_git / "info" / "exclude").write_text("")  # agents append to it
        # One pack of exactly the new commit's objects: its tree and blobs, nothing else.
        _git(bare, "pack-objects", "--revs", "-q", str(dot_git / "objects" / "pack" / "pack"),
             stdin=commit + "\n")
        _git(repo, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
        _git(repo, "-c", "core.logAllRefUpdates=false", "update-ref", f"refs/heads/{BRANCH}",
             commit)
        _git(repo, "read-tree", BRANCH)  # the index; its file stats are refreshed in the sandbox
        for key, value in AGENT_CONFIG.items():
            _git(repo, "config", key, value)
    except (GitFailed, OSError, subprocess.TimeoutExpired) as e:
        raise Void(f"could not make the workspace's git repository on the host: {e}",
                   "workspace") from None
    out = folder / "repo.tar"

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = FIXED_MTIME
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(dot_git), arcname=f"{ROOT}/.git", filter=owned_by_root)
    return out


def _git(repo: Path | None, *args: str, user: bool = False, env: dict[str, str] | None = None,
         stdin: str | None = None) -> str:
    """Run host git in `repo`. Without `user` it ignores the user's and the system's git config,
    so what the sandbox gets does not depend on who runs the batch; fetches keep it
    (credentials, proxies, url rewrites)."""
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    if not user:
        full_env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull})
    where = ["-C", str(repo)] if repo is not None else []
    result = subprocess.run(["git", *where, *args], capture_output=True, text=True, env=full_env,
                            timeout=GIT_TIMEOUT_S, input=stdin,
                            stdin=None if stdin is not None else subprocess.DEVNULL)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"git exited {result.returncode}"]
        raise GitFailed(lines[-1][:200])
    return result.stdout.strip()
