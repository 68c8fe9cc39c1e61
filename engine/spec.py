"""The eval-file API (`evaluation`, `git`, `Dockerfile`, `Install`, `Secret`, `Step`)
and loading eval files into cases.

Every mistake a user can make in an eval file ends in `EvalFileError`, whose
message names the file and line, so `proctor run` can print one line and exit 2.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DEFAULT_TIMEOUT_S = 15 * 60
DEFAULT_STEP_TIMEOUT_S = 5 * 60
MAX_CASE_ID = 100


class EvalFileError(Exception):
    """A problem with an eval file, located at a file and line."""

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None):
        self.file, self.line, self.message = file, line, message
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(where + message)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str | int | float, what: str = "timeout") -> float:
    """'15m', '2m30s', '8s', '500ms', '1h' or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"bad {what} {value!r}")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"bad {what} {value!r}: must be more than zero")
        return float(value)
    text = str(value).strip().replace(" ", "")
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"bad {what} {value!r}: use a duration such as '90s', '15m' or '1h30m'")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    seconds = sum(float(n) * scale[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"bad {what} {value!r}: must be more than zero")
    return seconds


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", re.IGNORECASE)


def parse_size(value: str | int, what: str = "size") -> int:
    """'4g', '512m', '10GiB', '100k' or a number of bytes -> bytes (binary units)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"bad {what} {value!r}: use a size such as '512m' or '4g'")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(value.strip())
        if not match:
            raise ValueError(f"bad {what} {value!r}: use a size such as '512m' or '4g'")
        scale = 1024 ** " kmgt".index(match.group(2).lower() or " ")
        size = int(float(match.group(1)) * scale)
    if size <= 0 or size > 1 << 60:
        raise ValueError(f"bad {what} {value!r}: must be more than zero and at most 1 EiB")
    return size


def format_size(size: int) -> str:
    """Bytes as a limit is written: 4 GiB, 512 MiB, 100 KiB."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"


# --- what an eval file declares ----------------------------------------------------


@dataclass(frozen=True)
class Dockerfile:
    """An image built from a Dockerfile; its folder is the build context."""

    path: str
    context: str | None = None
    base_dir: Path | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Install:
    """An image made from `base` by running `commands` (one RUN each)."""

    base: str
    commands: tuple[str, ...] = ()

    def __init__(self, base: str, commands: list[str] | tuple[str, ...] = ()):
        if isinstance(commands, str):
            commands = [commands]
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "commands", tuple(commands))

    def dockerfile(self) -> str:
        return "".join([f"FROM {self.base}\n", *(f"RUN {c}\n" for c in self.commands)])


@dataclass(frozen=True)
class Git:
    """A workspace from a git repository at a ref, or an empty repository (init=True)."""

    source: str | None = None
    ref: str | None = None
    init: bool = False


def git(source: str | None = None, ref: str | None = None, init: bool = False) -> Git:
    if not init and not source:
        raise ValueError("git() needs a source, or init=True for an empty repository")
    return Git(source=source, ref=ref, init=init)


@dataclass(frozen=True)
class Secret:
    """A value from the host environment; inside the sandbox only a placeholder."""

    hosts: tuple[str, ...] = ()
    env: str | None = None  # host variable to read; defaults to the secret's name

    def __init__(self, hosts: list[str] | tuple[str, ...] = (), env: str | None = None):
        object.__setattr__(self, "hosts", tuple(hosts))
        object.__setattr__(self, "env", env)


@dataclass(frozen=True)
class Step:
    """A setup command with its own timeout."""

    command: str
    timeout: float = DEFAULT_STEP_TIMEOUT_S

    def __init__(self, command: str, timeout: str | float = DEFAULT_STEP_TIMEOUT_S):
        object.__setattr__(self, "command", command)
        object.__setattr__(self, "timeout", parse_duration(timeout, "step timeout"))


ImageSpec = str | Dockerfile | Install
WorkspaceSpec = Git | str | None


