"""The welcome panel an empty store opens on: what Proctor does, the demo records to open, the
demo suite to run, and Docker's state (engine/doctor.py) with the fix for what is missing.

The diagnosis is made off the GUI thread; a fix Proctor can run itself (packaging/docker-up)
runs as a QProcess whose output is shown as it comes, and Docker is looked at again when it
ends. The window decides what the two demo buttons do (`open_demo`, `run_demo`).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QProcess, QProcessEnvironment, Qt, Signal
from PySide6.QtWidgets import (
    QGridLayout, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QSizePolicy, QVBoxLayout, QWidget,
)

from engine.batch import BatchPlan
from engine.config import find_config, load_config
from engine.doctor import Diagnosis
from engine.spec import find_eval_files, load_cases
from studio import theme
from studio.assets import asset
from studio.off_gui import OffGuiThread
from studio.widgets import MUTED, card, rich

DEMO_BUNDLE = "resources/demo/proctor-demo.zip"  # packaging/make-demo writes it
DEMO_SUITE = "examples/demo"
SUMMARY = ("Proctor runs AI coding agents in Docker sandboxes and records every trial: each command, "
           "file change and check, so you can see what an agent did and why it passed or failed.")
OUTPUT_LINES = 12  # the fix's output box, in lines
READY_COLOUR = theme.OUTCOME_COLOUR["pass"]
MISSING_COLOUR = theme.OUTCOME_COLOUR["fail"]


def demo_plan() -> BatchPlan:
    """The demo suite as the Run dialog would plan it with nothing changed (an EvalFileError if
    it cannot be read)."""
    files = find_eval_files([str(asset(DEMO_SUITE))])
    config = load_config(find_config(files[0]))
    return BatchPlan(cases=load_cases(files), variants=config.select_variants(None), config=config,
                     trigger="studio")


class WelcomePanel(QWidget):
    open_demo = Signal()
    run_demo = Signal()

    def __init__(self, diagnose: Callable[[], Diagnosis], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._diagnose = diagnose
        self.diagnosis: Diagnosis | None = None
        self.process: QProcess | None = None
        self._off_gui = OffGuiThread(self)
        self._checking = False

        title = QLabel("<h2>Welcome to Proctor</h2>")
        summary = QLabel(SUMMARY, wordWrap=True)
        self.open_demo_button = QPushButton("Open the demo records", clicked=lambda: self.open_demo.emit())
        self.run_demo_button = QPushButton("Run the demo suite", clicked=lambda: self.run_demo.emit(),
                                          enabled=False)
        width = max(b.sizeHint().width() for b in (self.open_demo_button, self.run_demo_button))
        buttons = QGridLayout()
        buttons.setHorizontalSpacing(12)
        buttons.setColumnStretch(1, 1)
        for row, (button, note) in enumerate((
                (self.open_demo_button, "Three trials Proctor recorded: a pass, a failed check and a "
                                        "setup that broke. No Docker needed."),
                (self.run_demo_button, f"Runs {DEMO_SUITE} in Docker sandboxes on this machine, "
                                       "in about a minute."))):
            button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
            button.setMinimumWidth(width)
            buttons.addWidget(button, row, 0, Qt.AlignmentFlag.AlignTop)
            buttons.addWidget(QLabel(note, wordWrap=True, styleSheet=MUTED), row, 1)

        self.docker_card, docker = card(None)
        self.docker_title = QLabel()
        self.docker_title.setStyleSheet("font-weight: 600;")
        self.docker_message = QLabel(wordWrap=True, textFormat=Qt.TextFormat.RichText,
                                     textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.fix_button = QPushButton(clicked=self.run_fix, visible=False)
        self.check_button = QPushButton("Check again", clicked=lambda: self.check())
        actions = QHBoxLayout()
        actions.addWidget(self.fix_button)
        actions.addWidget(self.check_button)
        actions.addStretch(1)
        self.output = QPlainTextEdit(readOnly=True, visible=False)
        self.output.setFont(theme.mono_font(-1))
        self.output.setMaximumHeight(self.output.fontMetrics().lineSpacing() * OUTPUT_LINES + 12)
        docker.addWidget(self.docker_title)
        docker.addWidget(self.docker_message)
        docker.addLayout(actions)
        docker.addWidget(self.output)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 18, 24, 18)
        layout.setSpacing(12)
        layout.addWidget(title)
        layout.addWidget(summary)
        layout.addLayout(buttons)
        layout.addSpacing(6)
        layout.addWidget(self.docker_card)
        layout.addStretch(1)
        self._show_checking()

    # --- the diagnosis ----------------------------------------------------------------------

    def check(self, quiet: bool = False) -> None:
        """Look at Docker again, off the GUI thread (a daemon that hangs takes seconds); `quiet`
        keeps what is shown until the answer comes (a look nobody asked for)."""
        if self._checking:
            return
        self._checking = True
        if not quiet or self.diagnosis is None:
            self._show_checking()
        self._off_gui.run(self._diagnose, self._checked)

    def docker_moved(self, ok: bool) -> None:
        """The status bar saw Docker answer (or stop answering): look again when that
        disagrees with what is shown, so a daemon started in a terminal enables the demo."""
        if self.diagnosis is not None and ok != self.diagnosis.ready and self.process is None:
            self.check(quiet=True)

    def _checked(self, result: Diagnosis | Exception) -> None:
        self._checking = False
        if isinstance(result, Exception):  # the check itself failed: say so, in its words
            result = Diagnosis(state="no_daemon", host="?", title="Docker could not be checked",
                               message=f"Docker could not be checked: {result}.")
        self.show_diagnosis(result)

    def _show_checking(self) -> None:
        self.docker_title.setText("○ Checking Docker…")
        self.check_button.setEnabled(False)
        self.run_demo_button.setEnabled(False)

    def show_diagnosis(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis
        ready = diagnosis.ready
        colour = READY_COLOUR if ready else MISSING_COLOUR
        glyph = theme.OUTCOME_GLYPH["pass"] if ready else theme.OUTCOME_GLYPH["fail"]
        self.docker_title.setText(f"{glyph} {diagnosis.title}")
        self.docker_title.setStyleSheet(f"font-weight: 600; color: {colour};")
        self.docker_message.setText(rich(diagnosis.message))
        self.docker_card.setStyleSheet(
            f"QFrame#card {{ background: palette(base); border: 1px solid palette(mid);"
            f" border-radius: 6px; border-left: 4px solid {colour}; }}")
        self.run_demo_button.setEnabled(ready)
        self.run_demo_button.setToolTip("" if ready else "Docker is not ready: see below")
        running = self.process is not None
        self.fix_button.setVisible(diagnosis.fix is not None)
        self.fix_button.setEnabled(not running)
        if diagnosis.fix is not None:
            self.fix_button.setText(diagnosis.fix.label)
            self.fix_button.setToolTip(" ".join(diagnosis.fix.argv))
        self.check_button.setEnabled(not running)

    # --- the fix ----------------------------------------------------------------------------

    def run_fix(self) -> None:
        """Run the diagnosis's fix, its output shown live; Docker is looked at again after."""
        fix = self.diagnosis.fix if self.diagnosis is not None else None
        if fix is None or self.process is not None:
            return
        process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        for name, value in fix.env.items():
            env.insert(name, value)
        process.setProcessEnvironment(env)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        process.readyReadStandardOutput.connect(self._read_output)
        process.finished.connect(self._fix_finished)
        process.errorOccurred.connect(self._fix_failed)
        self.process = process
        self.output.clear()
        self.output.show()
        self.output.appendPlainText(f"$ {' '.join(fix.argv)}")
        self.fix_button.setEnabled(False)
        self.check_button.setEnabled(False)
        process.start(fix.argv[0], fix.argv[1:])

    def _read_output(self) -> None:
        if self.process is not None:
            text = bytes(self.process.readAllStandardOutput().data()).decode(errors="replace")
            if text:
                self.output.appendPlainText(text.rstrip("\n"))

    def _fix_finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._read_output()
        ended = "crashed" if status == QProcess.ExitStatus.CrashExit else f"exited {code}"
        self.output.appendPlainText(f"— {ended}")
        self._done()

    def _fix_failed(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self.process is not None:
            self.output.appendPlainText(f"— could not start: {self.process.errorString()}")
            self._done()

    def _done(self) -> None:
        if self.process is not None:
            self.process.deleteLater()
            self.process = None
        self.check()
