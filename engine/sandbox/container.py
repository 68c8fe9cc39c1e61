"""One trial's sandbox: a container with no network and bounded resources, commands
run in it (as root, or as the agent's unprivileged user) with a bound inside the
container, files in and out as tar streams read at a bounded cost.
"""

from __future__ import annotations

import hashlib
import io
import sqlite3
import tarfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Callable, Iterable, Iterator, Literal

import docker
from docker.errors import APIError, DockerException, NotFound
from docker.types import Mount, Ulimit

from .. import limits
from ..spec import format_size
from . import host_user, hostfs
from .cleanup import TREE_PREFIX, owner_folder, owner_id
from .output import OutputCollector
from .tree import Blobs, Tree

if TYPE_CHECKING:
    from ..config import Resources

WORKSPACE = "/workspace"
# Outside the workspace, so nothing the engine places here shows in a diff.
ENGINE_DIR = "/tmp/.proctor"
KILL_GRACE_S = 3
STOP_GRACE_S = 2
# What reading the sandbox may cost, whatever the agent leaves in it. A tree holds only names
# and hashes in memory; the contents of files a diff can show (at most limits.DIFF_SOURCE)
# go to the sandbox's tree folder on the host's disk. A larger file is named too large in a
# diff up to TREE_FILE_MAX, and past it shows as `<large file: N bytes>`. Then: the new
# content one tree writes to disk (later files are hashed, not kept); the entries of one
# tree, and the bytes of their names; the tar stream read for one tree (a sparse file costs
# no disk but streams every byte); one file read whole (c.read_file).
TREE_FILE_MAX = 5_000_000
TREE_TOTAL_MAX = 256 << 20
TREE_FILES_MAX = 50_000
TREE_NAMES_MAX = 8 << 20
TREE_STREAM_MAX = 2 << 30
READ_FILE_MAX = 16 << 20
# The tree's entry that says it was cut; a name no relative path of a real file takes.
TREE_NOTE = "[tree cut]"
_CHUNK = 1 << 20

# What root keeps in the sandbox: Docker's default set without MKNOD, NET_RAW, SETFCAP,
# SETPCAP, NET_BIND_SERVICE, SYS_CHROOT and AUDIT_WRITE. Setup steps install packages:
# dpkg chowns and chmods files it does not own and keeps setgid bits (CHOWN, FOWNER,
# FSETID), writes where others own (DAC_OVERRIDE), apt drops to its `_apt` user
# (SETUID, SETGID); the engine hands /workspace to the agent (CHOWN); checks may stop
# what the agent started (KILL). The agent's own user has none of them.
ROOT_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]
AGENT_UID = 1000

# The agent's user: the image's `agent` (or its uid 1000 user), else one added, with a
# HOME it can write and /workspace its own; git (run as root by checks) trusts it.
_HAND_OVER = f"""set -e
entry=$(grep -E '^agent:[^:]*:[1-9]' /etc/passwd || grep -E '^[^:]*:[^:]*:{AGENT_UID}:' /etc/passwd || true)
entry=$(echo "$entry" | head -n 1)
if [ -z "$entry" ]; then
  grep -qE '^[^:]*:[^:]*:{AGENT_UID}:' /etc/group || echo 'agent:x:{AGENT_UID}:' >> /etc/group
  entry='agent:x:{AGENT_UID}:{AGENT_UID}:Proctor agent:/home/agent:/bin/sh'
  echo "$entry" >> /etc/passwd
fi
name=$(echo "$entry" | cut -d: -f1); uid=$(echo "$entry" | cut -d: -f3)
gid=$(echo "$entry" | cut -d: -f4); home=$(echo "$entry" | cut -d: -f6)
case "$home" in /|""|/nonexistent*) home=/home/$name ;; esac
mkdir -p "$home" && chown "$uid:$gid" "$home"
chown -hR "$uid:$gid" {WORKSPACE}
if command -v git >/dev/null 2>&1; then HOME=/root git config --global --add safe.directory '*' || true; fi
echo "$name:$uid:$gid:$home"
"""
_GIVE_BACK = f'chown -hR "$1" {WORKSPACE}'
HAND_OVER_TRIES = 3


class SandboxGone(Exception):
    """The sandbox cannot go on: it disappeared under a running command (destroyed, or
    Docker went away), or could not be made ready for the agent."""


class FileTooLarge(Exception):
    """A file is bigger than what is read of it whole (READ_FILE_MAX)."""


@dataclass(frozen=True)
class AgentUser:
    name: str
    uid: int
    gid: int
    home: str

    @property
    def spec(self) -> str:
        return f"{self.uid}:{self.gid}"


