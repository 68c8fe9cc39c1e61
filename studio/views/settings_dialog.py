"""The Settings dialog (File → Settings…, Ctrl+,): store location, Docker hosts, judge, concurrency,
theme, and API keys.

Settings are checked as a whole on OK: a wrong value is one red line naming it and
nothing is saved. The theme applies as soon as it is chosen (Cancel puts the old one
back). API keys go to the system keyring through engine.keys, never into QSettings:
a saved key is never shown again, only whether one is there, and a key the
environment sets is shown as such (the environment wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
    QLineEdit, QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from engine import keys
from engine.spec import MAX_CONCURRENCY

from .. import theme
from ..settings import SettingsError, StudioSettings, store_location
from ..widgets import MUTED

THEMES = {"system": "Follow the desktop", "light": "Light", "dark": "Dark"}
# The variables the built-in harnesses and the judge read by default (SPEC.md).
KNOWN_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")
KEY_NAMES = "settings/key_names"  # names only, never values: which other keys the dialog lists
ERROR_STYLE = "color: #e5534b; font-weight: 600;"  # readable on light and dark alike


@dataclass
class KeyRow:
    name: str
    value: QLineEdit
    state: QLabel
    forget: QPushButton


class SettingsDialog(QDialog):
    def __init__(self, qsettings: QSettings, parent: QWidget | None = None, store_path: Path | None = None):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(620)
        self.qsettings = qsettings
        self.saved = StudioSettings.load(qsettings)
        self._theme_before = self.saved.theme
        s = self.saved

        default = store_location(None, StudioSettings(), environ={})[0]
        self.store = QLineEdit(str(s.store or ""), placeholderText=f"{_short(default)} (the default)")
        choose = QPushButton("Choose…", clicked=self._choose_store)
        store_row = QHBoxLayout()
        store_row.addWidget(self.store, 1)
        store_row.addWidget(choose)
        self.store_note = QLabel(wordWrap=True, styleSheet=MUTED)
        self.store_note.setText(self._store_note(store_path))
        self.hosts = QPlainTextEdit(plainText="\n".join(s.docker_hosts),
                                    placeholderText="unix:///var/run/docker.sock\ntcp://build-box:2376")
        self.hosts.setFixedHeight(self.hosts.fontMetrics().lineSpacing() * 3 + 14)
        hosts_note = QLabel("One per line. Runs started here use them when the eval's proctor.toml names "
                            "no [[hosts]]; none: DOCKER_HOST, else the local daemon.",
                            wordWrap=True, styleSheet=MUTED)
        self.judge_url = QLineEdit(s.judge_base_url, placeholderText="https://api.openai.com/v1")
        self.judge_model = QLineEdit(s.judge_model, placeholderText="gpt-4o-mini")
        self.judge_key = QLineEdit(s.judge_api_key_env, placeholderText="OPENAI_API_KEY (empty: no key)")
        judge_note = QLabel("For runs started here whose proctor.toml has no [judge].", styleSheet=MUTED)
        self.concurrency = QSpinBox(minimum=0, maximum=MAX_CONCURRENCY)
        self.concurrency.setSpecialValueText("as proctor.toml says (else 4)")
        self.concurrency.setValue(s.concurrency or 0)
        self.theme = QComboBox()
        for value, label in THEMES.items():
            self.theme.addItem(label, value)
        self.theme.setCurrentIndex(list(THEMES).index(s.theme))
        self.theme.currentIndexChanged.connect(lambda _i: theme.apply(self.theme.currentData()))

        form = QFormLayout()
        form.addRow("Store location", store_row)
        form.addRow("", self.store_note)
        form.addRow("Docker hosts", self.hosts)
        form.addRow("", hosts_note)
        form.addRow("Judge endpoint", self.judge_url)
        form.addRow("Judge model", self.judge_model)
        form.addRow("Judge key variable", self.judge_key)
        form.addRow("", judge_note)
        form.addRow("Default concurrency", self.concurrency)
        form.addRow("Theme", self.theme)

        self.key_rows: list[KeyRow] = []
        self.keys_box = QGroupBox(f"API keys · saved in the system keyring ({keys.backend()}), "
                                  "never in a file of Proctor's")
        self.keys_form = QFormLayout(self.keys_box)
        for name in self._key_names():
            self._add_key_row(name)
        self.new_name = QLineEdit(placeholderText="ANOTHER_API_KEY")
        self.new_value = QLineEdit(placeholderText="its value", echoMode=QLineEdit.EchoMode.Password)
        other = QHBoxLayout()
        other.addWidget(self.new_name)
        other.addWidget(self.new_value, 1)
        self.keys_form.addRow("Another key", other)

        self.error = QLabel(wordWrap=True, styleSheet=ERROR_STYLE,
                            textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.keys_box)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    # --- the store ------------------------------------------------------------------------

    def _choose_store(self) -> None:
        chosen, _ = QFileDialog.getSaveFileName(self, "Store location", self.store.text(),
                                                "Proctor stores (*.db);;All files (*)",
                                                options=QFileDialog.Option.DontConfirmOverwrite)
        if chosen:
            self.store.setText(chosen)

    def _store_note(self, open_now: Path | None) -> str:
        path, source = store_location(None, self.saved)
        note = "Takes effect at the next start."
        if open_now is not None:
            note += f" Open now: {open_now}."
        if source == "$PROCTOR_STORE":
            note += f" $PROCTOR_STORE is set ({path}) and wins over this setting; --store wins over both."
        return note

    # --- API keys -------------------------------------------------------------------------

    def _key_names(self) -> list[str]:
        saved = str(self.qsettings.value(KEY_NAMES, "") or "").split()
        judge = [self.saved.judge_api_key_env] if self.saved.judge_api_key_env else []
        return list(dict.fromkeys([*KNOWN_KEYS, *judge, *saved]))

    def _add_key_row(self, name: str) -> KeyRow:
        value = QLineEdit(echoMode=QLineEdit.EchoMode.Password)
        state = QLabel(styleSheet=MUTED)
        forget = QPushButton("Forget", toolTip=f"Delete {name} from the system keyring")
        row = KeyRow(name, value, state, forget)
        forget.clicked.connect(lambda: self._forget(row))
        line = QHBoxLayout()
        line.addWidget(value, 1)
        line.addWidget(state)
        line.addWidget(forget)
        self.keys_form.insertRow(len(self.key_rows), name, line)
        self.key_rows.append(row)
        self._show_key(row)
        return row

    def _show_key(self, row: KeyRow) -> None:
        source = keys.source(row.name)
        row.value.clear()
        row.value.setEnabled(source != "environment")
        row.value.setPlaceholderText({"environment": "", "keyring": "saved · type to replace"}
                                     .get(source or "", "not set · type to save"))
        row.value.setToolTip("The environment's value is used, and wins over the keyring"
                             if source == "environment" else "")
        row.state.setText({"environment": "from the environment", "keyring": "in the keyring"}.get(source or "", ""))
        row.forget.setVisible(source == "keyring")

    def _forget(self, row: KeyRow) -> None:
        try:
            keys.delete(row.name)
        except keys.KeyringUnavailable as e:
            self.error.setText(str(e))
            return
        self._show_key(row)

    def _save_keys(self) -> bool:
        wanted = [(r.name, r.value.text()) for r in self.key_rows if r.value.text()]
        name, value = self.new_name.text().strip(), self.new_value.text()
        if name or value:
            try:
                StudioSettings.parse({"judge_api_key_env": name})  # the same rule as a variable name
            except SettingsError:
                self.error.setText(f"The key name must be a variable name such as MY_API_KEY, not {name!r}.")
                return False
            if not value:
                self.error.setText(f"Type the value of {name}, or clear its name.")
                return False
            wanted.append((name, value))
        for key_name, key_value in wanted:
            try:
                keys.set(key_name, key_value)
            except keys.KeyringUnavailable as e:
                self.error.setText(str(e))
                return False
        if name:
            names = str(self.qsettings.value(KEY_NAMES, "") or "").split()
            self.qsettings.setValue(KEY_NAMES, " ".join(dict.fromkeys([*names, name])))
        return True

    # --- OK and Cancel --------------------------------------------------------------------

    def values(self) -> dict[str, object]:
        return {"store": self.store.text(), "docker_hosts": self.hosts.toPlainText(),
                "judge_base_url": self.judge_url.text(), "judge_model": self.judge_model.text(),
                "judge_api_key_env": self.judge_key.text(), "concurrency": self.concurrency.value() or None,
                "theme": self.theme.currentData()}

    def _accept(self) -> None:
        self.error.clear()
        try:
            chosen = StudioSettings.parse(self.values())
        except SettingsError as e:
            self.error.setText(str(e))
            return
        if not self._save_keys():
            return
        chosen.save(self.qsettings)
        self.saved = chosen
        self.accept()

    def reject(self) -> None:
        if theme.current_choice() != self._theme_before:
            theme.apply(self._theme_before)
        super().reject()


def _short(path: Path) -> str:
    """A path under the home folder as ~/…, as a user writes it."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def open_settings(window: QWidget) -> bool:
    """File → Settings… on the main window (which holds its QSettings and store); True when saved."""
    store = getattr(window, "store", None)
    dialog = SettingsDialog(window.settings, window, getattr(store, "path", None))  # type: ignore[attr-defined]
    return dialog.exec() == QDialog.DialogCode.Accepted
