"""The eval-file API (`evaluation`, `git`, `Dockerfile`, `Install`, `Secret`, `Step`)
and loading eval files into cases.

Every mistake a user can make in an eval file ends in `EvalFileError`, whose
message names the file and line, so `proctor run` can print one line and exit 2.
Options are checked by type when the decorator runs (strict pydantic: "abc" is
no list, True no number), each mistake named: "setup must be a list of
commands, not a string: setup=['echo hi']". Values are shown elided.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import ipaddress
import re
import reprlib
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator,
                      ValidationError, ValidationInfo)
from pydantic.dataclasses import dataclass as pydantic_dataclass

DEFAULT_TIMEOUT_S = 15 * 60
DEFAULT_STEP_TIMEOUT_S = 5.0 * 60
MAX_CASE_ID = 100
MAX_TIMEOUT_S = 7 * 24 * 3600  # any timeout, a case's, a step's or proctor.toml's: past a week it is a typo
MAX_TRIALS = 10_000  # per run; each is a row in the store before the batch starts
MAX_CONCURRENCY = 1024
MAX_PIDS = 4_194_304  # the kernel's PID_MAX_LIMIT
MIN_MEMORY = 6 << 20  # Docker refuses a smaller memory limit
MAX_SIZE = 1 << 60
MAX_ARGUMENT = 100_000  # a command or env value: the kernel takes at most 128 KiB per argument
MAX_FILE = 64 << 20  # a Path read into `files` when the eval file loads
MAX_MESSAGE = 500  # an error's message (after file and line) is elided past this


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` as one line (line breaks become spaces), elided past `limit` characters."""
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 2, 40, 40, 24


def shown(value: Any, limit: int = 40) -> str:
    """A user's value as a message shows it: its repr, elided past about `limit` characters."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit] + "…")
    text = _REPR.repr(value)  # bounded in depth and length; a broken __repr__ is caught
    return text if len(text) <= limit + 10 else text[:limit] + "…"


def clip(text: str, limit: int = 40) -> str:
    """A name from the user, elided past `limit` characters, control characters escaped."""
    text = text if len(text) <= limit else text[:limit] + "…"
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def name_list(items: list[str], most: int = 20) -> str:
    """Names for a message: each elided, at most `most` of them."""
    text = ", ".join(clip(str(item)) for item in items[:most])
    return text + (f", … ({len(items) - most} more)" if len(items) > most else "")


class EvalFileError(Exception):
    """A problem with an eval file, located at a file and line; its text is one line."""

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None):
        self.file, self.line, self.message = file, line, one_line(message)
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(" ".join(where.splitlines()) + self.message)


# --- values, checked ---------------------------------------------------------------
# Each check returns the value (converted) or raises ValueError with a phrase that
# follows the option's name: "timeout" + " must be …, not 'fast'".

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_A_DURATION = "a duration such as '90s', '15m' or '1h30m'"


def _duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be {_A_DURATION}, not {shown(value)}")
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"must be {_A_DURATION}, not {shown(value)}")
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        seconds: float = sum(float(n) * scale[u] for n, u in parts)  # too many digits: inf, refused below
    else:
        seconds = value
    if seconds <= 0:
        raise ValueError(f"must be more than zero, not {shown(value)}")
    if not seconds <= MAX_TIMEOUT_S:  # also nan and inf
        raise ValueError(f"must be finite and at most 7 days ('168h'), not {shown(value)}")
    return float(seconds)


def parse_duration(value: str | int | float, what: str = "timeout") -> float:
    """'15m', '2m30s', '8s', '500ms', '1h' or a number of seconds -> seconds, more than
    zero and at most 7 days; otherwise ValueError naming `what`."""
    try:
        return _duration(value)
    except ValueError as e:
        raise ValueError(f"{what} {e}") from None


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", re.IGNORECASE)
_A_SIZE = "a size such as '512m' or '4g'"


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"must be {_A_SIZE}, not {shown(value)}")
    if isinstance(value, int):
        size: float = value
    else:
        match = _SIZE.fullmatch(value.strip())
        if not match:
            raise ValueError(f"must be {_A_SIZE}, not {shown(value)}")
        size = float(match.group(1)) * 1024 ** " kmgt".index(match.group(2).lower() or " ")
    if not 1 <= size <= MAX_SIZE:  # too many digits made inf
        raise ValueError(f"must be at least one byte and at most 1 EiB, not {shown(value)}")
    return int(size)


def _memory(value: Any) -> int:
    size = _size(value)
    if size < MIN_MEMORY:
        raise ValueError(f"must be at least 6 MiB (Docker's least), not {shown(value)}")
    return size


def parse_size(value: str | int, what: str = "size") -> int:
    """'4g', '512m', '10GiB', '100k' or a number of bytes -> bytes (binary units)."""
    try:
        return _size(value)
    except ValueError as e:
        raise ValueError(f"{what} {e}") from None


def format_size(size: int) -> str:
    """Bytes as a limit is written: 4 GiB, 512 MiB, 100 KiB."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} bytes"


