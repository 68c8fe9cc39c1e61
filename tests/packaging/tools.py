"""What the packaging tests share: the host tools they need (skipped without them, except in CI,
where .ci/run installs them all and a skip would hide a gap) and a private X server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def unavailable(reason: str) -> None:
    """Skip for want of `reason`; in CI (PROCTOR_REQUIRE_DOCKER=1) fail instead."""
    if os.environ.get("PROCTOR_REQUIRE_DOCKER") == "1":
        pytest.fail(f"needs {reason}")
    pytest.skip(f"needs {reason}")


def need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        unavailable(f"{', '.join(missing)} (.ci/run installs them)")


class Xvfb:
    """A private X server (no TCP): its `display`, its Unix `socket` (what a container's Qt
    connects to), and what its windows say about themselves."""

    def __init__(self, screen: str = "1280x800x24") -> None:
        need("Xvfb")
        read, write = os.pipe()
        self.process = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-nolisten", "tcp",
                                         "-screen", "0", screen], pass_fds=[write],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(write)
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()
        self.display = f":{number}"
        self.socket = Path(f"/tmp/.X11-unix/X{number}")

    def properties(self) -> list[dict[str, str]]:
        """Each top-level window's WM_CLASS, desktop file, pid and whether it has an icon."""
        tree = subprocess.run(["xwininfo", "-root", "-children", "-display", self.display],
                              capture_output=True, text=True, timeout=10).stdout
        windows = []
        for wid in re.findall(r"^\s+(0x[0-9a-f]+) ", tree, re.M):
            said = "".join(subprocess.run(["xprop", "-display", self.display, "-id", wid, "-notype", *more],
                                          capture_output=True, text=True, timeout=10).stdout
                           for more in (["WM_CLASS", "_KDE_NET_WM_DESKTOP_FILE", "_NET_WM_PID"],
                                        ["-len", "8", "_NET_WM_ICON"]))  # an icon's pixels run long
            props = dict(re.findall(r"^(\w+)\s*=\s*(.*)$", said, re.M))
            if "WM_CLASS" in props:
                windows.append(props)
        return windows

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
