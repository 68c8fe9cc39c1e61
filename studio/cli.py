"""`proctor studio`, registered into the engine's CLI through the `proctor.commands`
entry point, so the engine never imports the studio (or Qt)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# The tab names again, as studio/app.py's TABS holds them (a test keeps the two alike):
# `proctor --help` builds this parser, and the CLI must not import Qt to do it.
TABS = ["overview", "timeline", "trajectory", "diff", "evidence", "egress", "source"]
VIEWS = ["browser", *TABS, "compare", "replay", "groups"]  # groups: a batch Overview's failure groups
THEMES = ["light", "dark", "system"]  # studio/theme.py's CHOICES again, without Qt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=Path,
                        help="the SQLite store (default: $PROCTOR_STORE, else the store location in Settings, "
                             "else the user data folder)")
    parser.add_argument("--open", dest="open_id", metavar="ID",
                        help="select a batch or trial by id (two trial ids ID1,ID2: --view compare)")
    parser.add_argument("--view", choices=VIEWS, help="the view to show")
    parser.add_argument("--at", metavar="FRACTION|DURATION",
                        help="with --view replay: where the replay stands, a fraction (0.5) or a time (3s, 1500ms);"
                             " default the end")
    parser.add_argument("--search", metavar="QUERY",
                        help="type QUERY into the browser's search box: the tree filters and the hits show")
    parser.add_argument("--screenshot", type=Path, metavar="PNG", help="render the window off screen to this PNG and exit")
    parser.add_argument("--theme", choices=THEMES,
                        help="light, dark, or as the desktop says (default: the choice in Settings; "
                             "light for a screenshot)")
    parser.add_argument("--size", type=parse_size, metavar="WxH",
                        help=f"the window's size, in pixels (a screenshot's default {SCREENSHOT_SIZE[0]}x{SCREENSHOT_SIZE[1]})")


SCREENSHOT_SIZE = (1400, 860)
_SIZE = re.compile(r"(\d{1,5})x(\d{1,5})")


def parse_size(text: str) -> tuple[int, int]:
    """`1024x700` as (1024, 700); argparse turns the ArgumentTypeError into one line and exit 2."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or not all(int(n) > 0 for n in match.groups()):
        raise argparse.ArgumentTypeError(f"--size takes WxH in pixels (like 1024x700), not {text}")
    return int(match[1]), int(match[2])


_AT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m)?")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000}


@dataclass(frozen=True)
class At:
    """Where `--at` puts a replay: a fraction of the trial's time, or a time from its start."""

    fraction: float | None = None
    ms: int | None = None

    def of(self, total_ms: int) -> int:
        """Recorded ms from the trial's first event, within the trial."""
        at = round(self.fraction * total_ms) if self.fraction is not None else self.ms or 0
        return max(0, min(at, total_ms))


def parse_at(text: str) -> At:
    """`0.5` (a fraction, 0 to 1), `3s`, `1500ms` or `2m`; ValueError says what is wrong."""
    match = _AT.fullmatch(text.strip())
    if match is None or (match[2] is None and not 0 <= float(match[1]) <= 1):
        raise ValueError(f"--at takes a fraction from 0 to 1 (like 0.5) or a time (like 3s or 1500ms), "
                         f"not {text}")
    number, unit = float(match[1]), match[2]
    return At(fraction=number) if unit is None else At(ms=round(number * _UNIT_MS[unit]))


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("studio", help="open the studio (a desktop window over the store)")
    add_arguments(parser)
    parser.set_defaults(func=_run)


def main() -> int:
    """`proctor-studio`, what the desktop entry starts: the same as `proctor studio`."""
    parser = argparse.ArgumentParser(prog="proctor-studio")
    add_arguments(parser)
    return _run(parser.parse_args())


def _run(args: argparse.Namespace) -> int:
    if args.screenshot and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # Before Qt is imported: a missing X or GL library makes Qt abort (or its import fail), and
    # Qt's own message blames xcb-cursor alone. Named all, with their packages (as root, installed).
    from . import xcb
    if xcb.check(install=True) != 0:
        return 2
    try:
        from .app import run
    except ModuleNotFoundError as e:  # the studio's extra is not installed
        print(f"proctor: the studio needs PySide6 and pyqtgraph ({e}): pip install 'proctor[studio]'",
              file=sys.stderr)
        return 2
    except ImportError as e:  # Qt is there but a system library it loads is not (libGL, offscreen)
        print(f"proctor: Qt could not load a system library: {e}", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
