"""Settings: they stay across a new QSettings, a wrong one is one line and nothing is saved, the
theme switches the whole studio at once (dark outcome colours readable and distinct), the store
location follows --store, $PROCTOR_STORE, Settings, default; the Run dialog takes its defaults
from them; API keys go to a real keyring, never to the settings file."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QDialog

from engine import keys
from studio import theme
from studio.models.browser import COLUMN
from studio.settings import SettingsError, StudioSettings, store_location
from studio.views.run import RunDialog
from studio.views.settings_dialog import SettingsDialog
from tests.conftest import DEFAULT_TOML
from tests.engine.test_keys import file_keyring  # noqa: F401 (a fixture)

RECORDED = Path(__file__).parents[1] / "data" / "recorded.db"
OUTCOMES = ("pass", "fail", "infra_error", "skipped", "running")


@pytest.fixture
def ini(tmp_path) -> Path:
    return tmp_path / "studio.ini"


@pytest.fixture(autouse=True)
def light_after(qapp):
    yield
    theme.apply("light", qapp)


@pytest.fixture
def dialog(qtbot, ini):
    def make() -> SettingsDialog:
        d = SettingsDialog(QSettings(str(ini), QSettings.Format.IniFormat))
        qtbot.addWidget(d)
        return d
    return make


def test_settings_stay_across_a_new_qsettings(ini, tmp_path):
    chosen = StudioSettings.parse({
        "store": str(tmp_path / "elsewhere.db"), "docker_hosts": "unix:///run/proctor-docker/docker.sock",
        "judge_base_url": "http://127.0.0.1:9/v1", "judge_model": "judge-mini",
        "judge_api_key_env": "JUDGE_KEY", "concurrency": 7, "theme": "dark"})
    chosen.save(QSettings(str(ini), QSettings.Format.IniFormat))
    again = StudioSettings.load(QSettings(str(ini), QSettings.Format.IniFormat))
    assert again == chosen
    assert again.docker_hosts == ["unix:///run/proctor-docker/docker.sock"]  # one host stays a list


def test_a_value_edited_by_hand_falls_back_to_its_default(ini):
    raw = QSettings(str(ini), QSettings.Format.IniFormat)
    raw.setValue("settings/concurrency", "lots")
    raw.setValue("settings/theme", "purple")
    raw.setValue("settings/judge_base_url", "http://127.0.0.1:9/v1")  # and no model
    raw.setValue("settings/docker_hosts", "tcp://build-box:2376")
    raw.sync()
    loaded = StudioSettings.load(QSettings(str(ini), QSettings.Format.IniFormat))
    assert (loaded.concurrency, loaded.theme, loaded.judge()) == (None, "system", None)
    assert loaded.docker_hosts == ["tcp://build-box:2376"]


@pytest.mark.parametrize("field, value, said", [
    ("judge_base_url", "ftp://judge", "The judge endpoint must be an http:// or https:// URL"),
    ("docker_hosts", "unix:///ok.sock\nhttp://nope", "A Docker host must start with unix://"),
    ("store", "relative.db", "The store location must be an absolute path"),
    ("judge_api_key_env", "not a name", "The judge's key variable must be a variable name"),
])
def test_a_wrong_value_is_one_line_and_nothing_is_saved(dialog, ini, field, value, said):
    d = dialog()
    widget = {"judge_base_url": d.judge_url, "docker_hosts": d.hosts, "store": d.store,
              "judge_api_key_env": d.judge_key}[field]
    (widget.setPlainText if field == "docker_hosts" else widget.setText)(value)
    d.judge_model.setText("judge-mini")
    d.judge_url.setText(d.judge_url.text() or "http://127.0.0.1:9/v1")
    d._accept()
    assert d.result() != QDialog.DialogCode.Accepted
    assert d.error.text().startswith(said) and "\n" not in d.error.text()
    assert "settings" not in QSettings(str(ini), QSettings.Format.IniFormat).childGroups()


def test_a_store_location_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(SettingsError, match="must be a file, not the folder"):
        StudioSettings.parse({"store": str(tmp_path)})


def test_the_judge_needs_both_halves():
    with pytest.raises(SettingsError, match="^The judge model is missing: the judge needs both"):
        StudioSettings.parse({"judge_base_url": "http://127.0.0.1:9/v1"})


def test_the_dialog_saves_what_it_shows(dialog, ini, tmp_path):
    d = dialog()
    d.store.setText(str(tmp_path / "mine.db"))
    d.hosts.setPlainText("unix:///a.sock\n\nunix:///a.sock\ntcp://b:2376\n")
    d.concurrency.setValue(6)
    d._accept()
    assert d.result() == QDialog.DialogCode.Accepted and not d.error.text()
    saved = StudioSettings.load(QSettings(str(ini), QSettings.Format.IniFormat))
    assert saved.store == tmp_path / "mine.db" and saved.docker_hosts == ["unix:///a.sock", "tcp://b:2376"]
    assert saved.concurrency == 6


# --- the store location ---------------------------------------------------------------------

def test_the_store_location_is_store_then_environment_then_settings_then_default(tmp_path):
    chosen = StudioSettings(store=tmp_path / "settings.db")
    env = {"PROCTOR_STORE": str(tmp_path / "env.db")}
    assert store_location(tmp_path / "arg.db", chosen, env) == (tmp_path / "arg.db", "--store")
    assert store_location(None, chosen, env) == (tmp_path / "env.db", "$PROCTOR_STORE")
    assert store_location(None, chosen, {}) == (tmp_path / "settings.db", "Settings")
    path, source = store_location(None, StudioSettings(), {})
    assert source == "the default" and path.name == "proctor.db"


@pytest.mark.slow
def test_the_studio_opens_the_store_settings_name_unless_the_environment_names_another(tmp_path):
    """The real start: QSettings("Proctor", "studio") read from a temporary config folder."""
    config = tmp_path / "config"
    StudioSettings(store=tmp_path / "from-settings.db").save(
        QSettings(str(config / "Proctor" / "studio.conf"), QSettings.Format.IniFormat))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PROCTOR_STORE"}
    env.update(XDG_CONFIG_HOME=str(config), QT_QPA_PLATFORM="offscreen")
    command = [sys.executable, "-m", "engine.cli", "studio", "--screenshot", str(tmp_path / "s.png"),
               "--size", "1024x700"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "from-settings.db").exists()
    env["PROCTOR_STORE"] = str(tmp_path / "from-env.db")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "from-env.db").exists()


# --- the theme --------------------------------------------------------------------------------

def _lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour."""
    q = QColor(colour)
    rgb = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (q.redF(), q.greenF(), q.blueF())]
    x = (0.4124 * rgb[0] + 0.3576 * rgb[1] + 0.1805 * rgb[2]) / 0.95047
    y = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    z = (0.0193 * rgb[0] + 0.1192 * rgb[1] + 0.9505 * rgb[2]) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_dark_outcome_colours_read_on_the_dark_background_and_stay_apart(qapp):
    theme.apply("dark", qapp)
    colours = {o: theme.OUTCOME_COLOUR[o] for o in OUTCOMES}
    for outcome, colour in colours.items():
        for background in (theme.DARK_WINDOW, theme.DARK_BASE):
            assert theme.contrast(colour, background) >= 3.0, (outcome, colour, background)
    for (a, ca), (b, cb) in combinations(colours.items(), 2):
        assert math.dist(_lab(ca), _lab(cb)) >= 20, (a, b)  # CIE76: 20 is plainly another colour
    assert theme.contrast("#1f1f1f", theme.OUTCOME_COLOUR["infra_error"]) >= 4.5  # the void pill's text
    assert all(theme.contrast("#ffffff", colours[o]) >= 3.0 for o in ("pass", "fail", "running"))