def _text(value: Any) -> str:
    """A string that can be written as UTF-8 (a lone surrogate cannot)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    try:
        value.encode()
    except UnicodeEncodeError as e:
        raise ValueError(f"must be valid Unicode, but holds the lone surrogate {value[e.start]!r}") from None
    return value


def _filled(value: Any) -> str:
    text = _text(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _argument(value: Any) -> str:
    """Text passed to a process (a command, an env value): the kernel ends it at a NUL."""
    text = _text(value)
    if "\0" in text:
        raise ValueError("must not hold a NUL character")
    if len(text) > MAX_ARGUMENT:
        raise ValueError(f"must be at most {MAX_ARGUMENT:,} characters, not {len(text):,}")
    return text


def _command(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a shell command (a string), not {shown(value)}")
    return _argument(_filled(value))


def _one_line_command(value: Any) -> str:
    command = _command(value)
    if "\n" in command or "\r" in command:  # each is one RUN line of a Dockerfile
        raise ValueError("must be one line: join commands with && or give each as its own item")
    return command


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def _env_name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(f"must be a variable name (letters, digits and '_', not starting with a digit), "
                         f"not {shown(value)}")
    return value


# A name, or "*." and a name; labels of letters, digits, '-' and '_', without a '-' at either end.
_LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
_HOST_NAME = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*\.?")


def _host(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    if len(value) <= 253 and _HOST_NAME.fullmatch(value):
        return value
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        raise ValueError(f"must be a host name such as 'pypi.org' or '*.pythonhosted.org', "
                         f"not {shown(value)}") from None


def _reference(value: Any) -> str:
    """An image reference: checked against the daemon before the batch; here only its shape."""
    text = _filled(value)
    if any(ch.isspace() or not ch.isprintable() for ch in text) or len(text) > 255:
        raise ValueError(f"must be an image reference such as 'debian:bookworm' (no whitespace), "
                         f"not {shown(value)}")
    return text


def _path_text(value: Any) -> str:
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a path, not {shown(value)}")
    return _argument(_filled(value))


def _file_path(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {shown(value)}")
    path = Path(_path_text(value))
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"must be relative to the workspace, not {shown(value)}")
    if not path.parts:
        raise ValueError(f"must be a file path such as 'data/input.txt', not {shown(value)}")
    if len(value.encode()) > 4096 or any(len(part.encode()) > 255 for part in path.parts):
        raise ValueError(f"must be a path the kernel takes (names of at most 255 bytes), not {shown(value)}")
    return value


def _file_content(value: Any) -> str | bytes | Path:
    if isinstance(value, (bytes, Path)):
        return value
    if isinstance(value, str):
        return _text(value)
    raise ValueError(f"must be str, bytes or a Path, not {shown(value)}")


def _tag(value: Any) -> str:
    tag = _filled(value)
    if len(tag) > 100 or not tag.isprintable():
        raise ValueError(f"must be at most 100 printable characters, not {shown(value)}")
    return tag


def _user(value: Any) -> str:
    if not isinstance(value, str) or value not in ("agent", "root"):
        raise ValueError(f"must be 'agent' (an unprivileged user, the default) or 'root', not {shown(value)}")
    return value


def _listed(what: str, into: type = list) -> BeforeValidator:
    """A list (or tuple) of `what`. A bare string would be taken character by character:
    refused, with the fix."""
    def check(value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            raise ValueError(f"must be a list of {what}, not a string: {info.field_name}=[{shown(value)}]")
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"must be a list of {what}, not {shown(value)}")
        return into(value)
    return BeforeValidator(check)


def _mapping(what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"must be a dict of {what}, not {shown(value)}")
        return value
    return BeforeValidator(check)


Duration = Annotated[float, PlainValidator(_duration)]
Size = Annotated[int, PlainValidator(_size)]
Memory = Annotated[int, PlainValidator(_memory)]
Trials = Annotated[int, Field(ge=1, le=MAX_TRIALS)]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]
Pids = Annotated[int, Field(ge=16, le=MAX_PIDS)]
Cpus = Annotated[float, Field(ge=0.01, le=1024, allow_inf_nan=False)]
User = Annotated[str, PlainValidator(_user)]
Command = Annotated[str, PlainValidator(_command)]
EnvName = Annotated[str, PlainValidator(_env_name)]
Reference = Annotated[str, PlainValidator(_reference)]
Filled = Annotated[str, PlainValidator(_filled)]

# What a type error says a value must be.
_EXPECTED = {"string_type": "a string", "int_type": "a whole number", "float_type": "a number",
             "bool_type": "True or False", "list_type": "a list", "dict_type": "a dict",
             "model_type": "a dict", "bytes_type": "bytes", "finite_number": "a finite number"}


def explain(error: ValidationError, owner: str = "", fields: list[str] | None = None,
            toml: bool = False) -> str:
    """The first mistake in `error` as one sentence naming where it is:
    "env['LANG'] must be a string, not 1", "Step timeout must be …", "variants[0].name …".

    `owner` prefixes the name (a class); `fields` names positional arguments by index;
    `toml` writes paths as proctor.toml does (defaults.timeout) and says "table" for dict.
    """
    first = error.errors(include_url=False)[0]
    loc, kind, ctx, value = list(first["loc"]), first["type"], first.get("ctx") or {}, first.get("input")
    if loc and isinstance(loc[0], int) and fields and loc[0] < len(fields):
        loc[0] = fields[loc[0]]  # a positional argument
    key = loc[-1:] == ["[key]"]
    where = _where(loc[:-2] if key else loc, toml)  # a dict key's own value is shown after "not"
    where = " ".join(w for w in (owner, where, "key" if key else "") if w)
    if kind == "value_error":
        phrase = str(ctx.get("error", first["msg"]))
    elif kind in _EXPECTED:
        expected = _EXPECTED[kind].replace("a dict", "a table") if toml else _EXPECTED[kind]
        phrase = f"must be {expected}, not {shown(value)}"
    elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = {"ge": "at least", "le": "at most", "gt": "more than", "lt": "less than"}
        name = next(k for k in bound if k in ctx)
        limit = f"{ctx[name]:,}" if isinstance(ctx[name], int) else ctx[name]
        phrase = f"must be {bound[name]} {limit}, not {shown(value)}"
    elif kind == "literal_error":
        phrase = f"must be {ctx['expected']}, not {shown(value)}"
    elif kind == "missing":
        phrase = "is missing"
    elif kind in ("extra_forbidden", "unexpected_keyword_argument"):
        phrase = "is not a known key" if toml else "is not a known option"
    elif kind == "unexpected_positional_argument":
        where, phrase = owner, f"was given too many arguments ({shown(value)} is one too many)"
    elif kind == "is_instance_of":
        phrase = f"must be a {ctx['class']}, not {shown(value)}"
    else:
        phrase = f"is wrong: {first['msg']}, not {shown(value)}"
    return one_line(f"{where} {phrase}" if where else phrase)


def _where(loc: list[Any], toml: bool) -> str:
    """('env', 'LANG') -> env['LANG']; ('tags', 1) -> tags[1]; in TOML ('variants', 0, 'name') -> variants[0].name."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not text:
            text = clip(str(part))
        else:
            text += f".{clip(str(part))}" if toml else f"[{shown(part)}]"
    return text


