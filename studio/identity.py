"""The studio's identity on the desktop: the menu entry it belongs to and its icon, so the taskbar,
the dock and Alt-Tab show Proctor rather than a generic window."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QGuiApplication, QIcon

from .assets import asset
from .desktop import DESKTOP_ID, ICON_NAME, ICON_SIZES, ICON_SOURCE


def app_icon() -> QIcon:
    """Proctor's icon at every size shipped, from the files beside the code (not the theme, which
    holds it only once `proctor desktop install` ran)."""
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addFile(str(asset(f"{ICON_SOURCE}/{size}x{size}/apps/{ICON_NAME}.png")), QSize(size, size))
    return icon


def set_desktop_identity(app: QGuiApplication) -> None:
    """Tie the windows to `proctor.desktop` (Wayland's app id; _KDE_NET_WM_DESKTOP_FILE and
    _GTK_APPLICATION_ID on X11) and give them Proctor's icon."""
    QGuiApplication.setDesktopFileName(DESKTOP_ID)
    try:
        app.setWindowIcon(app_icon())
    except FileNotFoundError:  # resources missing: the studio still opens, with the desktop's default icon
        pass
