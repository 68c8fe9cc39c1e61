"""One trial's sandbox: a container with no network, commands run in it with a
bound inside the container, files in and out as tar streams.
"""

from __future__ import annotations

import io
import tarfile
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Callable

import docker
from docker.errors import DockerException, NotFound

from .output import OutputCollector

WORKSPACE = "/workspace"
# Outside the workspace, so nothing the engine places here shows in a diff.
ENGINE_DIR = "/tmp/.proctor"
KILL_GRACE_S = 3
STOP_GRACE_S = 2
TREE_FILE_MAX = 5_000_000


class SandboxGone(Exception):
    """The container disappeared under a running command (destroyed, or Docker went away)."""


@dataclass
class ExecOutput:
    exit_code: int | None
    stdout: str
    stderr: str
    ms: int
    timed_out: bool = False

    @property
    def output(self) -> str:
        return self.stdout + (("\n" if self.stdout and self.stderr else "") + self.stderr)


class Sandbox:
    def __init__(self, client: docker.DockerClient, container_id: str, env: dict[str, str] | None = None):
        self.client = client
        self.api = client.api
        self.id = container_id
        self.env: dict[str, str] = dict(env or {})
        self.destroyed = False

    @classmethod
    def create(cls, client: docker.DockerClient, image: str, labels: dict[str, str],
               binds: dict[str, str] | None = None) -> "Sandbox":
        """`binds`: host folder -> container folder (the gateway's socket folder)."""
        api = client.api
        # The low-level API: no inspect round trip, and a short stop grace.
        container_id = api.create_container(
            image, command=["sleep", "infinity"], labels=labels, working_dir="/", hostname="sandbox",
            stop_timeout=STOP_GRACE_S,
            host_config=api.create_host_config(
                init=True, network_mode="none",
                binds={host: {"bind": inside, "mode": "rw"} for host, inside in (binds or {}).items()}),
        )["Id"]
        try:
            api.start(container_id)
        except DockerException:
            api.remove_container(container_id, force=True)
            raise
        return cls(client, container_id)

    @property
    def short_id(self) -> str:
        return self.id[:12]

    def exec(
        self,
        command: str,
        *,
        timeout: float | None,
        workdir: str = WORKSPACE,
        env: dict[str, str] | None = None,
        stdin_path: str | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
    ) -> ExecOutput:
        """Run `sh -c command`. The bound is applied inside the container (`timeout -k`),
        because killing a `docker exec` client does not kill what it started."""
        script = 'exec sh -c "$1" < "$2"' if stdin_path else 'exec sh -c "$1" < /dev/null'
        argv = ["sh", "-c", script, "sh", command, stdin_path or ""]
        if timeout is not None:
            argv = ["timeout", "-k", str(KILL_GRACE_S), f"{max(timeout, 0.1):.1f}", *argv]
        started = time.monotonic()
        api = self.api
        try:
            exec_id = api.exec_create(
                self.id, argv, stdout=True, stderr=True, workdir=workdir,
                environment={**self.env, **(env or {})},
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
            stdout, stderr = OutputCollector(on_stdout_line), OutputCollector(None)
            for out, err in stream:
                if out:
                    stdout.feed(out)
                if err:
                    stderr.feed(err)
            stdout.close()
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        except (NotFound, DockerException, OSError) as e:
            if self.destroyed:
                raise SandboxGone("the sandbox was destroyed while the command ran") from None
            raise SandboxGone(f"Docker failed while running a command: {str(e)[:200]}") from None
        if self.destroyed:
            raise SandboxGone("the sandbox was destroyed while the command ran")
        ms = int((time.monotonic() - started) * 1000)
        # 124: `timeout` fired; 137: it had to SIGKILL after the grace.
        timed_out = timeout is not None and exit_code in (124, 137) and ms >= timeout * 1000 - 200
        return ExecOutput(exit_code, stdout.text(), stderr.text(), ms, timed_out)

    def put_files(self, files: dict[str, bytes], base: str = WORKSPACE, mode: int = 0o644) -> None:
        """Write files byte for byte, paths relative to `base`, creating folders."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            dirs: set[str] = set()
            for rel, data in files.items():
                path = PurePosixPath(base.lstrip("/")) / rel
                for parent in reversed(path.parents[:-1]):
                    if str(parent) not in dirs:
                        dirs.add(str(parent))
                        info = tarfile.TarInfo(str(parent))
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                        tar.addfile(info)
                info = tarfile.TarInfo(str(path))
                info.size, info.mode, info.mtime = len(data), mode, int(time.time())
                tar.addfile(info, io.BytesIO(data))
        self.put_archive("/", buffer.getvalue())

    def put_archive(self, path: str, data: bytes) -> None:
        try:
            self.api.put_archive(self.id, path, data)
        except DockerException as e:
            raise SandboxGone(f"could not copy files into the sandbox: {str(e)[:200]}") from None

    def read_tree(self, path: str = WORKSPACE, skip_git: bool = True) -> dict[str, bytes]:
        """Every regular file under `path` (symlinks as `-> target`), from outside the
        sandbox's processes, so the agent can neither see nor disturb it."""
        try:
            chunks, _ = self.api.get_archive(self.id, path)
            data = b"".join(chunks)
        except DockerException as e:
            raise SandboxGone(f"could not read {path} from the sandbox: {str(e)[:200]}") from None
        tree: dict[str, bytes] = {}
        root = PurePosixPath(path).name
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                rel = str(PurePosixPath(member.name).relative_to(root)) if member.name != root else ""
                if not rel or (skip_git and _skipped(rel)):
                    continue
                if member.issym():
                    tree[rel] = f"-> {member.linkname}".encode()
                elif member.isfile():
                    if member.size > TREE_FILE_MAX:
                        tree[rel] = f"<large file: {member.size} bytes>".encode()
                    else:
                        tree[rel] = tar.extractfile(member).read()  # type: ignore[union-attr]
        return tree

    def read_file(self, path: str) -> bytes:
        full = path if path.startswith("/") else f"{WORKSPACE}/{path}"
        try:
            chunks, _ = self.api.get_archive(self.id, full)
        except NotFound:
            raise FileNotFoundError(path) from None
        except DockerException as e:
            raise SandboxGone(f"could not read {path}: {str(e)[:200]}") from None
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(path)
            return tar.extractfile(member).read()  # type: ignore[union-attr]

    def destroy(self) -> None:
        """Kill and remove at once; safe to call twice and from another thread."""
        self.destroyed = True
        try:
            self.api.remove_container(self.id, force=True)
        except NotFound:
            pass


def _skipped(rel: str) -> bool:
    """Left out of snapshots and diffs: git's own files, and Python's bytecode caches,
    which are noise the agent did not write."""
    parts = rel.split("/")
    return parts[0] == ".git" or "__pycache__" in parts