# --- what an eval file declares ----------------------------------------------------


# Strict: "abc" is no list and True no number; an unknown keyword is an error, not ignored.
_API = ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True)


@pydantic_dataclass(frozen=True, config=_API)
class Dockerfile:
    """An image built from a Dockerfile; its folder is the build context."""

    path: Annotated[str, PlainValidator(_path_text)]
    context: Annotated[str, PlainValidator(_path_text)] | None = None
    base_dir: Path | None = field(default=None, compare=False)


@pydantic_dataclass(frozen=True, config=_API)
class Install:
    """An image made from `base` by running `commands` (one RUN each)."""

    base: Reference
    commands: Annotated[tuple[Annotated[str, PlainValidator(_one_line_command)], ...],
                        _listed("commands", tuple)] = ()

    def dockerfile(self) -> str:
        return "".join([f"FROM {self.base}\n", *(f"RUN {c}\n" for c in self.commands)])


@dataclass(frozen=True)
class Git:
    """A workspace from a git repository: the tree of `ref` (default: the source's HEAD),
    fetched on the host, with no `.git`; with `init` also a fresh `.git` whose one commit
    holds that tree. `init` alone: a repository with one empty commit."""

    source: str | None = None
    ref: str | None = None
    init: bool = False


def git(source: str | None = None, ref: str | None = None, init: bool = False) -> Git:
    if hasattr(source, "__fspath__"):  # a pathlib.Path
        source = str(source.__fspath__())
    if source is not None and not isinstance(source, str):
        raise TypeError(f"git() source must be a path or URL (a string), not {source!r}")
    if ref is not None and not isinstance(ref, str):
        raise TypeError(f"git() ref must be a branch, tag or commit id (a string), not {ref!r}")
    if not isinstance(init, bool):
        raise TypeError(f"git() init must be True or False, not {init!r}")
    if source is not None and (not source.strip() or source.startswith("-")):
        raise ValueError(f"git() source {source!r} must be a path or URL "
                         "(not empty, not starting with '-')")
    # Refs are passed to git on the host: nothing it could take for an option or a second argument.
    if ref is not None and (not ref or ref.startswith("-")
                            or any(ch.isspace() or ord(ch) < 32 for ch in ref)):
        raise ValueError(f"git() ref {ref!r} must be a branch, tag or commit id "
                         "(no spaces, not starting with '-')")
    if ref is not None and source is None:
        raise ValueError(f"git() ref {ref!r} needs a source: git('path/or/url', ref={ref!r})")
    if not init and not source:
        raise ValueError("git() needs a source, or init=True for an empty repository")
    return Git(source=source, ref=ref, init=init)


