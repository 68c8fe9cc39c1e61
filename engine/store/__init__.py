"""The SQLite store: batches, runs, trials and their events."""

from .store import ItemRun, Store, StoreError, default_store_path
from .tables import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "ItemRun", "Store", "StoreError", "default_store_path"]