@dataclass
class Case:
    """One task: an `@evaluation` function and its options."""

    id: str
    body: Callable[[Any], Any]
    file: Path
    line: int
    image: ImageSpec | None = None
    workspace: WorkspaceSpec = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, Secret] = field(default_factory=dict)
    allow: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    rules: str | None = None
    setup: list[Step] = field(default_factory=list)
    timeout: float | None = None  # None: the config's default
    trials: int | None = None
    tags: list[str] = field(default_factory=list)
    # Sandbox limits; None: proctor.toml's [defaults] (see config.Resources).
    memory: int | None = None
    pids: int | None = None
    cpus: float | None = None
    disk: int | None = None
    user: str | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


CASE_ATTR = "__proctor_case__"


def evaluation(
    *,
    image: ImageSpec | None = None,
    workspace: WorkspaceSpec = None,
    env: dict[str, str] | None = None,
    secrets: dict[str, Secret] | None = None,
    allow: list[str] | None = None,
    files: dict[str, str | bytes | Path] | None = None,
    rules: str | None = None,
    setup: list[str | Step] | None = None,
    timeout: str | float | None = None,
    trials: int | None = None,
    tags: list[str] | None = None,
    memory: str | int | None = None,
    pids: int | None = None,
    cpus: float | None = None,
    disk: str | int | None = None,
    user: str | None = None,
) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Declare a case. Options are checked here, so a mistake points at this line."""
    caller = sys._getframe(1)
    file, line = Path(caller.f_code.co_filename), caller.f_lineno
    base_dir = file.parent

    def fail(message: str) -> EvalFileError:
        return EvalFileError(message, file, line)

    if image is not None and not isinstance(image, (str, Dockerfile, Install)):
        raise fail(f"image must be a reference, Dockerfile(...) or Install(...), not {image!r}")
    if isinstance(image, Dockerfile) and image.base_dir is None:
        image = Dockerfile(image.path, image.context, base_dir)
    if isinstance(image, Dockerfile) and not (image.base_dir / image.path).is_file():
        raise fail(f"Dockerfile {image.path!r} does not exist ({(image.base_dir / image.path).resolve()})")
    if workspace is not None and not isinstance(workspace, (Git, str)):
        raise fail(f"workspace must be git(...) or a folder path, not {workspace!r}")
    if isinstance(workspace, str):
        folder = (base_dir / workspace).resolve()
        if not folder.is_dir():
            raise fail(f"workspace folder {workspace!r} does not exist ({folder})")
        workspace = str(folder)
    if isinstance(workspace, Git) and workspace.source and not re.match(r"^\w+://|^git@", workspace.source):
        workspace = Git(str((base_dir / workspace.source).resolve()), workspace.ref, workspace.init)
    for name, secret in (secrets or {}).items():
        if not isinstance(secret, Secret):
            raise fail(f"secret {name!r} must be Secret(...), not {secret!r}")
    try:
        timeout_s = parse_duration(timeout) if timeout is not None else None
        steps = [s if isinstance(s, Step) else Step(str(s)) for s in (setup or [])]
    except ValueError as e:
        raise fail(str(e)) from None
    try:
        memory_b = parse_size(memory, "memory") if memory is not None else None
        disk_b = parse_size(disk, "disk") if disk is not None else None
    except ValueError as e:
        raise fail(str(e)) from None
    if pids is not None and (isinstance(pids, bool) or not isinstance(pids, int) or pids < 16):
        raise fail(f"pids must be a whole number of at least 16, not {pids!r}")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, (int, float))
                             or not 0 < cpus <= 1024):
        raise fail(f"cpus must be a number more than 0, not {cpus!r}")
    if user is not None and user not in ("agent", "root"):
        raise fail(f"user must be 'agent' (an unprivileged user, the default) or 'root', not {user!r}")
    if trials is not None and (not isinstance(trials, int) or trials < 1):
        raise fail(f"trials must be a whole number of at least 1, not {trials!r}")
    placed = {}
    for path, content in (files or {}).items():
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise fail(f"files path {path!r} must be relative to the workspace")
        placed[path] = _file_bytes(content, base_dir, fail)

    def decorate(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        if not callable(fn):
            raise fail("@evaluation(...) must decorate a function")
        if len(fn.__name__) > MAX_CASE_ID:
            raise fail(f"case id {fn.__name__!r} is longer than {MAX_CASE_ID} characters")
        case = Case(
            id=fn.__name__, body=fn, file=file, line=line, image=image, workspace=workspace,
            env=dict(env or {}), secrets=dict(secrets or {}), allow=list(allow or []),
            files=placed, rules=rules, setup=steps, timeout=timeout_s, trials=trials,
            tags=list(tags or []), memory=memory_b, pids=pids,
            cpus=float(cpus) if cpus is not None else None, disk=disk_b, user=user,
        )
        setattr(fn, CASE_ATTR, case)
        declared = getattr(_loading, "cases", None)
        if declared is not None:
            declared.append(case)
        return fn

    return decorate


def _file_bytes(content: Any, base_dir: Path, fail: Callable[[str], EvalFileError]) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, Path):
        path = content if content.is_absolute() else base_dir / content
        try:
            return path.read_bytes()
        except OSError as e:
            raise fail(f"cannot read {path}: {e.strerror}") from None
    raise fail(f"a file's content must be str, bytes or a Path, not {type(content).__name__}")


# --- loading -----------------------------------------------------------------------

# Every case declared while an eval file runs, so a case whose name a later one
# shadows (two functions with one name) is an error, not a case silently lost.
_loading = threading.local()


def find_eval_files(paths: list[str | Path]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.rglob("*.eval.py")))
        elif path.is_file():
            found.append(path)
        else:
            raise EvalFileError("no such file or folder", path)
    if not found:
        raise EvalFileError("no *.eval.py files found", ", ".join(map(str, paths)))
    return [p.resolve() for p in found]


def load_eval_file(path: Path) -> list[Case]:
    """Execute an eval file and return its cases in file order."""
    name = "proctor_eval_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EvalFileError("cannot be loaded as Python", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    outer, _loading.cases = getattr(_loading, "cases", None), []
    try:
        spec.loader.exec_module(module)
    except EvalFileError:
        raise
    except SyntaxError as e:
        raise EvalFileError(f"syntax error: {e.msg}", e.filename or path, e.lineno) from None
    except BaseException as e:  # the eval file's own code failed: point at its line
        line = _line_in(e, Path(spec.origin or path))
        unknown = re.match(r"evaluation\(\) got an unexpected keyword argument '(\w+)'", str(e))
        if unknown:
            options = ", ".join(inspect.signature(evaluation).parameters)
            raise EvalFileError(f"unknown option {unknown.group(1)!r} for @evaluation (options: {options})",
                                path, line) from None
        raise EvalFileError(f"{type(e).__name__}: {e}", path, line) from None
    finally:
        declared, _loading.cases = _loading.cases, outer
    first: dict[str, Case] = {}
    for case in sorted((c for c in declared if c.file == Path(spec.origin or path)), key=lambda c: c.line):
        if case.id in first:
            raise EvalFileError(f"case {case.id!r} is defined twice (also at line {first[case.id].line})",
                                path, case.line)
        first[case.id] = case
    found = {id(case): case for case in (getattr(v, CASE_ATTR) for v in vars(module).values()
                                         if hasattr(v, CASE_ATTR))}
    cases = list(found.values())  # one each, even when a case is bound to two names
    if not cases:
        raise EvalFileError("no @evaluation cases in this file", path)
    return sorted(cases, key=lambda c: c.line)


def _line_in(error: BaseException, path: Path) -> int | None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == path]
    return frames[-1].lineno if frames else None


def load_cases(paths: list[str | Path], case_ids: list[str] | None = None) -> list[Case]:
    cases: list[Case] = []
    for path in find_eval_files(paths):
        cases.extend(load_eval_file(path))
    seen: dict[str, Case] = {}
    for case in cases:
        if case.id in seen:
            raise EvalFileError(f"case {case.id!r} is defined twice (also at {seen[case.id].where})",
                                case.file, case.line)
        seen[case.id] = case
    if case_ids:
        unknown = [c for c in case_ids if c not in seen]
        if unknown:
            raise EvalFileError(f"no case named {', '.join(unknown)} (cases: {', '.join(seen)})")
        cases = [c for c in cases if c.id in case_ids]
    return cases
