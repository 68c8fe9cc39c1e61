"""Where the files Proctor ships beside its code are: icons, the demo records and suite, and
the script that starts a private Docker daemon.

They live in the checkout's `resources/`, `examples/` and `packaging/`. A wheel installs
the same three folders under `<prefix>/share/proctor/` (pyproject's data-files), and the
PyInstaller build puts them beside its executable (`sys._MEIPASS`). Each layout keeps the
same relative paths, so callers ask for `asset("resources/proctor.svg")` and never care
which one they run from.
"""

from __future__ import annotations

import site
import sys
from functools import cache
from pathlib import Path

_MARKER = Path("resources") / "proctor.svg"


@cache
def root() -> Path:
    """The folder holding `resources/`, `examples/` and `packaging/`."""
    here = Path(__file__).resolve().parent.parent
    candidates = [
        Path(getattr(sys, "_MEIPASS", here)),  # the one-folder build
        here,  # a checkout (editable install or PYTHONPATH)
        Path(sys.prefix) / "share" / "proctor",  # a wheel (pipx, uv tool, a venv)
        Path(site.getuserbase()) / "share" / "proctor",  # a wheel by `pip install --user`
    ]
    for candidate in candidates:
        if (candidate / _MARKER).is_file():
            return candidate
    raise FileNotFoundError(
        f"Proctor's resources are missing: none of {', '.join(map(str, candidates))} holds {_MARKER}")


def asset(relative: str) -> Path:
    """A shipped file or folder by its path in the checkout (`resources/demo`, …)."""
    return root() / relative