@dataclass
class _DaemonFacts:
    cpus: int
    storage_opt: bool | None = None  # None: not tried yet


# Learned once per daemon (per client: every unix socket has the same base_url): how many
# CPUs it has, whether its storage driver bounds disk.
_DAEMONS: "weakref.WeakKeyDictionary[object, _DaemonFacts]" = weakref.WeakKeyDictionary()
_DAEMONS_LOCK = threading.Lock()


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
    def __init__(self, client: docker.DockerClient, container_id: str, env: dict[str, str] | None = None,
                 disk_bounded: bool = False):
        """`disk_bounded`: the storage driver itself holds the writable layer to the disk limit."""
        self.client = client
        self.api = client.api
        self.id = container_id
        self.env: dict[str, str] = dict(env or {})
        self.destroyed = False
        self.disk_bounded = disk_bounded
        # None: the agent runs as root (user="root", or before `hand_over`).
        self.agent: AgentUser | None = None
        # Root ran a command since /workspace was last handed over: it may have left files
        # the agent cannot edit.
        self.workspace_dirty = False
        # The contents of the trees read (read_tree), on the host; removed with the sandbox.
        self._blobs: Blobs | None = None
        self._blobs_lock = threading.Lock()

    @classmethod
    def create(cls, client: docker.DockerClient, image: str, labels: dict[str, str],
               resources: "Resources | None" = None, mounts: list[Mount] | None = None) -> "Sandbox":
        """A started container: no network, root with ROOT_CAPABILITIES only, no new privileges,
        and `resources`' memory (no swap), processes, CPUs and disk. `mounts`: the gateway's."""
        api = client.api
        facts = _daemon_facts(api)
        options: dict = {"init": True, "network_mode": "none", "mounts": mounts or None,
                         "cap_drop": ["ALL"], "cap_add": ROOT_CAPABILITIES,
                         "security_opt": ["no-new-privileges"]}
        if resources is not None:
            options.update(
                mem_limit=resources.memory, memswap_limit=resources.memory, pids_limit=resources.pids,
                nano_cpus=int(min(resources.cpus, facts.cpus) * 1e9),
                # No one file past the disk limit; the watchdog or the storage driver bounds the sum.
                ulimits=[Ulimit(name="fsize", soft=resources.disk, hard=resources.disk)])
        bounded = resources is not None and facts.storage_opt is not False
        try:
            container_id = _create(api, image, labels, options,
                                   {"size": str(resources.disk)} if bounded and resources else None)
        except APIError as e:
            if not bounded or not _storage_opt_refused(e):
                raise
            facts.storage_opt = bounded = False  # overlay2 on ext4, for one: the watchdog measures instead
            container_id = _create(api, image, labels, options, None)
        if bounded:
            facts.storage_opt = True
        try:
            api.start(container_id)
        except DockerException:
            api.remove_container(container_id, force=True)
            raise
        return cls(client, container_id, disk_bounded=bounded)

    def hand_over(self) -> str:
        """Make the agent's unprivileged user (after setup, which runs as root) and give it
        /workspace and a HOME; returns who the agent runs as, to show."""
        if (host := hostfs.root(self)) is not None:
            try:
                with hostfs.fallback_on_error():
                    name, uid, gid, home = host_user.hand_over(
                        self, host, self.env.get("PATH"), WORKSPACE, AGENT_UID)
                self.agent, self.workspace_dirty = AgentUser(name, uid, gid, home), False
                return f"agent runs as {name} (uid {uid})"
            except hostfs.Unsafe:
                pass  # the script decides, inside the container
        for _ in range(HAND_OVER_TRIES):
            out = self.exec(_HAND_OVER, timeout=120, workdir="/")
            fields = out.stdout.strip().splitlines()[-1:]
            parts = fields[0].split(":") if fields else []
            # Docker under load may end an exec's stream before its output (moby#27289): exit 0
            # and nothing said. The script is idempotent, so it is asked again.
            if out.exit_code != 0 or out.output.strip():
                break
        if out.exit_code != 0 or len(parts) != 4 or not (parts[1].isdigit() and parts[2].isdigit()):
            raise SandboxGone(f"could not make the agent's user in the sandbox (exit {out.exit_code}): "
                              f"{out.output.strip()[-200:]}")
        self.agent = AgentUser(parts[0], int(parts[1]), int(parts[2]), parts[3])
        self.workspace_dirty = False
        return f"agent runs as {self.agent.name} (uid {self.agent.uid})"

    def give_back_workspace(self) -> None:
        """What root made in /workspace since the hand-over (checks) becomes the agent's again."""
        if self.agent is not None and self.workspace_dirty:
            host = hostfs.root(self)
            try:
                if host is None:
                    raise hostfs.Unsafe("no host route")
                with hostfs.fallback_on_error():
                    hostfs.chown_tree(host, WORKSPACE, (self.agent.uid, self.agent.gid))
            except hostfs.Unsafe:
                self.exec(_GIVE_BACK, timeout=120, workdir="/", args=[self.agent.spec])
            self.workspace_dirty = False

    def limits_text(self, resources: "Resources") -> str:
        disk = "bounded by the storage driver" if self.disk_bounded else "watched"
        return (f"limits: {format_size(resources.memory)} memory, {resources.pids} processes, "
                f"{resources.cpus:g} CPUs, {format_size(resources.disk)} disk ({disk})")

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
        user: Literal["root", "agent"] = "root",
        args: list[str] | None = None,
    ) -> ExecOutput:
        """Run `sh -c command` (with `args` as $1…). The bound is applied inside the container
        (`timeout -k`), because killing a `docker exec` client does not kill what it started.
        `user="agent"`: as the agent's user once handed over (root before, or with user="root")."""
        argv = ["sh", "-c", 'c=$1 i=$2; shift 2; exec sh -c "$c" sh "$@" < "$i"', "sh", command,
                stdin_path or "/dev/null", *(args or [])]
        if timeout is not None:
            argv = ["timeout", "-k", str(KILL_GRACE_S), f"{max(timeout, 0.1):.1f}", *argv]
        agent = self.agent if user == "agent" else None
        environment = {**self.env, **(env or {})}
        if agent is not None and environment.get("HOME", "/root") == "/root":
            environment["HOME"] = agent.home
        elif agent is None and self.agent is not None:
            self.workspace_dirty = True
        started = time.monotonic()
        api = self.api
        try:
            exec_id = api.exec_create(
                self.id, argv, stdout=True, stderr=True, workdir=workdir, environment=environment,
                user=agent.spec if agent is not None else "0:0",
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
        """Write files byte for byte, paths relative to `base`, creating folders. In /workspace
        they belong to the agent's user once it has one. Only folders inside /workspace are
        written as entries: one for /tmp would reset its mode (Docker makes other missing
        folders itself, as root, 0755). On a local daemon they are written from the host."""
        if (host := hostfs.root(self)) is not None:
            try:
                with hostfs.fallback_on_error():
                    owner = (self.agent.uid, self.agent.gid) if self.agent is not None else None
                    return hostfs.write_files(host, files, base, mode, owner, WORKSPACE)
            except hostfs.Unsafe:
                pass  # a link or a mount on the way: the daemon resolves it inside the container
        workspace = PurePosixPath(WORKSPACE.lstrip("/"))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            dirs: set[str] = set()
            for rel, data in files.items():
                path = PurePosixPath(base.lstrip("/")) / rel
                owned = self.agent is not None and workspace in path.parents
                for parent in reversed(path.parents[:-1]):
                    if workspace in parent.parents and str(parent) not in dirs:
                        dirs.add(str(parent))
                        info = tarfile.TarInfo(str(parent))
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                        self._own(info, owned)
                        tar.addfile(info)
                info = tarfile.TarInfo(str(path))
                info.size, info.mode, info.mtime = len(data), mode, int(time.time())
                self._own(info, owned)
                tar.addfile(info, io.BytesIO(data))
        self.put_archive("/", buffer.getvalue())

    def _own(self, info: tarfile.TarInfo, owned: bool) -> None:
        if owned and self.agent is not None:
            info.uid, info.gid = self.agent.uid, self.agent.gid

    def put_archive(self, path: str, data: bytes | IO[bytes]) -> None:
        try:
            self.api.put_archive(self.id, path, data)
        except DockerException as e:
            raise SandboxGone(f"could not copy files into the sandbox: {str(e)[:200]}") from None

    def read_tree(self, path: str = WORKSPACE, skip_git: bool = True, base: Tree | None = None) -> Tree:
        """Every regular file under `path` (symlinks as `-> target`), from outside the
        sandbox's processes, so the agent can neither see nor disturb it. The tar is read
        as it streams; the tree holds each path's size and sha256, and the content of a file
        a diff can show goes to the tree folder on disk (`Tree`): a larger file is `<large
        file: N bytes>`, past TREE_TOTAL_MAX of new content a file is `<not kept: …>` with
        its hash, and past TREE_FILES_MAX entries, TREE_NAMES_MAX bytes of names or
        TREE_STREAM_MAX bytes of stream the rest is not read (TREE_NOTE says so). `base`:
        the tree read before, whose unchanged entries this one shares."""
        blobs = self._tree_blobs()
        tree = Tree(blobs, base)
        written = names = 0
        root = PurePosixPath(path).name
        reader: _ChunkReader | None = None
        unread = ""
        try:
            reader = self._archive(path, f"could not read {path} from the sandbox")
            with tarfile.open(fileobj=reader, mode="r|", bufsize=_CHUNK) as tar, blobs.batch():
                for member in _members(tar):
                    rel = str(PurePosixPath(member.name).relative_to(root)) if member.name != root else ""
                    if not rel or (skip_git and _skipped(rel)):
                        continue
                    if len(tree) >= TREE_FILES_MAX:
                        unread = f"a tree keeps at most {TREE_FILES_MAX} files"
                        break
                    names += len(rel) + len(member.linkname)
                    if names > TREE_NAMES_MAX:
                        unread = f"a tree keeps at most {format_size(TREE_NAMES_MAX)} of file names"
                        break
                    if member.issym():
                        tree.add_text(rel, f"-> {member.linkname}".encode())
                    elif member.isfile():
                        source = tar.extractfile(member)
                        assert source is not None
                        size = member.size
                        if size > limits.DIFF_SOURCE:  # never diffed: hashed as it streams, not kept
                            tree.add(rel, size, _sha256(source), f"<large file: {size} bytes>".encode(),
                                     sized=size <= TREE_FILE_MAX)
                            continue
                        data = source.read()
                        digest = hashlib.sha256(data).digest()
                        if tree.kept_before(rel, size, digest):
                            kept, new = True, 0
                        else:
                            kept, new = blobs.put(digest, data, write=written + size <= TREE_TOTAL_MAX)
                        tree.add(rel, size, digest, None if kept else _not_kept(size, digest))
                        if new:
                            written += new
                            tree.wrote.add(digest)
        except _StreamCut:
            unread = f"a tree reads at most {format_size(TREE_STREAM_MAX)} of the sandbox"
        except (tarfile.TarError, DockerException, OSError) as e:
            if self.destroyed:
                raise SandboxGone("the sandbox was destroyed while it was read") from None
            raise SandboxGone(f"could not read {path} from the sandbox: {str(e)[:200]}") from None
        finally:
            if reader is not None:
                reader.close()
        if unread:
            tree.add_text(TREE_NOTE, f"<files not read: {unread}>".encode())
        return tree

    @property
    def tree_folder(self) -> Path | None:
        """Where the contents of this sandbox's trees are kept on the host (None: none read)."""
        return self._blobs.folder if self._blobs is not None else None

    def _tree_blobs(self) -> Blobs:
        with self._blobs_lock:  # never a folder made after destroy() removed it
            if self.destroyed:
                raise SandboxGone("the sandbox was destroyed while it was read")
            if self._blobs is None:
                try:
                    self._blobs = Blobs(owner_folder(TREE_PREFIX, owner_id()))
                except (OSError, sqlite3.Error) as e:
                    raise SandboxGone(f"could not make a tree folder on this host: {str(e)[:200]}") from None
            return self._blobs

    def read_file(self, path: str, limit: int = READ_FILE_MAX) -> bytes:
        """One file, whole; FileTooLarge past `limit`, known from its size before any byte is read."""
        data, _, _ = self._read_file(path, limit, whole=True)
        return data

    def read_file_digest(self, path: str, keep: int) -> tuple[bytes, int, str]:
        """A file's first `keep` bytes, its size and its sha256, read as it streams
        (FileTooLarge past TREE_STREAM_MAX, which no read streams through)."""
        return self._read_file(path, keep, whole=False)

    def _read_file(self, path: str, limit: int, whole: bool) -> tuple[bytes, int, str]:
        full = path if path.startswith("/") else f"{WORKSPACE}/{path}"
        reader = self._archive(full, f"could not read {path}")
        try:
            size = int((reader.stat or {}).get("size", 0))
            most = limit if whole else TREE_STREAM_MAX
            if size > most:
                raise FileTooLarge(f"{path} is {format_size(size)}, more than a file read may take "
                                   f"({format_size(most)})")
            with tarfile.open(fileobj=reader, mode="r|", bufsize=_CHUNK) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise IsADirectoryError(path)
                source = tar.extractfile(member)
                assert source is not None
                digest, head = hashlib.sha256(), bytearray()
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    if len(head) < limit:
                        head += chunk[: limit - len(head)]
                return bytes(head), member.size, digest.hexdigest()
        except (FileTooLarge, IsADirectoryError):
            raise
        except (tarfile.TarError, DockerException, _StreamCut, OSError) as e:
            if self.destroyed:
                raise SandboxGone("the sandbox was destroyed while it was read") from None
            raise SandboxGone(f"could not read {path}: {str(e)[:200]}") from None
        finally:
            reader.close()

    def _archive(self, path: str, what: str) -> "_ChunkReader":
        try:
            chunks, stat = self.api.get_archive(self.id, path, chunk_size=_CHUNK)
        except NotFound:
            if self.destroyed:
                raise SandboxGone("the sandbox was destroyed while it was read") from None
            raise FileNotFoundError(path) from None
        except DockerException as e:
            raise SandboxGone(f"{what}: {str(e)[:200]}") from None
        return _ChunkReader(chunks, stat, TREE_STREAM_MAX)

    def destroy(self) -> None:
        """Kill and remove at once, and its tree folder; safe to call twice and from another thread."""
        self.destroyed = True
        try:
            self.api.remove_container(self.id, force=True)
        except NotFound:
            pass
        finally:
            with self._blobs_lock:
                if self._blobs is not None:
                    self._blobs.remove()


def _create(api, image: str, labels: dict[str, str], options: dict, storage_opt: dict | None) -> str:
    # The low-level API: no inspect round trip, and a short stop grace.
    return api.create_container(
        image, command=["sleep", "infinity"], labels=labels, working_dir="/", hostname="sandbox",
        stop_timeout=STOP_GRACE_S,
        host_config=api.create_host_config(**options, storage_opt=storage_opt),
    )["Id"]


def _daemon_facts(api) -> _DaemonFacts:
    with _DAEMONS_LOCK:
        facts = _DAEMONS.get(api)
        if facts is None:
            info = api.info()
            facts = _DAEMONS[api] = _DaemonFacts(cpus=int(info.get("NCPU") or 1),
                                                 storage_opt=_storage_opt_known(info))
        return facts


def _storage_opt_known(info: dict) -> bool | None:
    """False where `docker info` already says the driver cannot bound a container's size
    (overlay2 does only on xfs), so no trial wastes a refused create finding out; None: try."""
    if info.get("Driver") == "overlay2":
        status = {k: v for k, v in info.get("DriverStatus") or [] if isinstance(k, str)}
        backing = status.get("Backing Filesystem")
        if backing and backing != "xfs":
            return False
    return None


def _storage_opt_refused(error: APIError) -> bool:
    """overlay2 says "--storage-opt is supported only for overlay over xfs with 'pquota'…";
    other drivers say it is not supported."""
    text = str(error).lower()
    return "storage-opt" in text or "storage opt" in text or "storageopt" in text


class _StreamCut(Exception):
    """More of the tar stream than one read may take (TREE_STREAM_MAX)."""


class _ChunkReader(io.IOBase):
    """get_archive's chunks as a file, read once, front to back, with a bound."""

    def __init__(self, chunks: Iterable[bytes], stat: dict | None, limit: int):
        self.chunks: Iterator[bytes] = iter(chunks)
        self.stat = stat
        self.limit = limit
        self.read_bytes = 0
        self.chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (one copy; tarfile asks for its buffer size each time)."""
        while not self.chunk:
            try:
                self.chunk = memoryview(next(self.chunks))
            except StopIteration:
                return b""
        if self.read_bytes >= self.limit:
            raise _StreamCut()
        n = len(self.chunk) if size < 0 else min(size, len(self.chunk))
        data = bytes(self.chunk[:n])
        self.chunk = self.chunk[n:]
        self.read_bytes += n
        return data

    def close(self) -> None:
        # Stops the transfer: the daemon sees the connection go and ends the stream.
        close = getattr(self.chunks, "close", None)
        if close is not None:
            close()
        super().close()


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """A stream's members without the list tarfile keeps of every one it has read."""
    while (member := tar.next()) is not None:
        tar.members.clear()
        yield member


def _sha256(source: IO[bytes]) -> bytes:
    digest = hashlib.sha256()
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
    return digest.digest()


def _not_kept(size: int, digest: bytes) -> bytes:
    """A file past the tree's content budget: its size and hash, so a change still shows."""
    return (f"<not kept: the tree is over {format_size(TREE_TOTAL_MAX)}; "
            f"{size} bytes, sha256 {digest.hex()[:16]}>").encode()


def _skipped(rel: str) -> bool:
    """Left out of snapshots and diffs: git's own files, and Python's bytecode caches,
    which are noise the agent did not write."""
    parts = rel.split("/")
    return parts[0] == ".git" or "__pycache__" in parts
