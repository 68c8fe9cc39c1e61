"""The workspace phase: an empty folder, a local folder, a git repository's tree at a
ref (fetched on the host, see git_source), or a git repository, placed at /workspace.

What a git workspace holds:
- `git(src, ref=…)`: the ref's tree, and no `.git` at all;
- `git(src, ref=…, init=True)`: that tree and a fresh `.git` whose one commit holds it;
- `git(init=True)`: an empty tree and a `.git` with one empty commit, so `HEAD` exists
  (`git diff HEAD`, `git stash`, `git reset` work) as in every other init workspace.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from ..errors import Void
from ..sandbox import hostfs, placement
from ..sandbox.container import WORKSPACE, Sandbox
from ..spec import Git, WorkspaceSpec
from .git_source import AGENT_CONFIG, BRANCH, IDENTITY, MESSAGE, GitSources


def place(sandbox: Sandbox, spec: WorkspaceSpec, sources: GitSources | None = None) -> str:
    """Put the workspace in place; returns the phase's one-line description.

    `sources`: the batch's git sources, fetched once for all its trials (a trial alone
    gets its own)."""
    if isinstance(spec, str):
        if not _from_host(sandbox, lambda: placement.folder_members(Path(spec), WORKSPACE)):
            sandbox.put_archive("/", _tar_folder(Path(spec)))
        return f"folder {spec}"
    if isinstance(spec, Git) and spec.source:
        own = sources is None
        sources = sources or GitSources()
        try:
            return _place_git(sandbox, spec, sources)
        finally:
            if own:
                sources.close()
    # The empty tar's one entry: root's 0755 folder with mtime 0.
    empty = placement.Member(WORKSPACE.lstrip("/"), "dir", 0o755, (0, 0), 0)
    if not _from_host(sandbox, lambda: [empty]):
        sandbox.put_archive("/", _tar_folder(None))
    if isinstance(spec, Git):
        out = sandbox.exec(_EMPTY_REPOSITORY, timeout=60)
        if out.exit_code != 0:
            raise Void(f"git init failed in the sandbox (exit {out.exit_code}): the image needs "
                       f"git for git(init=True) · {out.output.strip()[:200]}", "workspace")
        return "git init · one empty commit"
    return "empty folder"


def _place_git(sandbox: Sandbox, spec: Git, sources: GitSources) -> str:
    assert spec.source is not None
    fetched, cached = sources.get(spec.source, spec.ref, spec.init)
    # Copied from the host copy where the daemon is local, else streamed: never in memory.
    if not _from_host(sandbox, lambda: placement.tar_manifest(fetched.tree_tar), fetched.tree_tar):
        with fetched.tree_tar.open("rb") as tree:
            sandbox.put_archive("/", tree)
    if spec.init:
        assert fetched.repo_tar is not None
        repo_tar = fetched.repo_tar
        if not _from_host(sandbox, lambda: placement.tar_manifest(repo_tar), repo_tar, trusted=False):
            with repo_tar.open("rb") as repo:
                sandbox.put_archive("/", repo)
        # The index was written on the host: give it this sandbox's file stats (if it has git).
        sandbox.exec("git update-index -q --refresh >/dev/null 2>&1; true", timeout=60)
    at = f" at {spec.ref}" if spec.ref else ""
    if not (spec.ref and fetched.commit.startswith(spec.ref)):
        at += f" ({fetched.commit[:12]})"
    what = "tree and a one-commit .git" if spec.init else "tree only, no .git"
    return f"git {spec.source}{at} · {what}" + (" · cached" if cached else "")


def _from_host(sandbox: Sandbox, members: Callable[[], list[placement.Member]],
               tar: Path | None = None, trusted: bool = True) -> bool:
    """Place `members` (from `tar`, else their own files) from the host into the sandbox's
    file system (a local daemon); False: the archive must. `trusted`: the snapshot may
    take the placed files' hashes for those whose stat did not change since."""
    host = hostfs.root(sandbox)
    if host is None:
        return False
    try:
        with hostfs.fallback_on_error():
            placed = placement.place(host, members(), WORKSPACE, tar)
    except hostfs.Unsafe:
        return False  # half placed is fine: the archive overwrites the same entries
    if trusted and placed.files:
        placement.remember(sandbox, placed)
    return True


_EMPTY_REPOSITORY = " && ".join([
    "git init -q .",
    f"git symbolic-ref HEAD refs/heads/{BRANCH}",
    *(f"git config {key} {value}" for key, value in AGENT_CONFIG.items()),
    " ".join(f"{k}='{v}'" for k, v in IDENTITY.items())
    + f" git commit -q --allow-empty --no-verify --no-gpg-sign -m {MESSAGE}",
])


def _tar_folder(folder: Path | None) -> bytes:
    """A tar whose root is `workspace/`, holding `folder`'s tree (or nothing)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if folder is None:
            info = tarfile.TarInfo(WORKSPACE.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        else:
            tar.add(str(folder), arcname=WORKSPACE.lstrip("/"))
    return buffer.getvalue()
