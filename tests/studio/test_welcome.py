"""The welcome panel (issue 14, item 4): on an empty store the window says what Proctor does,
opens the shipped demo records, runs the demo suite when Docker is ready, and otherwise says
what is missing, with a button for the fix Proctor can run itself.

The diagnoses shown are real ones: the private daemon (ready, or asked for an image it lacks),
a socket nobody listens on, and a socket an unprivileged user may not open.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocumentFragment

from engine.doctor import Diagnosis, Fix, diagnose
from engine.importer import add, prepared
from engine.sandbox import client as discovery
from engine.store import Store
from studio.assets import asset
from studio.views.welcome import DEMO_BUNDLE, WelcomePanel
from tests.engine.test_doctor import NOBODY, ROOT, diagnose_as_nobody

PRIVATE = discovery.PRIVATE_HOST


def shown(panel: WelcomePanel) -> str:
    """What the Docker part of the panel says, as plain text (its message is rich text)."""
    message = QTextDocumentFragment.fromHtml(panel.docker_message.text()).toPlainText()
    return f"{panel.docker_title.text()} {message}"


def plain(message: str) -> str:
    return message.replace("`", "")


@pytest.fixture
def panel(qtbot):
    widget = WelcomePanel(diagnose=lambda: diagnose(PRIVATE))
    qtbot.addWidget(widget)
    widget.resize(640, 600)
    widget.show()
    return widget


@pytest.fixture
def no_permission_socket():
    """A listening socket, root:root 0660, in a folder anyone may enter."""
    if os.geteuid() != 0:
        pytest.skip("making a socket another user may not open needs root")
    folder = Path(tempfile.mkdtemp(prefix="pwel-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "docker.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    path.chmod(0o660)
    try:
        yield path
    finally:
        listener.close()
        path.unlink()
        folder.rmdir()


@pytest.fixture
def no_permission(no_permission_socket):
    """A real diagnosis of a socket its user may not open: uid 65534 at a root:root 0660 socket."""
    return diagnose_as_nobody(DOCKER_HOST=f"unix://{no_permission_socket}")


def test_ready_lets_the_demo_suite_run(docker_client, panel):
    panel.show_diagnosis(diagnose(PRIVATE))
    assert panel.run_demo_button.isEnabled()
    assert "Docker is ready" in shown(panel)
    assert not panel.fix_button.isVisible()


def test_a_missing_base_image_says_how_to_build_it_and_offers_to(docker_client, panel):
    found = diagnose(PRIVATE, image="proctor-no-such-image:welcome")
    assert found.state == "no_image"
    panel.show_diagnosis(found)
    assert not panel.run_demo_button.isEnabled()
    assert plain(found.message) in plain(shown(panel)) and "sudo bash" in shown(panel)
    assert panel.fix_button.isVisible() == (os.geteuid() == 0)
    if os.geteuid() == 0:
        assert panel.fix_button.text() == "Build the base image"


def test_no_daemon_says_how_to_start_one(panel, tmp_path):
    found = diagnose(f"unix://{tmp_path / 'none.sock'}")
    assert found.state == "no_daemon"
    panel.show_diagnosis(found)
    assert not panel.run_demo_button.isEnabled()
    assert "No Docker daemon is running" in shown(panel)
    assert "sudo systemctl start docker" in shown(panel)
    assert not panel.fix_button.isVisible()  # not Proctor's own socket: nothing it can start


def test_no_daemon_at_proctors_socket_offers_to_start_it(panel, tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    private = f"unix://{tmp_path / 'private.sock'}"
    monkeypatch.setattr(discovery, "PRIVATE_HOST", private)
    monkeypatch.setattr(discovery, "CANDIDATES", (f"unix://{tmp_path / 'default.sock'}", private))
    found = diagnose()
    panel.show_diagnosis(found)
    assert panel.fix_button.isVisible() == (os.geteuid() == 0)
    if os.geteuid() == 0:
        assert panel.fix_button.text() == "Start Proctor's Docker daemon"


def test_no_permission_says_to_join_the_docker_group(panel, no_permission):
    assert no_permission.state == "no_permission"
    panel.show_diagnosis(no_permission)
    assert not panel.run_demo_button.isEnabled()
    assert "sudo usermod -aG docker $USER" in shown(panel) and "log out" in shown(panel)
    assert not panel.fix_button.isVisible()  # only an administrator can


def test_the_diagnosis_runs_off_the_gui_thread(qtbot):
    import threading

    threads = []

    def look() -> Diagnosis:
        threads.append(threading.current_thread())
        return diagnose("unix:///nonexistent/docker.sock")

    panel = WelcomePanel(diagnose=look)
    qtbot.addWidget(panel)
    panel.check()
    assert "Checking" in shown(panel)
    qtbot.waitUntil(lambda: panel.diagnosis is not None)
    assert threads and threads[0] is not threading.main_thread()
    assert "No Docker daemon is running" in shown(panel)


def test_a_fix_shows_its_output_live_and_the_diagnosis_is_made_again(qtbot, tmp_path):
    """The fix runs as a QProcess (here a short script standing in for packaging/docker-up):
    its lines appear as they come, the GUI never waits, and Docker is looked at again after."""
    gate = tmp_path / "gate"
    looks: list[int] = []
    fix = Fix(label="Build the base image", argv=["sh", "-c", f"echo building $WORD; while [ ! -e {gate} ];"
                                                   " do sleep 0.05; done; echo built >&2"],
              env={"WORD": "the image"})
    missing = Diagnosis(state="no_image", host="unix:///x", title="The base image is missing",
                        message="Build it with `sudo bash docker-up`.", command="sudo bash docker-up", fix=fix)

    def look() -> Diagnosis:
        looks.append(1)
        return missing

    panel = WelcomePanel(diagnose=look)
    qtbot.addWidget(panel)
    panel.show()
    panel.show_diagnosis(missing)
    qtbot.mouseClick(panel.fix_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "building the image" in panel.output.toPlainText())
    assert panel.output.isVisible() and not panel.fix_button.isEnabled()  # running: one at a time
    assert looks == []
    gate.touch()
    qtbot.waitUntil(lambda: looks == [1], timeout=10_000)
    assert "built" in panel.output.toPlainText() and "exited 0" in panel.output.toPlainText()
    qtbot.waitUntil(panel.fix_button.isEnabled)


# --- in the window --------------------------------------------------------------------------


def demo_batch_id() -> str:
    return prepared(asset(DEMO_BUNDLE)).batches[0].id


def test_the_shipped_demo_bundle_imports_into_an_empty_store(tmp_path):
    """The demo records fit the current schema: a change without `packaging/make-demo` fails."""
    path = asset(DEMO_BUNDLE)
    assert 5_000 < path.stat().st_size < 5_000_000  # small, and not a stub
    portable = prepared(path)
    with Store(tmp_path / "empty.db") as store:
        report = add(store, path, portable)
        [summary] = store.list_batches()
        outcomes = sorted(t.outcome for run in summary.runs for t in run.trials)
    assert report.trials_added == 3 and report.batches_added == 1
    assert outcomes == ["fail", "infra_error", "pass"]  # examples/demo's three cases


def test_an_empty_store_opens_on_the_welcome_panel(make_window, tmp_path, qtbot):
    window = make_window(tmp_path / "empty.db")
    assert window.pages.currentWidget() is window.welcome
    qtbot.waitUntil(lambda: window.welcome.diagnosis is not None, timeout=15_000)


def test_open_the_demo_records_imports_them_and_the_panel_goes(make_window, tmp_path, qtbot):
    window = make_window(tmp_path / "empty.db")
    qtbot.mouseClick(window.welcome.open_demo_button, Qt.MouseButton.LeftButton)
    batch_id = demo_batch_id()
    qtbot.waitUntil(lambda: window.selected_batch == batch_id, timeout=20_000)
    assert window.pages.currentWidget() is not window.welcome
    assert [b.batch_id for b in window.store.list_batches()] == [batch_id]
    assert window.browser.model.rowCount() == 1


def test_a_daemon_that_comes_up_is_seen_without_a_click(docker_client, make_window, tmp_path, qtbot):
    """The status bar polls Docker; when it sees a daemon the panel did not, the panel looks again."""
    window = make_window(tmp_path / "empty.db")
    qtbot.waitUntil(lambda: window.welcome.diagnosis is not None, timeout=15_000)
    window.welcome.show_diagnosis(diagnose(f"unix://{tmp_path / 'none.sock'}"))  # as before it started
    assert not window.welcome.run_demo_button.isEnabled()
    window.docker_status.changed.emit("● Docker", True)
    qtbot.waitUntil(lambda: window.welcome.diagnosis.ready, timeout=15_000)
    assert window.welcome.run_demo_button.isEnabled()


def test_a_store_with_batches_shows_no_welcome(make_window, tmp_path):
    path = asset(DEMO_BUNDLE)
    with Store(tmp_path / "demo.db") as store:
        add(store, path, prepared(path))
    window = make_window(tmp_path / "demo.db")
    assert window.pages.currentWidget() is window.normal_page


def test_the_panel_comes_back_once_every_batch_is_deleted(make_window, tmp_path, qtbot):
    path = asset(DEMO_BUNDLE)
    with Store(tmp_path / "demo.db") as store:
        add(store, path, prepared(path))
    window = make_window(tmp_path / "demo.db")
    assert window.pages.currentWidget() is window.normal_page
    window.store.delete_batches([demo_batch_id()])
    window.store.flush()
    window.browser.model.refresh()
    qtbot.waitUntil(lambda: window.pages.currentWidget() is window.welcome, timeout=10_000)


@pytest.mark.slow
def test_run_the_demo_suite_runs_it_in_docker(docker_client, make_window, tmp_path, qtbot):
    window = make_window(tmp_path / "empty.db")
    qtbot.waitUntil(lambda: window.welcome.diagnosis is not None, timeout=15_000)
    assert window.welcome.diagnosis.ready, window.welcome.diagnosis.message
    with qtbot.waitSignal(window.bridge.batch_finished, timeout=180_000) as finished:
        qtbot.mouseClick(window.welcome.run_demo_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: window.selected_batch is not None, timeout=30_000)
        assert window.pages.currentWidget() is not window.welcome
    batch_id, error = finished.args
    assert not error and window.selected_batch == batch_id
    summary = window.store.batch_summary(batch_id)
    outcomes = sorted(t.outcome for run in summary.runs for t in run.trials)
    assert summary.trigger == "studio" and outcomes == ["fail", "infra_error", "pass"]


def test_the_status_bar_says_what_the_panel_says_when_the_socket_refuses(no_permission_socket):
    """The status bar's Docker line uses the same diagnosis: a user outside the docker group is
    told to join it, not to start a daemon that is running."""
    code = "from studio.views.status import DockerStatus; print(DockerStatus.check()[0])"
    result = subprocess.run([*NOBODY, sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={"PATH": os.environ["PATH"], "HOME": "/tmp",
                                             "QT_QPA_PLATFORM": "offscreen",
                                             "DOCKER_HOST": f"unix://{no_permission_socket}"})
    assert result.returncode == 0, result.stderr
    assert "sudo usermod -aG docker $USER" in result.stdout
    assert "systemctl start docker" not in result.stdout
