"""The folder rule: a server reads eval files only inside the folder it was started in.

Every path a tool is given (an eval file, a folder to list) is taken relative to that
folder, resolved with its symlinks, and refused when it lands outside: `..`, an absolute
path elsewhere, or a symlink pointing out. Eval files found by walking a folder are held
to the same rule, since a symlinked one would run code from elsewhere.
"""

from __future__ import annotations

from pathlib import Path


class OutsideFolder(ValueError):
    """A path the server may not read; its text is one sentence for the caller."""


class Folder:
    """The folder a server serves, resolved once."""

    def __init__(self, root: Path):
        self.root = root.resolve(strict=True)

    def inside(self, given: str) -> Path:
        """`given` (relative to the folder, or absolute) resolved, if it is inside the folder."""
        try:
            path = (self.root / given).resolve()  # an absolute `given` replaces the root
        except (OSError, RuntimeError, ValueError) as e:  # a symlink loop, a NUL byte
            raise OutsideFolder(f"{given!r} is not a usable path ({e})") from None
        return self.check(path, given)

    def check(self, path: Path, given: str | None = None) -> Path:
        """`path` (resolved) if it is inside the folder; else the refusal naming it."""
        if path == self.root or path.is_relative_to(self.root):
            return path
        said = repr(given) if given is not None else str(path)
        raise OutsideFolder(f"{said} is outside the folder this server serves ({self.root}): "
                            "give a path inside it")

    def relative(self, path: Path) -> str:
        """How the caller names a path inside the folder: relative to it, `.` for itself."""
        return path.relative_to(self.root).as_posix() if path != self.root else "."