def test_the_theme_switches_the_palette_and_a_view_at_once(make_window, qtbot, dialog, tmp_path):
    store_path = tmp_path / "recorded.db"
    shutil.copy(RECORDED, store_path)
    window = make_window(store_path)
    qtbot.waitUntil(lambda: window.browser.model.rowCount() > 0)
    model = window.browser.model
    batch = model.index(0, COLUMN["outcome"])
    light_window = QApplication.palette().color(QPalette.ColorRole.Window)
    light = {o: theme.OUTCOME_COLOUR[o] for o in OUTCOMES}
    assert model.data(batch, Qt.ItemDataRole.ForegroundRole).name() == light["fail"]  # 1 pass, 2 fail, 1 void
    light_icon = model.data(model.index(0, 0), Qt.ItemDataRole.DecorationRole).pixmap(16, 16).toImage()

    d = dialog()
    d.theme.setCurrentIndex(d.theme.findData("dark"))  # not yet OK: it shows at once
    assert QApplication.palette().color(QPalette.ColorRole.Window) == QColor(theme.DARK_WINDOW)
    # Each widget gets it with the next turn of the event loop, as a desktop switch does.
    qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Base) == QColor(theme.DARK_BASE),
                    timeout=1000)
    assert theme.is_dark() and light_window.lightness() > 128
    assert theme.OUTCOME_COLOUR["pass"] != light["pass"]
    assert model.data(batch, Qt.ItemDataRole.ForegroundRole).name() == theme.OUTCOME_COLOUR["fail"]
    dark_icon = model.data(model.index(0, 0), Qt.ItemDataRole.DecorationRole).pixmap(16, 16).toImage()
    assert dark_icon != light_icon  # the ✗ drawn again in the dark red
    picture = window.grab().toImage()
    middle = picture.pixelColor(picture.width() // 4, picture.height() - 60)  # the browser's empty rows
    assert middle.lightness() < 80, middle.name()

    d.reject()  # Cancel: the theme chosen before comes back
    assert QApplication.palette().color(QPalette.ColorRole.Window) == light_window
    assert {o: theme.OUTCOME_COLOUR[o] for o in OUTCOMES} == light


def test_the_screenshot_takes_a_theme(tmp_path):
    store_path = tmp_path / "recorded.db"
    shutil.copy(RECORDED, store_path)
    out = tmp_path / "dark.png"
    done = subprocess.run([sys.executable, "-m", "engine.cli", "studio", "--store", str(store_path), "--theme",
                           "dark", "--screenshot", str(out), "--size", "1024x700"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    from PySide6.QtGui import QImage
    image = QImage(str(out))
    corner = image.pixelColor(image.width() - 20, image.height() // 2)
    assert corner.lightness() < 80, corner.name()


# --- the Run dialog ---------------------------------------------------------------------------

EVAL = "from engine import evaluation\n\n@evaluation()\ndef first(c):\n    c.send('one')\n"
NO_CONCURRENCY = DEFAULT_TOML.replace("concurrency = 2\n", "")


def test_the_run_dialog_takes_concurrency_hosts_and_judge_from_settings(qtbot, suite):
    chosen = StudioSettings.parse({"concurrency": 7, "docker_hosts": "unix:///run/proctor-docker/docker.sock",
                                   "judge_base_url": "http://127.0.0.1:9/v1", "judge_model": "judge-mini"})
    d = RunDialog(None, str(suite(EVAL, toml=NO_CONCURRENCY)), settings=chosen)
    qtbot.addWidget(d)
    assert d.concurrency.value() == 7 and d.concurrency_note.text() == "your Settings say 7"
    assert "1 Docker host from Settings" in d.summary.text() and "judge judge-mini from Settings" in d.summary.text()
    d._accept()
    assert d.plan is not None and d.plan.concurrency == 7
    assert [h.url for h in d.plan.config.hosts] == ["unix:///run/proctor-docker/docker.sock"]
    assert d.plan.config.judge is not None and d.plan.config.judge.model == "judge-mini"


def test_proctor_toml_wins_over_settings(qtbot, suite):
    chosen = StudioSettings.parse({"concurrency": 7, "judge_base_url": "http://127.0.0.1:9/v1",
                                   "judge_model": "judge-mini"})
    toml = DEFAULT_TOML + '\n[judge]\nbase_url = "http://127.0.0.1:8/v1"\nmodel = "own"\n'
    d = RunDialog(None, str(suite(EVAL, toml=toml)), settings=chosen)
    qtbot.addWidget(d)
    assert d.concurrency.value() == 2 and d.concurrency_note.text() == "proctor.toml says 2"
    d._accept()
    assert d.plan is not None and d.plan.config.judge.model == "own" and d.plan.concurrency is None


def test_the_window_gives_the_run_dialog_its_settings(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window(tmp_path / "empty.db")
    StudioSettings(concurrency=5).save(window.settings)
    seen = []

    class Seen(RunDialog):
        def exec(self) -> int:
            seen.append(self.settings)
            return QDialog.DialogCode.Rejected

    monkeypatch.setattr("studio.app.RunDialog", Seen)
    window.show_run_dialog()
    assert seen and seen[0].concurrency == 5
    assert window.settings_action.shortcut().toString() == "Ctrl+,"
    assert window.settings_action in window.menuBar().actions()[0].menu().actions()


# --- API keys ---------------------------------------------------------------------------------

def test_keys_go_to_the_keyring_never_the_settings_file(dialog, ini, file_keyring, monkeypatch):  # noqa: F811
    value = "sk-" + "settingsDialog0123456789abcd"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-the-env-0123456789")
    d = dialog()
    rows = {r.name: r for r in d.key_rows}
    assert rows["ANTHROPIC_API_KEY"].state.text() == "from the environment"
    assert not rows["ANTHROPIC_API_KEY"].value.isEnabled()
    assert rows["OPENAI_API_KEY"].value.echoMode() == rows["OPENAI_API_KEY"].value.EchoMode.Password
    assert "saved in the system keyring (file PlaintextKeyring)" in d.keys_box.title()
    rows["OPENAI_API_KEY"].value.setText(value)
    d.new_name.setText("DEMO_API_KEY")
    d.new_value.setText(value + "-demo")
    d._accept()
    assert d.result() == QDialog.DialogCode.Accepted, d.error.text()
    assert keys.get("OPENAI_API_KEY") == value and keys.source("OPENAI_API_KEY") == "keyring"
    assert keys.get("DEMO_API_KEY") == value + "-demo"
    written = ini.read_bytes()
    assert value.encode() not in written and b"settingsDialog" not in written
    assert b"DEMO_API_KEY" in written  # its name, so the next dialog lists it

    again = dialog()
    rows = {r.name: r for r in again.key_rows}
    assert rows["OPENAI_API_KEY"].state.text() == "in the keyring" and rows["OPENAI_API_KEY"].value.text() == ""
    assert "DEMO_API_KEY" in rows
    rows["DEMO_API_KEY"].forget.click()
    assert keys.get("DEMO_API_KEY") is None and rows["DEMO_API_KEY"].state.text() == ""
