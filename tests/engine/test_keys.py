"""API keys come from the environment, else from the system keyring; a key from the keyring
reaches the judge and the sandbox's gateway like one exported, and never the store.

The keyring is a real one: keyrings.alt's PlaintextKeyring, in a temporary data folder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyrings.alt.file import PlaintextKeyring

from engine import keys
from engine.config import JudgeConfig
from engine.judge import ask_judge
from tests.engine.test_trial_docker import AGENT_FILES, HEADER, WRITES_GREET, judge_server, one  # noqa: F401
from tests.make_store import store_bytes

NAME = "PROCTOR_TEST_KEYRING_KEY"
VALUE = "kr-" + "Vq7Lm2Xp9Rt4Wz8Nc3Hd"


@pytest.fixture
def file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real keyring backend whose file lives in tmp: the user's own keyring is never touched."""
    data = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    before = keyring.get_keyring()
    backend = PlaintextKeyring()
    keyring.set_keyring(backend)
    assert Path(backend.file_path).is_relative_to(data)
    yield data
    keyring.set_keyring(before)


def test_the_environment_wins_then_the_keyring_then_none(file_keyring, monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    assert keys.get(NAME) is None and keys.source(NAME) is None
    keys.set(NAME, VALUE)
    assert keys.get(NAME) == VALUE and keys.source(NAME) == "keyring"
    assert "[proctor]" in (file_keyring / "python_keyring" / "keyring_pass.cfg").read_text()  # the temp one
    monkeypatch.setenv(NAME, "from-env")
    assert keys.get(NAME) == "from-env" and keys.source(NAME) == "environment"
    assert keys.get(NAME, environ={}) == VALUE  # a trial's own host environment, without it
    monkeypatch.setenv(NAME, "")  # set but empty is no key
    assert keys.get(NAME) == VALUE
    keys.delete(NAME)
    keys.delete(NAME)  # twice: nothing to forget is no error
    assert keys.get(NAME) is None


def test_an_empty_key_is_not_saved(file_keyring):
    with pytest.raises(ValueError):
        keys.set(NAME, "")


def test_a_broken_keyring_is_no_key_and_one_sentence_when_saving(monkeypatch):
    from keyring.backends.fail import Keyring as NoKeyring

    before = keyring.get_keyring()
    keyring.set_keyring(NoKeyring())
    try:
        monkeypatch.delenv(NAME, raising=False)
        assert keys.get(NAME) is None
        with pytest.raises(keys.KeyringUnavailable, match=f"could not save {NAME}.*export it"):
            keys.set(NAME, VALUE)
    finally:
        keyring.set_keyring(before)


def test_the_judge_takes_its_key_from_the_keyring(file_keyring, judge_server, monkeypatch):
    url, judge = judge_server
    monkeypatch.delenv(NAME, raising=False)
    keys.set(NAME, VALUE)
    validation = ask_judge(JudgeConfig(base_url=url, model="judge-mini", api_key_env=NAME), "ok", 0.5, {})
    assert validation.status == "passed", validation.evidence
    assert judge.seen[0]["auth"] == f"Bearer {VALUE}"


def test_a_trial_runs_on_keyring_keys_and_the_store_keeps_none(file_keyring, suite, run_eval, store,
                                                               judge_server, monkeypatch):
    url, judge = judge_server
    secret_name, judge_name = NAME, NAME + "_JUDGE"
    judge_value = "krj-" + "Hs6Tq1Bw8Ye3Ku5Pn2Zf"
    for name, value in ((secret_name, VALUE), (judge_name, judge_value)):
        monkeypatch.delenv(name, raising=False)
        keys.set(name, value)
    # The judge repeats its key in its reasoning: the record must still not hold it.
    judge.replies = [json.dumps({"score": 0.9, "reasoning": f"my key is {judge_value}"})]
    from tests.conftest import DEFAULT_TOML
    toml = DEFAULT_TOML + f'\n[judge]\nbase_url = "{url}"\nmodel = "judge-mini"\napi_key_env = "{judge_name}"\n'
    path = suite(HEADER + f"""
@evaluation(workspace=git(init=True), {AGENT_FILES},
            secrets={{"{secret_name}": Secret(hosts=["api.example.test"])}})
def keyed(c):
    c.send("Create greet.py")
    c.exec("printenv {secret_name}").stdout.to_contain("proctor-placeholder-{secret_name}-")
    c.judge("greet.py exists")
""", toml=toml, files={"agent.sh": WRITES_GREET})
    summary, events, records = run_eval(path)
    record = one(summary, records)
    assert record.outcome == "pass", (record.failure, record.validations)
    assert judge.seen[0]["auth"] == f"Bearer {judge_value}"
    raw = store_bytes(store) + "".join(e.model_dump_json() for e in events).encode()
    for value in (VALUE, judge_value):
        assert value.encode() not in raw
        assert value[3:15].encode() not in raw
