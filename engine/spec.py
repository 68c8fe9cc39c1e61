"""The eval-file API (`evaluation`, `git`, `Dockerfile`, `Install`, `Secret`, `Step`)
and loading eval files into cases.

Every mistake a user can make in an eval file ends in `EvalFileError`, whose
message names the file and line, so `proctor run` can print one line and exit 2.
Options are checked by type when the decorator runs, with the types and bounds
of `engine.options`, each mistake named: "setup must be a list of commands, not
a string: setup=['echo hi']". Values are shown elided.
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
from typing import Annotated, Any, Callable

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainValidator, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from .options import (MAX_CASE_ID, MAX_FILE, Argument, Command, Cpus, Duration, EnvName, FileContent, FilePath,
                      Host, Memory, OneLineCommand, PathText, Pids, Reference, Size, Tag, Text, Trials, User,
                      explain, format_size, image_reference, listed, mapping, name_list, one_line,
                      path_text, shell_command, shown)
# Still importable from here, where the engine, its tests and eval files found them before.
from .options import (MAX_ARGUMENT, MAX_CONCURRENCY, MAX_MESSAGE, MAX_PIDS, MAX_SIZE,  # noqa: F401
                      MAX_TIMEOUT_S, MAX_TRIALS, MIN_MEMORY, Concurrency, Filled, clip, parse_duration,
                      parse_size)

DEFAULT_STEP_TIMEOUT_S = 5.0 * 60


class EvalFileError(Exception):
    """A problem with an eval file, located at a file and line; its text is one line."""

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None):
        self.file, self.line, self.message = file, line, one_line(message)
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(" ".join(where.splitlines()) + self.message)


# --- what an eval file declares ----------------------------------------------------


# Strict: "abc" is no list and True no number; an unknown keyword is an error, not ignored.
_API = ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True)


@pydantic_dataclass(frozen=True, config=_API)
class Dockerfile:
    """An image built from a Dockerfile; its folder is the build context."""

    path: PathText
    context: PathText | None = None
    base_dir: Path | None = field(default=None, compare=False)


@pydantic_dataclass(frozen=True, config=_API)
class Install:
    """An image made from `base` by running `commands` (one RUN each)."""

    base: Reference
    commands: Annotated[tuple[OneLineCommand, ...], listed("commands", tuple)] = ()

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

    hosts: Annotated[tuple[Host, ...], listed("host names", tuple), AfterValidator(_some_hosts)]
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
        return image_reference(value)
    raise ValueError(f"must be a reference, Dockerfile(...) or Install(...), not {shown(value)}")


def _workspace(value: Any) -> WorkspaceSpec:
    if isinstance(value, Git):
        return value
    if isinstance(value, (str, Path)):
        try:
            return path_text(value)
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
        return Step(shell_command(value))
    raise ValueError(f"must be a command or Step(...), not {shown(value)}")


class _Options(BaseModel):
    """The options of @evaluation, each checked by type; None (left out) is not checked."""

    model_config = _API

    image: Annotated[Any, PlainValidator(_image)] = None
    workspace: Annotated[Any, PlainValidator(_workspace)] = None
    env: Annotated[dict[EnvName, Argument], mapping("variable names to strings")] | None = None
    secrets: Annotated[dict[EnvName, Annotated[Secret, PlainValidator(_secret)]],
                       mapping("variable names to Secret(...)")] | None = None
    allow: Annotated[list[Host], listed("host names")] | None = None
    files: Annotated[dict[FilePath, FileContent], mapping("file paths to contents")] | None = None
    rules: Text | None = None
    setup: Annotated[list[Annotated[Step, PlainValidator(_setup_step)]], listed("commands")] | None = None
    timeout: Duration | None = None
    trials: Trials | None = None
    tags: Annotated[list[Tag], listed("tags")] | None = None
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
