"""`proctor desktop install` and `proctor desktop uninstall`: Proctor in the user's application
menu, with its icon in the hicolor theme, as the freedesktop specifications describe.

No Qt here: `proctor --help` and `proctor desktop` load this module, and the checkout's
packaging/install-desktop runs it with a bare python3 before any virtual environment exists.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from importlib.util import find_spec
from pathlib import Path, PurePath

from .assets import asset

DESKTOP_ID = "proctor"  # the entry's file stem: the studio gives it to QGuiApplication.setDesktopFileName
ICON_NAME = "proctor"
WM_CLASS = "Proctor"  # Qt's WM_CLASS class is the application name studio/app.py sets
STUDIO_SCRIPT = "proctor-studio"  # pyproject's gui-script
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)  # packaging/make-icons renders these
ICON_SOURCE = "resources/icons/hicolor"

# Exec's reserved characters: an argument holding one is double-quoted (Desktop Entry spec, "The Exec key").
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")
_QUOTED_ESCAPES = {'"': '\\"', "`": "\\`", "$": "\\$", "\\": "\\\\"}
_STRING_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


class DesktopError(Exception):
    """A mistake or a missing piece the user can fix, said in one sentence."""


def quote_exec_argument(argument: str) -> str:
    """One argument of an Exec line, before the string escaping every value gets."""
    argument = argument.replace("%", "%%")  # a lone % starts a field code
    if argument and not _RESERVED.intersection(argument):
        return argument
    return '"' + "".join(_QUOTED_ESCAPES.get(ch, ch) for ch in argument) + '"'


def escape_string(value: str) -> str:
    """A value of type string: backslashes and control characters escaped, a leading space kept."""
    escaped = "".join(_STRING_ESCAPES.get(ch, ch) for ch in value)
    return "\\s" + escaped[1:] if escaped.startswith(" ") else escaped


def exec_value(argv: list[str]) -> str:
    """The Exec key's value for `argv`; readers undo the string escaping first, then the quoting."""
    return escape_string(" ".join(quote_exec_argument(a) for a in argv))


def entry_text(argv: list[str], try_exec: Path) -> str:
    return "\n".join([
        "# Written by `proctor desktop install`; `proctor desktop uninstall` removes it.",
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",  # the newest desktop-file-validate 0.26 knows
        "Name=Proctor",
        "GenericName=Agent evaluation studio",
        "Comment=Evaluate AI coding agents in Docker sandboxes",
        f"Exec={exec_value(argv)}",
        f"TryExec={escape_string(str(try_exec))}",
        f"Icon={ICON_NAME}",
        "Terminal=false",
        "Categories=Development;",
        "Keywords=eval;agent;LLM;Docker;",
        "StartupNotify=true",
        f"StartupWMClass={WM_CLASS}",
        "",
    ])


def data_home() -> Path:
    """$XDG_DATA_HOME, or ~/.local/share when it is unset or not absolute (the Base Directory spec)."""
    value = os.environ.get("XDG_DATA_HOME", "")
    return Path(value) if os.path.isabs(value) else Path.home() / ".local" / "share"


@dataclass(frozen=True)
class Layout:
    """Where an install puts each file, under one data home."""

    home: Path

    @property
    def entry(self) -> Path:
        return self.home / "applications" / f"{DESKTOP_ID}.desktop"

    @property
    def theme(self) -> Path:
        return self.home / "icons" / "hicolor"

    def icons(self) -> list[tuple[str, Path]]:
        """(the shipped icon's path under resources/icons/hicolor, where it goes)."""
        folders = ["scalable", *(f"{n}x{n}" for n in ICON_SIZES)]
        names = [f"{ICON_NAME}.svg" if f == "scalable" else f"{ICON_NAME}.png" for f in folders]
        return [(f"{folder}/apps/{name}", self.theme / folder / "apps" / name)
                for folder, name in zip(folders, names)]

    def files(self) -> list[Path]:
        return [self.entry, *(target for _, target in self.icons())]


def studio_script() -> Path:
    """The `proctor-studio` gui-script installed with this package, by absolute path."""
    candidates: list[Path] = []
    if getattr(sys, "frozen", False):  # the one-folder build: its studio beside this executable
        candidates.append(Path(sys.executable).with_name(STUDIO_SCRIPT))
    try:
        dist = distribution("proctor")
        candidates += [Path(os.path.normpath(dist.locate_file(f))) for f in dist.files or []
                       if PurePath(f).name == STUDIO_SCRIPT]
    except PackageNotFoundError:  # run from a checkout by PYTHONPATH
        pass
    candidates.append(Path(sysconfig.get_path("scripts")) / STUDIO_SCRIPT)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    raise DesktopError(f"{STUDIO_SCRIPT} is not installed beside this Python: install Proctor as a package "
                       "(pipx install 'proctor[studio]'), or in a checkout run packaging/install-desktop")


