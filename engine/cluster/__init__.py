"""Batches over a cluster of machines (issue 15): each trial a Ray task on a node that runs it
with its own Docker daemon and gateway, its events streamed home to the driver's one store.

Ray is the optional extra `proctor[ray]`; nothing here imports it at import time, so the
engine works without it and `[cluster]` says which extra to install."""

from __future__ import annotations


def node_name(node_id: str, node_ip: str) -> str:
    """A node as records (`host`), the status bar and the batch Overview name it: its address
    and the head of Ray's node id, since several nodes may share one machine."""
    return f"{node_ip}/{node_id[:8]}"