def _some_hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    if not hosts:
        raise ValueError("must name at least one host: hosts=['api.example.com']")
    return hosts


@pydantic_dataclass(frozen=True, config=_API)
class Secret:
    """A value from the host environment; inside the sandbox only a placeholder."""

    hosts: Annotated[tuple[Annotated[str, PlainValidator(_host)], ...], _listed("host names", tuple),
                     AfterValidator(_some_hosts)]
    env: EnvName | None = None  # host variable to read; defaults to the secret's name


@pydantic_dataclass(frozen=True, config=_API)
class Step:
    """A setup command with its own timeout."""

    command: Command
    timeout: Duration = DEFAULT_STEP_TIMEOUT_S


# The classes an eval file constructs, by name: their ValidationError is explained with their fields.
_CHECKED: dict[str, type] = {cls.__name__: cls for cls in (Dockerfile, Install, Secret, Step)}


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


def _image(value: Any) -> ImageSpec:
    if isinstance(value, (Dockerfile, Install)):
        return value
    if isinstance(value, str):
        return _reference(value)
    raise ValueError(f"must be a reference, Dockerfile(...) or Install(...), not {shown(value)}")


def _workspace(value: Any) -> WorkspaceSpec:
    if isinstance(value, Git):
        return value
    if isinstance(value, (str, Path)):
        try:
            return _path_text(value)
        except ValueError as e:
            raise ValueError(f"{e}: give a folder path or git(...)") from None
    raise ValueError(f"must be git(...) or a folder path, not {shown(value)}")


