"""The one-folder build's entry point: one executable, two commands.

Started as `proctor-studio` it is the studio; started through the `proctor` link beside it, it
is the command line. Each runs what pyproject names for that script (the build copies the
package's entry points), so the folder starts exactly what a pip install would.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path

SCRIPTS = {"proctor": "console_scripts", "proctor-studio": "gui_scripts"}


def main() -> int:
    name = Path(sys.argv[0]).name
    name = name if name in SCRIPTS else "proctor-studio"
    (script,) = entry_points(group=SCRIPTS[name], name=name)
    return script.load()()


if __name__ == "__main__":
    sys.exit(main())
