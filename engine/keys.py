"""API keys: from the environment, else from the system keyring (the `keyring` package).

A key is looked up by the name of its variable (`OPENAI_API_KEY`), under the
keyring service "proctor". The value is handed to whoever asked and goes no
further: nothing here writes it to the store, a log or a settings file, and the
trial adds every value it looks up to its redactor.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Literal

import keyring
from keyring.errors import KeyringError, PasswordDeleteError

SERVICE = "proctor"
Source = Literal["environment", "keyring"]

log = logging.getLogger(__name__)


class KeyringUnavailable(Exception):
    """The keyring cannot keep a key (no backend, locked, refused); the message says so in one line."""


def from_keyring(name: str) -> str | None:
    """The key saved in the keyring under `name`, or None (none saved, or no usable keyring)."""
    try:
        return keyring.get_password(SERVICE, name) or None
    except (KeyringError, RuntimeError, OSError) as e:  # a locked or absent keyring is no key, not a crash
        log.debug("keyring lookup of %s failed: %s", name, type(e).__name__)
        return None


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """`environ[name]` (default os.environ) when set and not empty, else the keyring's, else None."""
    value = (os.environ if environ is None else environ).get(name)
    return value or from_keyring(name)


def source(name: str, environ: Mapping[str, str] | None = None) -> Source | None:
    """Where `get(name)` finds the key: the environment, the keyring, or nowhere (None)."""
    if (os.environ if environ is None else environ).get(name):
        return "environment"
    return "keyring" if from_keyring(name) else None


def set(name: str, value: str) -> None:  # noqa: A001 (the keyring's own verb)
    """Save `value` in the keyring under `name`; KeyringUnavailable when the keyring refuses."""
    if not value:
        raise ValueError("an empty key is not saved: delete it instead")
    try:
        keyring.set_password(SERVICE, name, value)
    except (KeyringError, RuntimeError, OSError) as e:
        raise KeyringUnavailable(f"the system keyring could not save {name} ({_cause(e)}): "
                                 "export it in the environment instead") from None


def delete(name: str) -> None:
    """Forget the keyring's key for `name`; nothing happens when none is saved."""
    try:
        keyring.delete_password(SERVICE, name)
    except PasswordDeleteError:
        pass
    except (KeyringError, RuntimeError, OSError) as e:
        raise KeyringUnavailable(f"the system keyring could not delete {name} ({_cause(e)})") from None


def backend() -> str:
    """The keyring in use, as a user would name it ("SecretService Keyring", "PlaintextKeyring")."""
    chosen = keyring.get_keyring()
    return getattr(chosen, "name", None) or type(chosen).__name__


def _cause(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__