def _secret(value: Any) -> Secret:
    if not isinstance(value, Secret):
        raise ValueError(f"must be Secret(...), not {shown(value)}")
    return value


def _setup_step(value: Any) -> Step:
    if isinstance(value, Step):
        return value
    if isinstance(value, str):
        return Step(_command(value))
    raise ValueError(f"must be a command or Step(...), not {shown(value)}")


class _Options(BaseModel):
    """The options of @evaluation, each checked by type; None (left out) is not checked."""

    model_config = _API

    image: Annotated[Any, PlainValidator(_image)] = None
    workspace: Annotated[Any, PlainValidator(_workspace)] = None
    env: Annotated[dict[EnvName, Annotated[str, PlainValidator(_argument)]],
                   _mapping("variable names to strings")] | None = None
    secrets: Annotated[dict[EnvName, Annotated[Secret, PlainValidator(_secret)]],
                       _mapping("variable names to Secret(...)")] | None = None
    allow: Annotated[list[Annotated[str, PlainValidator(_host)]], _listed("host names")] | None = None
    files: Annotated[dict[Annotated[str, PlainValidator(_file_path)], Annotated[Any, PlainValidator(_file_content)]],
                     _mapping("file paths to contents")] | None = None
    rules: Annotated[str, PlainValidator(_text)] | None = None
    setup: Annotated[list[Annotated[Step, PlainValidator(_setup_step)]], _listed("commands")] | None = None
    timeout: Duration | None = None
    trials: Trials | None = None
    tags: Annotated[list[Annotated[str, PlainValidator(_tag)]], _listed("tags")] | None = None
    memory: Memory | None = None
    pids: Pids | None = None
    cpus: Cpus | None = None
    disk: Size | None = None
    user: User | None = None


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
    given = {name: value for name, value in locals().items() if value is not None}  # the options only
    caller = sys._getframe(1)
    file, line = Path(caller.f_code.co_filename), caller.f_lineno
    base_dir = file.parent

    def fail(message: str) -> EvalFileError:
        return EvalFileError(message, file, line)

    try:
        options = _Options(**given)
    except ValidationError as e:
        raise fail(explain(e)) from None
    image, workspace = options.image, options.workspace
    if isinstance(image, Dockerfile):
        image = Dockerfile(image.path, image.context, image.base_dir or base_dir)
        dockerfile, context = image.base_dir / image.path, image.base_dir / (image.context or ".")
        if not dockerfile.is_file():
            raise fail(f"Dockerfile {shown(image.path)} does not exist ({dockerfile.resolve()})")
        if not context.is_dir():
            raise fail(f"Dockerfile context {shown(image.context)} is not a folder ({context.resolve()})")
    if isinstance(workspace, str):
        folder = (base_dir / workspace).resolve()
        if not folder.is_dir():
            raise fail(f"workspace folder {workspace!r} does not exist ({folder})")
        workspace = str(folder)
    if isinstance(workspace, Git) and workspace.source and not re.match(r"^\w+://|^git@", workspace.source):
        workspace = Git(str((base_dir / workspace.source).resolve()), workspace.ref, workspace.init)
    both = sorted(set(options.env or {}) & set(options.secrets or {}))
    if both:
        raise fail(f"{shown(both[0])} is both in env and in secrets: keep it in secrets only")
    placed = {path: _file_bytes(path, content, base_dir, fail) for path, content in (options.files or {}).items()}

    def decorate(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        name = _case_id(fn, fail)
        case = Case(
            id=name, body=fn, file=file, line=line, image=image, workspace=workspace,
            env=dict(options.env or {}), secrets=dict(options.secrets or {}), allow=list(options.allow or []),
            files=placed, rules=options.rules, setup=list(options.setup or []), timeout=options.timeout,
            trials=options.trials, tags=list(options.tags or []), memory=options.memory, pids=options.pids,
            cpus=options.cpus, disk=options.disk, user=options.user,
        )
        setattr(fn, CASE_ATTR, case)
        declared = getattr(_loading, "cases", None)
        if declared is not None:
            declared.append(case)
        return fn

    return decorate


def _case_id(fn: Any, fail: Callable[[str], EvalFileError]) -> str:
    """The case's id, its function's name, once the engine is sure it can call it as body(c)."""
    name = getattr(fn, "__name__", None)
    if not callable(fn) or not isinstance(name, str) or not name.isidentifier():
        raise fail(f"@evaluation(...) must decorate a function (def name(c): ...), not {shown(fn)}")
    if len(name) > MAX_CASE_ID:
        raise fail(f"case id {shown(name)} is longer than {MAX_CASE_ID} characters")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        # Its body would never run: calling it only makes a coroutine or generator.
        raise fail(f"case {name} must be a plain function (def), not async or a generator")
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        raise fail(f"case function must take one argument, the context: def {name}(c):") from None
    except ValueError:  # no signature to read: it is tried when the trial runs
        pass
    return name


def _file_bytes(path: str, content: str | bytes | Path, base_dir: Path,
                fail: Callable[[str], EvalFileError]) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, str):
        return content.encode()
    source = content if content.is_absolute() else base_dir / content
    try:
        # Only a regular file: a device (/dev/zero) or a fifo would never end.
        if not source.is_file():
            raise fail(f"files[{shown(path)}]: {source} is not a regular file")
        if source.stat().st_size > MAX_FILE:
            raise fail(f"files[{shown(path)}]: {source} is larger than {format_size(MAX_FILE)}; "
                       "put big data in the workspace folder")
        return source.read_bytes()
    except OSError as e:
        raise fail(f"files[{shown(path)}]: cannot read {source}: {e.strerror}") from None


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
    except (EvalFileError, KeyboardInterrupt):
        raise
    except SyntaxError as e:
        raise EvalFileError(f"syntax error: {e.msg}", e.filename or path, e.lineno) from None
    except BaseException as e:  # the eval file's own code failed: point at its line
        raise EvalFileError(_describe(e), path, _line_in(e, Path(spec.origin or path))) from None
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


def _describe(error: BaseException) -> str:
    """What failed, in one sentence: an API's own sentence as it is, anything else with its type."""
    if isinstance(error, ValidationError):  # Step, Secret, Install or Dockerfile given a wrong value
        checked = _CHECKED.get(error.title)
        return explain(error, error.title, list(checked.__pydantic_fields__) if checked else None)
    try:
        text = str(error)
    except Exception:  # the eval file's own exception with a broken __str__
        text = ""
    unknown = re.match(r"evaluation\(\) got an unexpected keyword argument '(\w+)'", text)
    if unknown:
        options = ", ".join(inspect.signature(evaluation).parameters)
        return f"unknown option {shown(unknown.group(1))} for @evaluation (options: {options})"
    if re.match(r"evaluation\(\) takes 0 positional arguments", text):
        return "@evaluation takes options by name, in parentheses: @evaluation() or @evaluation(image=...)"
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, (TypeError, ValueError)) and frames and frames[-1].filename == __file__:
        return text  # git() and the other API functions raise a sentence of their own
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


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
            raise EvalFileError(f"no case named {name_list(unknown)} (cases: {name_list(list(seen))})")
        cases = [c for c in cases if c.id in case_ids]
    return cases
