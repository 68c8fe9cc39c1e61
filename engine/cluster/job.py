"""What travels with a cluster batch: the eval files, what they reference, and proctor.toml,
as bytes in each task's arguments, written out on the node into a folder keyed by their hash.

The eval module's functions are never pickled: the node loads the eval file again
(`engine.spec.load_cases`, `engine.config.load_config`), as a local run does. The job is the
folder that holds proctor.toml and the eval files, so `files={…: Path(…)}`, a Dockerfile's
context and a workspace folder resolve on the node as they do here.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..spec import Case, EvalFileError

MAX_JOB_FILES = 2000
MAX_JOB_BYTES = 64 << 20
# Caches and environments a job never needs; `.git` only at the job's root (a workspace
# repository below it keeps its own).
SKIPPED = {"__pycache__", ".venv", "venv", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
JOB_PREFIX = "proctor-job-"
JOB_KEPT_S = 7 * 24 * 3600  # a job folder no task used for a week is removed by the node's sweep


@dataclass(frozen=True)
class Job:
    """The job's files by path relative to its root, each with its bytes and executable bit."""

    root: str  # the driver's folder, to name the driver's paths again in the records that come home
    files: dict[str, tuple[bytes, bool]]
    config: str | None  # proctor.toml, relative to root
    digest: str

    def place(self, tmp: Path | None = None) -> Path:
        """The job's folder on this machine, written once per content (a second task reuses it)."""
        folder = Path(tmp or tempfile.gettempdir()) / f"{JOB_PREFIX}{self.digest[:24]}"
        if folder.is_dir():
            os.utime(folder)  # in use: the node's sweep of old jobs leaves it
            return folder
        part = folder.with_name(f"{folder.name}.part-{secrets.token_hex(4)}")
        for rel, (data, executable) in self.files.items():
            path = part / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if executable:
                path.chmod(0o755)
        try:
            part.rename(folder)  # atomic: another task of this job may have written it meanwhile
        except OSError:
            shutil.rmtree(part, ignore_errors=True)
        return folder


def sweep_jobs(tmp: Path | None = None, older_than_s: float = JOB_KEPT_S) -> int:
    """Remove the job folders of this node no task has used for `older_than_s`; how many."""
    gone = 0
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{JOB_PREFIX}*"):
        try:
            if time.time() - folder.stat().st_mtime > older_than_s:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        except OSError:  # another node's worker removed it first
            pass
    return gone


def pack(cases: list[Case], config: Config) -> Job:
    """The job for these cases under this config: every file below their common folder."""
    folders = {c.file.resolve().parent for c in cases}
    if config.path is not None:
        folders.add(config.path.resolve().parent)
    root = Path(os.path.commonpath([str(f) for f in folders]))
    files: dict[str, tuple[bytes, bool]] = {}
    total = 0
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not (here == root and d == ".git"))
        for name in sorted(names):
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue  # a link could name anything on this machine; the node gets regular files only
            data = path.read_bytes()
            total += len(data)
            files[path.relative_to(root).as_posix()] = (data, os.access(path, os.X_OK))
            if len(files) > MAX_JOB_FILES or total > MAX_JOB_BYTES:
                raise EvalFileError(f"holds more than {MAX_JOB_FILES} files or {MAX_JOB_BYTES >> 20} MiB, "
                                    "too much to send to a cluster: keep the eval files and proctor.toml "
                                    "in a folder of their own", root)
    digest = hashlib.sha256()
    for rel in sorted(files):
        data, executable = files[rel]
        digest.update(f"{rel}\0{int(executable)}\0{len(data)}\0".encode())
        digest.update(data)
    config_rel = config.path.resolve().relative_to(root).as_posix() if config.path else None
    return Job(root=str(root), files=files, config=config_rel, digest=digest.hexdigest())
