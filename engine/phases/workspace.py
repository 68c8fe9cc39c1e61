"""The workspace phase: an empty folder, an empty git repository, a local folder,
or a git repository at a ref, placed at /workspace."""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..errors import Void
from ..sandbox.container import WORKSPACE, Sandbox
from ..spec import Git, WorkspaceSpec


def place(sandbox: Sandbox, spec: WorkspaceSpec) -> str:
    """Put the workspace in place; returns the phase's one-line description."""
    if isinstance(spec, str):
        sandbox.put_archive("/", _tar_folder(Path(spec)))
        return f"folder {spec}"
    if isinstance(spec, Git) and not spec.init:
        with tempfile.TemporaryDirectory(prefix="proctor-ws-") as tmp:
            _clone(spec, Path(tmp) / "repo")
            sandbox.put_archive("/", _tar_folder(Path(tmp) / "repo"))
        return f"git {spec.source}" + (f" at {spec.ref}" if spec.ref else "")
    sandbox.put_archive("/", _tar_folder(None))
    if isinstance(spec, Git):
        out = sandbox.exec("git init -q . && git config user.email agent@proctor.local "
                           "&& git config user.name agent", timeout=30)
        if out.exit_code != 0:
            raise Void(f"git init failed in the sandbox (exit {out.exit_code}): the image needs git "
                       f"for git(init=True) · {out.output.strip()[:200]}", "workspace")
        return "git init"
    return "empty folder"


def _clone(spec: Git, target: Path) -> None:
    def git(*args: str) -> None:
        result = subprocess.run(["git", *args], capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise Void(f"could not check out {spec.source}"
                       f"{' at ' + spec.ref if spec.ref else ''}: {result.stderr.strip()[:200]}",
                       "workspace")

    git("clone", "-q", "--no-hardlinks", str(spec.source), str(target))
    if spec.ref:
        git("-C", str(target), "checkout", "-q", spec.ref)


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
