"""The hits of the browser's full-text search (Store.search), a page at a time.

`SearchHits` is a list model over one query's hits. Each page is read off the GUI
thread; a generation counter drops the answer to a query the user has already
typed past. The hits panel (studio/views/search_hits.py) takes this model and
subscribes to `changed` for its status line.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt, QAbstractListModel, Signal

from engine.store import Store, StoreError
from engine.store.search import QueryError, SearchHit

from ..off_gui import OffGuiThread

PAGE = 20  # hits read at a time; "More" reads the next page
HitRole = Qt.ItemDataRole.UserRole + 1  # the SearchHit itself

Index = QModelIndex | QPersistentModelIndex


def _search(store: Store, query: str, limit: int, offset: int) -> tuple[list[SearchHit], int, str | None]:
    """Off the GUI thread: a page of hits, how many finished trials search cannot find yet and
    why the index cannot take them, if it cannot; while there are some (a run killed between
    a save and its indexing, an older store), they are indexed in the writer's spare time."""
    hits, pending = store.search(query, limit=limit, offset=offset), store.search_pending()
    if not pending:
        return hits, 0, None
    store.start_indexing()
    error = store.index_error
    return hits, pending, None if error is None else str(error)


class SearchHits(QAbstractListModel):
    """One query's hits, newest trials first; `more` while the store may hold further pages."""

    changed = Signal()  # the query, its hits, the error or whether it is reading changed

    def __init__(self, store: Store, parent: QObject | None = None, page: int = PAGE) -> None:
        super().__init__(parent)
        self.store = store
        self.page = page
        self.query = ""
        self.hits: list[SearchHit] = []
        self.error: str | None = None  # a malformed query's sentence, or the store's
        self.more = False
        self.busy = False
        self.unindexed = 0  # finished trials search cannot find yet (an older store being indexed)
        self.index_error: str | None = None  # why the index cannot take them (a full disk)
        self._generation = 0
        self._off_gui = OffGuiThread(self)

    def search(self, query: str) -> None:
        """Start reading the first page of a query's hits; an empty query has none."""
        query = query.strip()
        if query == self.query:
            return
        self._generation += 1
        self.beginResetModel()
        self.query, self.hits, self.error, self.more, self.busy = query, [], None, False, False
        self.endResetModel()
        if query:
            self._read(0)
        else:
            self.changed.emit()

    def fetch_next(self) -> None:
        """Read the next page of hits after those shown."""
        if self.more and not self.busy:
            self._read(len(self.hits))

    def _read(self, offset: int) -> None:
        generation, store, query, page = self._generation, self.store, self.query, self.page
        self.busy = True
        self.changed.emit()
        # One more than a page: whether there is a next page, without counting every hit.
        self._off_gui.run(lambda: _search(store, query, page + 1, offset),
                          lambda result: self._arrived(generation, result))

    def _arrived(self, generation: int, result: tuple[list[SearchHit], int, str | None] | Exception) -> None:
        if generation != self._generation:
            return  # the user typed on: this answers an old query
        self.busy = False
        if isinstance(result, QueryError | StoreError):
            self.error = str(result)
        elif isinstance(result, Exception):
            raise result
        else:
            result, self.unindexed, self.index_error = result
            new = result[:self.page]
            if new:
                self.beginInsertRows(QModelIndex(), len(self.hits), len(self.hits) + len(new) - 1)
                self.hits += new
                self.endInsertRows()
            self.more = len(result) > self.page
        self.changed.emit()

    # --- the list model ------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.hits)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.hits):
            return None
        hit = self.hits[index.row()]
        if role == HitRole:
            return hit
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{hit.case_id} · {hit.variant} #{hit.trial}: {hit.snippet}"
        return None
