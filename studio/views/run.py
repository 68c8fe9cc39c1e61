"""The Run dialog: an eval file, its variants, trials and concurrency -> a batch plan.

Everything is loaded and checked here, so a bad eval file is one red line in
the dialog (file and line), never a crash and never a half-started batch.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
    QListWidget, QListWidgetItem, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from engine.batch import BatchPlan
from engine.config import Config, find_config, load_config
from engine.spec import EvalFileError, find_eval_files, load_cases


class RunDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, path: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Run an eval file")
        self.setMinimumWidth(560)
        self.plan: BatchPlan | None = None
        self._config: Config | None = None

        self.path = QLineEdit(path, placeholderText="an eval file or a folder of *.eval.py")
        browse = QPushButton("Browse…", clicked=self._browse)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        self.variants = QListWidget()
        self.variants.setMaximumHeight(120)
        self.trials = QSpinBox(minimum=0, maximum=100, value=0, specialValueText="as the eval file says")
        self.concurrency = QSpinBox(minimum=0, maximum=64, value=0, specialValueText="as proctor.toml says")
        self.error = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setStyleSheet("color: #d1453b;")
        self.summary = QLabel(wordWrap=True)

        form = QFormLayout()
        form.addRow("Eval file", row)
        form.addRow("Variants", self.variants)
        form.addRow("Trials per run", self.trials)
        form.addRow("Concurrency", self.concurrency)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.run_button = buttons.addButton("Run", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.path.editingFinished.connect(self._load)
        if path:
            self._load()

    def _browse(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(self, "Eval file", self.path.text(),
                                                "Eval files (*.eval.py *.py)")
        if chosen:
            self.path.setText(chosen)
            self._load()

    def _load(self) -> bool:
        """Load the eval file and its proctor.toml; list the variants."""
        self.error.clear()
        self.variants.clear()
        self._config = None
        text = self.path.text().strip()
        if not text:
            return False
        try:
            files = find_eval_files([text])
            config = load_config(find_config(files[0]))
            cases = load_cases(files)
            variants = config.select_variants(None)
        except EvalFileError as e:
            self.error.setText(str(e))
            return False
        self._config = config
        for variant in variants:
            item = QListWidgetItem(f"{variant.name}  ·  {variant.harness}")
            item.setData(Qt.ItemDataRole.UserRole, variant.name)
            item.setCheckState(Qt.CheckState.Checked)
            self.variants.addItem(item)
        self.summary.setText(f"{len(cases)} cases: " + ", ".join(c.id for c in cases))
        return True

    def selected_variants(self) -> list[str]:
        items = (self.variants.item(i) for i in range(self.variants.count()))
        return [i.data(Qt.ItemDataRole.UserRole) for i in items if i.checkState() == Qt.CheckState.Checked]

    def _accept(self) -> None:
        if not self._load():
            self.error.setText(self.error.text() or "Choose an eval file.")
            return
        names = self.selected_variants()
        if not names:
            self.error.setText("Choose at least one variant.")
            return
        assert self._config is not None
        try:
            files = find_eval_files([self.path.text().strip()])
            self.plan = BatchPlan(cases=load_cases(files), variants=self._config.select_variants(names),
                                  config=self._config, trials=self.trials.value() or None,
                                  concurrency=self.concurrency.value() or None, trigger="studio")
        except EvalFileError as e:
            self.error.setText(str(e))
            return
        self.accept()


def default_eval_path() -> str:
    """The demo suite next to a source checkout, so the first Run has something to run."""
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo"
    return str(demo) if demo.is_dir() else ""
