"""`proctor studio`, registered into the engine's CLI through the `proctor.commands`
entry point, so the engine never imports the studio (or Qt)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The tab names again, as studio/app.py's TABS holds them (a test keeps the two alike):
# `proctor --help` builds this parser, and the CLI must not import Qt to do it.
TABS = ["overview", "timeline", "trajectory", "diff", "evidence", "egress"]
VIEWS = ["browser", *TABS, "compare", "replay"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=Path, help="the SQLite store (default: $PROCTOR_STORE or the user data folder)")
    parser.add_argument("--open", dest="open_id", metavar="ID",
                        help="select a batch or trial by id (two trial ids ID1,ID2: --view compare)")
    parser.add_argument("--view", choices=VIEWS, help="the view to show")
    parser.add_argument("--screenshot", type=Path, metavar="PNG", help="render the window off screen to this PNG and exit")
    parser.add_argument("--size", default="1400x860", help="window size for --screenshot (WxH)")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("studio", help="open the studio (a desktop window over the store)")
    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from .app import run
    except ImportError as e:  # the studio's extra is not installed
        print(f"proctor: the studio needs PySide6 and pyqtgraph ({e}): pip install 'proctor[studio]'",
              file=sys.stderr)
        return 2
    return run(args)
