"""The Run dialog: an eval file or folder, its cases and variants, trials and concurrency -> a batch plan.

Everything is loaded and checked here, so a bad eval file is one red line in
the dialog (file and line), never a crash and never a half-started batch; the
line about the file read before goes with it. Trials and concurrency start at
what the eval file and proctor.toml say, and the plan overrides them only when
they are changed here. The cluster field starts at proctor.toml's `[cluster] address`;
empty runs the batch on this machine, an address puts it in the plan's config as
`proctor run --cluster` does.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
    QListWidget, QListWidgetItem, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

import engine.config as config_module
from engine.batch import MAX_RETRY_VOID, BatchPlan
from engine.config import Config, Variant, find_config, load_config
from engine.spec import MAX_CONCURRENCY, MAX_TRIALS, Case, EvalFileError, find_eval_files, load_cases
from engine.text import plural
from studio.assets import asset
from studio.settings import StudioSettings
from studio.widgets import MUTED

# Why trials stop at MAX_TRIALS (the engine's and `proctor run --trials`' own cap).
TRIALS_CAP = (f"At most {MAX_TRIALS:,} trials per run, as `proctor run --trials`: each trial is a row in the "
              "store before the batch starts, and a sandbox when it runs.")
NAME = Qt.ItemDataRole.UserRole
CLUSTER_HINT = "empty: this machine"
RAY_MISSING = "[cluster] needs Ray, which is not installed: pip install 'proctor[ray]'"


def file_cluster(config: Config) -> str:
    """proctor.toml's `[cluster] address`, or "" (none, or an engine without `[cluster]`)."""
    return str(getattr(getattr(config, "cluster", None), "address", "") or "")


def with_cluster(config: Config, address: str) -> Config:
    """The config a batch runs with: on the cluster at `address`, or on this machine when it is
    empty (a `[cluster]` proctor.toml has is then left out), as `proctor run --cluster` does.
    ValueError in one sentence for an address the engine does not take."""
    cluster_config: Any = getattr(config_module, "ClusterConfig", None)
    if cluster_config is None or "cluster" not in type(config).model_fields:
        if address:
            raise ValueError("this engine runs batches on this machine only: leave Cluster empty")
        return config
    if not address:
        return config.model_copy(update={"cluster": None})
    check = getattr(config_module, "cluster_address", None)
    if check is not None:
        check(address)  # the same words as [cluster] address and --cluster
    if importlib.util.find_spec("ray") is None:
        raise ValueError(RAY_MISSING)
    return config.model_copy(update={"cluster": cluster_config(address=address)})


class RunDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, path: str = "", settings: StudioSettings | None = None):
        super().__init__(parent)
        # Settings' defaults: concurrency, and [[hosts]] and [judge] where proctor.toml has none.
        self.settings = settings or StudioSettings()
        self.setWindowTitle("Run an eval file")
        self.setMinimumWidth(560)
        self.plan: BatchPlan | None = None
        self._config: Config | None = None
        self._cases: list[Case] = []
        self._loaded: str | None = None  # the path the lists were read from
        self._unchecked: set[tuple[str, str]] = set()  # ("case" | "variant", name) the user unticked
        self._file_trials = 0  # the trials spin's value as the files say (0: each case's own)
        self._file_cluster = ""  # proctor.toml's [cluster] address

        self.path = QLineEdit(path, placeholderText="an eval file, or a folder of *.eval.py")
        self.browse_file = QPushButton("File…", clicked=self._browse_file, toolTip="Choose an eval file")
        self.browse_folder = QPushButton("Folder…", clicked=self._browse_folder,
                                         toolTip="Choose a folder: every *.eval.py in it runs")
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(self.browse_file)
        row.addWidget(self.browse_folder)
        self.cases = _checklist()
        self.variants = _checklist()
        self.trials = QSpinBox(minimum=1, maximum=MAX_TRIALS, toolTip=TRIALS_CAP)
        self.trials.setGroupSeparatorShown(True)
        self.trials.setMinimumWidth(self.trials.fontMetrics().horizontalAdvance("10,000") + 40)
        self.trials_note = QLabel(styleSheet=MUTED)
        self.concurrency = QSpinBox(minimum=1, maximum=MAX_CONCURRENCY,
                                    toolTip="Trials running at once, each in its own sandbox")
        self.concurrency_note = QLabel(styleSheet=MUTED)
        self.retry_void = QSpinBox(minimum=0, maximum=MAX_RETRY_VOID, specialValueText="never",
                                   toolTip="Run a void trial (infra_error) again, up to this many times, "
                                           "as a new attempt of the same trial; scored trials never run again")
        self.retry_void_note = QLabel(styleSheet=MUTED)
        self.retry_void.valueChanged.connect(lambda n: self.retry_void_note.setText(
            "a void trial stays void" if n == 0 else
            f"more {'attempt' if n == 1 else 'attempts'} of a void trial at most; a scored one never"))
        self.retry_void.valueChanged.emit(0)
        self.cluster = QLineEdit(placeholderText=CLUSTER_HINT,
                                 toolTip="A Ray cluster to run the trials on, each on a node with a free "
                                         "proctor_slot: auto, HOST:PORT or ray://HOST:10001. Empty runs "
                                         "them here, on this machine's Docker")
        self.cluster.setMinimumWidth(self.cluster.fontMetrics().horizontalAdvance("ray://head.example:10001") + 16)
        self.cluster_note = QLabel(styleSheet=MUTED)
        self.error = QLabel(wordWrap=True, textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setStyleSheet("color: #d1453b;")
        self.summary = QLabel(wordWrap=True)

        form = QFormLayout()
        form.addRow("Eval file or folder", row)
        form.addRow("Cases", self.cases)
        form.addRow("Variants", self.variants)
        form.addRow("Trials per run", _beside(self.trials, self.trials_note))
        form.addRow("Concurrency", _beside(self.concurrency, self.concurrency_note))
        form.addRow("Retry void", _beside(self.retry_void, self.retry_void_note))
        form.addRow("Cluster", _beside(self.cluster, self.cluster_note))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.run_button = buttons.addButton("Run", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.summary)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.path.editingFinished.connect(self._load_if_changed)
        for listing in (self.cases, self.variants):
            listing.itemChanged.connect(self._on_checked)
        self.trials.valueChanged.connect(self._update_summary)
        self.cluster.textChanged.connect(self._update_summary)
        self._load()

    # --- choosing the file ----------------------------------------------------------------

    def _browse_file(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(self, "Eval file", self.path.text(),
                                                "Eval files (*.eval.py);;Python files (*.py)")
        self._choose(chosen)

    def _browse_folder(self) -> None:
        self._choose(QFileDialog.getExistingDirectory(self, "Folder of eval files", self.path.text()))

    def _choose(self, chosen: str) -> None:
        if chosen:
            self.path.setText(chosen)
            self._load()

    def _load_if_changed(self) -> None:
        if self.path.text().strip() != self._loaded:
            self._load()

    def _read(self, text: str) -> tuple[Config, list[Case], list[Variant]]:
        files = find_eval_files([text])
        config = load_config(find_config(files[0]))
        return config, load_cases(files), config.select_variants(None)

    def _load(self) -> bool:
        """Read the eval file(s) and proctor.toml; list the cases and variants, ticked as before."""
        self.error.clear()
        self.summary.clear()
        self._config, self._cases = None, []
        text = self.path.text().strip()
        if text != self._loaded:
            self._unchecked.clear()
        self._loaded = text
        for listing in (self.cases, self.variants):
            listing.blockSignals(True)
            listing.clear()
            listing.blockSignals(False)
        self.run_button.setEnabled(False)
        if not text:
            return False
        try:
            config, cases, variants = self._read(text)
        except EvalFileError as e:
            self.error.setText(str(e))
            return False
        self._config, self._cases = config, cases
        for case in cases:
            self._add(self.cases, "case", case.id, f"{case.id}  ·  {plural(self._case_trials(case), 'trial')}",
                      case.where)
        for variant in variants:
            self._add(self.variants, "variant", variant.name, f"{variant.name}  ·  {variant.harness}")
        self._set_defaults(config, cases)
        self._update_summary()
        return True

    def _add(self, listing: QListWidget, kind: str, name: str, label: str, tip: str = "") -> None:
        item = QListWidgetItem(label)
        item.setData(NAME, name)
        item.setToolTip(tip)
        item.setCheckState(Qt.CheckState.Unchecked if (kind, name) in self._unchecked
                           else Qt.CheckState.Checked)
        listing.blockSignals(True)
        listing.addItem(item)
        listing.blockSignals(False)

    def _case_trials(self, case: Case) -> int:
        assert self._config is not None
        return case.trials or self._config.defaults.trials

    def _set_defaults(self, config: Config, cases: list[Case]) -> None:
        """Trials and concurrency as the files say: one number when every case agrees, else
        "each case's own" (the plan then overrides nothing)."""
        def said(name: str, value: int) -> str:  # a value proctor.toml leaves out is the default
            given = config.path and name in config.defaults.model_fields_set
            return f"proctor.toml says {value:,}" if given else f"the default is {value:,}"

        counts = sorted({self._case_trials(c) for c in cases})
        if len(counts) == 1:
            self.trials.setMinimum(1)
            self.trials.setSpecialValueText("")
            self._file_trials = counts[0]
            own = any(c.trials for c in cases)
            self.trials_note.setText(f"the eval file says {counts[0]:,}" if own else said("trials", counts[0]))
        else:
            self.trials.setMinimum(0)
            self.trials.setSpecialValueText(f"each case's own ({counts[0]:,}–{counts[-1]:,})")
            self._file_trials = 0
            self.trials_note.setText("as the eval file says, or one number for all")
        self.trials.setValue(self._file_trials)
        concurrency, why = self.settings.concurrency_for(config)
        self.concurrency.setValue(concurrency)
        self.concurrency_note.setText(why)
        self._file_cluster = file_cluster(config)
        self.cluster.setText(self._file_cluster)

    # --- what is chosen -------------------------------------------------------------------

    def _on_checked(self, item: QListWidgetItem) -> None:
        kind = "case" if item.listWidget() is self.cases else "variant"
        key = (kind, item.data(NAME))
        if item.checkState() == Qt.CheckState.Checked:
            self._unchecked.discard(key)
        else:
            self._unchecked.add(key)
        self._update_summary()

    def selected_cases(self) -> list[str]:
        return _ticked(self.cases)

    def selected_variants(self) -> list[str]:
        return _ticked(self.variants)

    def _trials_override(self) -> int | None:
        value = self.trials.value()
        return None if value in (0, self._file_trials) else value

    def _update_summary(self) -> None:
        """"2 of 3 cases · 1 variant · 2 runs · 6 trials": what Run would start."""
        if self._config is None:
            return
        chosen = set(self.selected_cases())
        cases = [c for c in self._cases if c.id in chosen]
        variants = self.selected_variants()
        override = self._trials_override()
        trials = sum(override or self._case_trials(c) for c in cases) * len(variants)

        def some(n: int, total: int, noun: str) -> str:
            return plural(n, noun) if n == total else f"{n:,} of {plural(total, noun)}"

        from_settings = []  # what Settings fill in because proctor.toml says nothing of it
        if not self._config.hosts and self.settings.docker_hosts:
            from_settings.append(f"{plural(len(self.settings.docker_hosts), 'Docker host')} from Settings")
        if self._config.judge is None and self.settings.judge() is not None:
            from_settings.append(f"judge {self.settings.judge_model} from Settings")
        address = self.cluster.text().strip()
        where = [f"on the Ray cluster at {address}"] if address else []
        said = self._file_cluster
        self.cluster_note.setText("" if not said else "proctor.toml says so" if address == said else
                                  f"proctor.toml says {said}" if address else "this machine, not proctor.toml's")
        self.summary.setText(" · ".join([some(len(cases), len(self._cases), "case"),
                                         some(len(variants), self.variants.count(), "variant"),
                                         plural(len(cases) * len(variants), "run"), plural(trials, "trial"),
                                         *where, *from_settings]))
        self.run_button.setEnabled(bool(cases and variants))

    def _accept(self) -> None:
        if self._config is None:  # the file's own error, if it had one, stays
            self.error.setText(self.error.text() or "Choose an eval file or a folder of them.")
            return
        self.error.clear()
        names, variants = self.selected_cases(), self.selected_variants()
        if not names:
            self.error.setText("Choose at least one case.")
            return
        if not variants:
            self.error.setText("Choose at least one variant.")
            return
        try:  # read again: the file may have been edited since
            config, cases, _ = self._read(self._loaded or "")
            if [c.id for c in cases] != [c.id for c in self._cases]:
                self._load()
                self.error.setText("The eval file changed since it was read: check the cases, then Run.")
                return
            concurrency = self.concurrency.value()
            try:
                config = with_cluster(config, self.cluster.text().strip())
            except ValueError as e:
                self.error.setText(f"Cluster: {e}")
                self.cluster.setFocus()
                return
            self.plan = BatchPlan(
                cases=[c for c in cases if c.id in names], variants=config.select_variants(variants),
                config=self.settings.defaults_for(config), trials=self._trials_override(),
                concurrency=None if concurrency == config.defaults.concurrency else concurrency,
                trigger="studio", retry_void=self.retry_void.value())
        except EvalFileError as e:
            self.summary.clear()
            self.error.setText(str(e))
            return
        self.accept()


def _checklist() -> QListWidget:
    listing = QListWidget()
    listing.setMaximumHeight(120)
    return listing


def _ticked(listing: QListWidget) -> list[str]:
    items = (listing.item(i) for i in range(listing.count()))
    return [i.data(NAME) for i in items if i.checkState() == Qt.CheckState.Checked]


def _beside(spin: QSpinBox, note: QLabel) -> QHBoxLayout:
    row = QHBoxLayout()
    row.addWidget(spin)
    row.addWidget(note, 1)
    return row


def default_eval_path() -> str:
    """The demo suite shipped beside the code (a checkout, a wheel, the one-folder build), so
    the first Run has something to run."""
    try:
        demo = asset("examples/demo")
    except FileNotFoundError:
        return ""
    return str(demo) if demo.is_dir() else ""
