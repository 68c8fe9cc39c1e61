"""The status bar's Docker line: `● Docker 27.3 · 2 sandboxes running`, or the command that
starts it. Polled off the GUI thread, since a daemon that hangs would freeze the window."""

from __future__ import annotations

import threading

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel

from engine.doctor import diagnose
from engine.sandbox.client import connect
from engine.text import plural
from studio import theme
from studio.assets import asset

DOCKER_POLL_S = 5.0


class DockerStatus(QLabel):
    changed = Signal(str, bool)

    def __init__(self, watch: bool = True) -> None:
        super().__init__("○ Docker: checking…")
        self.setMinimumWidth(1)  # a long sentence gives way (whole in the tooltip), never widens the window
        self.changed.connect(self._show)
        self._stop = threading.Event()
        if watch:
            threading.Thread(target=self._watch, name="docker-status", daemon=True).start()
        else:  # a screenshot: one look, now
            self._show(*self.check())

    @staticmethod
    def check() -> tuple[str, bool]:
        found = diagnose(docker_up=str(asset("packaging/docker-up")))  # the welcome panel's words
        if found.state in ("no_daemon", "no_permission"):
            return f"○ {found.message}", False
        try:
            client = connect(timeout=5)  # the daemon a run would use, Proctor's own included
            version = client.version().get("Version", "?")
            running = len(client.api.containers(filters={"label": "proctor=1"}))
            client.close()
            sandboxes = plural(running, "sandbox", "sandboxes")
            return f"● Docker {version} · {sandboxes} running", True
        except Exception:
            return ("○ Docker is not reachable: start it with `sudo systemctl start docker` "
                    "or `sudo bash packaging/docker-up`"), False

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.changed.emit(*self.check())
            self._stop.wait(DOCKER_POLL_S)

    def _show(self, text: str, ok: bool) -> None:
        self.setText(text)
        self.setToolTip(text)
        self.setStyleSheet("" if ok else f"color: {theme.OUTCOME_COLOUR['fail']};")

    def stop(self) -> None:
        self._stop.set()
