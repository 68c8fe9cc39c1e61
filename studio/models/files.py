"""The file list of one diff as a Qt list model: what the Diff panel's left side shows.

Each row is a `FileDiff` (under `FILE_ROLE`); its +/− counts are computed the
first time a row is painted, so a diff of thousands of files lists at once.
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from studio.models.diff import FileDiff

FILE_ROLE = Qt.ItemDataRole.UserRole + 1
STATUS_WORDS = {"added": "new file", "deleted": "deleted", "modified": "modified",
                "renamed": "renamed"}

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()


def file_label(f: FileDiff) -> str:
    """What the file list says about a file, in words (its accessible text)."""
    return f"{f.path}  binary" if f.binary else f"{f.path}  +{f.added} −{f.removed}"


class FileListModel(QAbstractListModel):
    """The files of one diff. Counts are computed when a row is first painted."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[FileDiff] = []

    def set_files(self, files: list[FileDiff]) -> None:
        self.beginResetModel()
        self.files = files
        self.endResetModel()

    def rowCount(self, parent: Index = _ROOT) -> int:
        return 0 if parent.isValid() else len(self.files)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        f = self.files[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return file_label(f)
        if role == Qt.ItemDataRole.ToolTipRole:
            moved = f" (from {f.old_path})" if f.old_path else ""
            counts = "" if f.binary else f" · +{f.added} −{f.removed}"
            return f"{f.path}{moved}\n{STATUS_WORDS[f.status]}{counts}"
        if role == FILE_ROLE:
            return f
        return None
