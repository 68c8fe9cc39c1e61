"""The status bar's Docker line: `● Docker 27.3 · 2 sandboxes running`, or the command that
starts it; and, while the studio drives a cluster batch, the cluster's line: `Ray · 2 nodes ·
5 of 8 slots free`, each node in its tooltip. Both polled off the GUI thread, since a daemon or
a head that hangs would freeze the window."""

from __future__ import annotations

import threading

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel

from engine.cluster.status import ClusterStatus, cluster_status
from engine.doctor import diagnose
from engine.sandbox.client import connect
from engine.text import plural
from studio import theme
from studio.assets import asset

DOCKER_POLL_S = 5.0
CLUSTER_POLL_S = 3.0  # free slots move as trials start and end


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


class ClusterStatusLabel(QLabel):
    """Hidden unless this process is connected to a Ray cluster (the studio drives a cluster
    batch); then the cluster's one line, the nodes in its tooltip. `changed` carries each look
    (a ClusterStatus, or None), for the batch Overview's live free slots."""

    changed = Signal(object)

    def __init__(self, store: object | None = None, watch: bool = True) -> None:
        super().__init__()
        self.store = store  # names the trials running on each node
        self.status: ClusterStatus | None = None
        self.setMinimumWidth(1)  # gives way as Docker's line does; whole in the tooltip
        self.hide()
        self.changed.connect(self._show)
        self._stop = threading.Event()
        if watch:
            threading.Thread(target=self._watch, name="cluster-status", daemon=True).start()

    def check(self) -> ClusterStatus | None:
        return cluster_status(self.store)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.changed.emit(self.check())
            self._stop.wait(CLUSTER_POLL_S)

    def _show(self, status: ClusterStatus | None) -> None:
        self.status = status
        self.setVisible(status is not None)
        if status is None:
            return
        trouble = status.error is not None or not status.alive
        self.setText(f"{'○' if trouble else '●'} {status.line()}")  # as Docker's line says its state
        self.setToolTip(status.detail())
        self.setStyleSheet(f"color: {theme.OUTCOME_COLOUR['fail']};" if trouble else "")

    def stop(self) -> None:
        self._stop.set()
