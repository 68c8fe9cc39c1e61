"""Exceptions that decide a trial's outcome."""


class Void(Exception):
    """The engine could not give the agent a fair try: the trial is infra_error."""

    def __init__(self, reason: str, where: str | None = None):
        super().__init__(reason)
        self.reason, self.where = reason, where
