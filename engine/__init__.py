"""Proctor's engine: runs trials of AI coding agents in Docker sandboxes and
records them in SQLite. No Qt here; usable from a script or a CI job.

An eval file imports its API from here:

    from engine import evaluation, git, Dockerfile, Install, Secret, Step
"""

from .spec import Dockerfile, EvalFileError, Install, Secret, Step, evaluation, git

__all__ = [
    "evaluation", "git", "Dockerfile", "Install", "Secret", "Step", "EvalFileError",
    "Engine", "BatchPlan", "Store", "load_cases", "load_config", "run_batch",
]


def __getattr__(name: str):
    # The heavier parts load on first use, so an eval file's import stays cheap.
    if name in ("Engine", "BatchPlan"):
        from . import batch
        return getattr(batch, name)
    if name == "run_batch":
        from .api import run_batch
        return run_batch
    if name == "Store":
        from .store import Store
        return Store
    if name == "load_cases":
        from .spec import load_cases
        return load_cases
    if name == "load_config":
        from .config import load_config
        return load_config
    raise AttributeError(name)