def install(launch: Path | None = None, home: Path | None = None) -> Layout:
    """Write the entry and the icons; `launch` runs a checkout's packaging/launch instead of the
    installed studio."""
    if launch is not None:
        launch = Path(os.path.abspath(launch))
        if not (launch.is_file() and os.access(launch, os.X_OK)):
            raise DesktopError(f"{launch} is not an executable file: pass the checkout's packaging/launch")
        argv, try_exec = [str(launch), "studio"], launch
    else:
        if find_spec("PySide6") is None:
            raise DesktopError("the studio needs PySide6, which is not installed: "
                               "pipx install 'proctor[studio]' (or pip install 'proctor[studio]')")
        try_exec = studio_script()
        argv = [str(try_exec)]
    try:
        source = asset(ICON_SOURCE)
    except FileNotFoundError as e:
        raise DesktopError(str(e)) from None
    layout = Layout(home or data_home())
    for relative, _ in layout.icons():
        if not (source / relative).is_file():
            raise DesktopError(f"the icon {source / relative} is missing: run packaging/make-icons")
    with _writing():
        for relative, target in layout.icons():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / relative, target)
        layout.entry.parent.mkdir(parents=True, exist_ok=True)
        staged = layout.entry.with_name(f".{layout.entry.name}.tmp")
        staged.write_text(entry_text(argv, try_exec), encoding="utf-8")
        os.replace(staged, layout.entry)  # a menu watching the folder never reads half an entry
    _refresh_caches(layout)
    return layout


def uninstall(home: Path | None = None) -> list[Path]:
    """Remove what `install` wrote, and the folders it made that are left empty; returns the files removed."""
    layout = Layout(home or data_home())
    removed = []
    with _writing():
        for path in layout.files():
            if path.is_file() or path.is_symlink():
                path.unlink()
                removed.append(path)
        for path in layout.files():  # <size>/apps, <size>, hicolor, icons, applications: only when empty
            for folder in path.parents:
                if folder == layout.home or layout.home not in folder.parents:
                    break
                try:
                    folder.rmdir()
                except OSError:  # not empty (another app's icons) or already gone
                    break
    _refresh_caches(layout)
    return removed


@contextmanager
def _writing() -> Iterator[None]:
    """A file system error as one sentence naming the path."""
    try:
        yield
    except OSError as error:
        where = f" {error.filename}" if error.filename else ""
        raise DesktopError(f"cannot write{where}: {error.strerror or error}") from None


def _refresh_caches(layout: Layout) -> None:
    """Refresh a cache that exists, never create one: a stale cache hides new files from the menu,
    while a missing one only makes it read the folder (and uninstall then leaves nothing behind)."""
    refreshes = [
        (layout.theme / "icon-theme.cache", ["gtk-update-icon-cache", "-q", "-f", "-t", str(layout.theme)]),
        (layout.entry.parent / "mimeinfo.cache", ["update-desktop-database", "-q", str(layout.entry.parent)]),
    ]
    for cache, command in refreshes:
        if cache.exists() and shutil.which(command[0]):
            subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False, timeout=60)


DESCRIPTION = "Add Proctor to your application menu, with its icon, or remove it."


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("desktop", help="add Proctor to (or remove it from) your application menu",
                            description=DESCRIPTION)
    _add_actions(parser)


def _add_actions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("install", help="add the menu entry and the icons for this user")
    add.add_argument("--launch", type=Path, metavar="PATH",
                     help="start the studio with this checkout's packaging/launch instead of the installed "
                          f"{STUDIO_SCRIPT} (packaging/install-desktop passes it)")
    actions.add_parser("uninstall", help="remove the menu entry and the icons `install` added")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if not sys.platform.startswith("linux"):
        print("proctor: `proctor desktop` registers menu entries on Linux desktops only", file=sys.stderr)
        return 2
    try:
        if args.action == "install":
            layout = install(args.launch)
            print(f"added Proctor to the application menu: {layout.entry} (icons in {layout.theme})")
        else:
            removed = uninstall()
            home = Layout(data_home())
            print(f"removed Proctor from the application menu: {len(removed)} files under {home.home}"
                  if removed else f"Proctor was not in the application menu: nothing under {home.home}")
    except DesktopError as e:
        print(f"proctor: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m studio.desktop install --launch …`: packaging/install-desktop, before any venv."""
    parser = argparse.ArgumentParser(prog="proctor desktop", description=DESCRIPTION)
    _add_actions(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
