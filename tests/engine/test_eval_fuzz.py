"""Fuzzing what a user writes (issue 8, item 13): eval-file options and proctor.toml.

Whatever the value, loading ends in cases or a config, or in one `EvalFileError`
line naming the file (and, for an eval file, the decorator's line); never in
another exception. The nastiest inputs then go through `proctor run` in-process:
exit 2, one line on stderr, and no batch in the store (loading comes before it).
No Docker: every input here fails before the engine starts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.cli import main
from engine.config import Config, load_config
from engine.spec import MAX_MESSAGE, Case, EvalFileError, evaluation, load_eval_file
from engine.store import Store

FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
OPTIONS = list(evaluation.__kwdefaults__)

# --- eval options -------------------------------------------------------------------------------

# Values near the valid ones, so that both outcomes are reached, and the classic traps.
NEAR = ["15m", "1h30m", "500ms", "99999999999h", "9" * 400 + "s", "4g", "512m", "9" * 400 + "g",
        "pypi.org", "*.pythonhosted.org", "https://pypi.org", "API_KEY", "1BAD", "NOT A NAME",
        "echo hi", "agent", "root", "proctor-test-base:bookworm", "", " ", "\x00", "\ud800",
        "x" * 300, "*.", "../x", "/etc/passwd", ".", "a.txt", "\n"]
EVAL_FILE = """\
import math
from pathlib import Path

from engine import Dockerfile, Install, Secret, Step, evaluation, git


class Weird:
    def __repr__(self):
        raise RuntimeError("no repr")

    def __eq__(self, other):
        raise RuntimeError("no eq")

    __hash__ = object.__hash__


LOOP = []
LOOP.append(LOOP)
BIG = 10 ** 400

@evaluation({options})
def fuzzed(c):
    pass
"""
DECORATOR_LINE = EVAL_FILE.splitlines().index("@evaluation({options})") + 1

scalar = st.one_of(
    st.integers().map(repr), st.sampled_from(["10**30", "-1", "0", "True", "False", "None", "BIG"]),
    st.floats().map(lambda x: f"float({str(x)!r})"), st.sampled_from(["math.inf", "math.nan", "1e-9"]),
    st.text(max_size=20).map(repr), st.binary(max_size=8).map(repr), st.sampled_from(NEAR).map(repr),
    st.sampled_from(["Path('.')", "Path('missing.txt')", "Path('/dev/null')", "Weird()", "LOOP",
                     "object()", "print", "{1, 2}", "lambda: 1", "..."]),
)


def _call(name: str, *args: str, **kwargs: str) -> str:
    return f"{name}({', '.join([*args, *(f'{k}={v}' for k, v in kwargs.items())])})"


def _values(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    keys = st.one_of(st.sampled_from(NEAR).map(repr), st.integers(-3, 3).map(repr), st.just("None"))
    return st.one_of(
        st.lists(children, max_size=4).map(lambda xs: f"[{', '.join(xs)}]"),
        st.lists(children, max_size=3).map(lambda xs: f"({''.join(x + ', ' for x in xs)})"),
        st.dictionaries(keys, children, max_size=3).map(
            lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"),
        st.builds(lambda a, b: _call("Step", a, timeout=b), children, children),
        st.builds(lambda a, b: _call("Secret", hosts=a, env=b), children, children),
        st.builds(lambda a: _call("Secret", a), children),
        st.builds(lambda a, b: _call("Install", a, b), children, children),
        st.builds(lambda a: _call("Dockerfile", a), children),
        st.builds(lambda a, b: _call("git", init=a, ref=b), children, children),
        st.builds(lambda a, b: _call("git", a, ref=b), children, children),
    )


value = st.recursive(scalar, _values, max_leaves=8)
options = st.dictionaries(st.sampled_from(OPTIONS), value, max_size=4)


@pytest.fixture
def eval_files(tmp_path, monkeypatch):
    """Each example its own file name: no stale bytecode, no module shared between examples."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    counter = itertools.count()

    def load(source: str) -> tuple[Path, list[Case] | EvalFileError]:
        path = tmp_path / f"fuzz{next(counter)}.eval.py"
        path.write_text(source)
        try:
            return path, load_eval_file(path.resolve())
        except EvalFileError as e:
            return path, e
        finally:
            sys.modules.pop("proctor_eval_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12], None)

    return load


def assert_one_line(error: EvalFileError, prefix: str) -> None:
    text = str(error)
    assert text.startswith(prefix), text
    assert "\n" not in text and "\r" not in text, text
    assert len(text) <= len(str(error.file)) + len(":123456: ") + MAX_MESSAGE, len(text)


@pytest.mark.slow
@FUZZ
@given(options=options)
def test_any_eval_options_give_a_case_or_one_line_at_the_decorator(eval_files, options):
    source = EVAL_FILE.replace("{options}", ", ".join(f"{k}={v}" for k, v in options.items()))
    path, outcome = eval_files(source)
    if isinstance(outcome, EvalFileError):
        # A Weird() whose __repr__ raises inside git() points at that __repr__, also in this file.
        line = r"\d+" if "Weird" in source else str(DECORATOR_LINE)
        assert_one_line(outcome, f"{path.resolve()}:")
        assert re.match(rf"{re.escape(str(path.resolve()))}:{line}: ", str(outcome)), str(outcome)
    else:
        (case,) = outcome
        assert case.id == "fuzzed"
        assert all(isinstance(t, str) and t for t in case.tags)
        assert case.timeout is None or 0 < case.timeout <= 7 * 86400
        assert case.trials is None or (type(case.trials) is int and case.trials >= 1)


def test_the_fuzzer_reaches_both_outcomes(eval_files):
    """Not a test that cannot fail: the template loads, and a trap is refused."""
    _, good = eval_files(EVAL_FILE.replace("{options}", "setup=['echo hi'], tags=['a'], timeout='1m'"))
    assert [c.id for c in good] == ["fuzzed"]
    path, bad = eval_files(EVAL_FILE.replace("{options}", "tags=[Weird(), LOOP]"))
    assert_one_line(bad, f"{path.resolve()}:{DECORATOR_LINE}: tags[0] must be a string")


# --- proctor.toml -------------------------------------------------------------------------------

SECTIONS = {
    "defaults": ["image", "timeout", "concurrency", "trials", "memory", "pids", "cpus", "disk", "user"],
    "variants": ["name", "harness", "command", "model", "base_url", "api_key_env", "max_steps"],
    "judge": ["base_url", "model", "api_key_env", "retries", "timeout"],
    "gateway": ["resolve", "trust", "private"],
    "hosts": ["url", "slots", "tls", "ca_cert", "client_cert", "client_key"],
}
toml_scalar = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.just(10**30), st.booleans(),
    st.floats(), st.text(max_size=20), st.sampled_from(NEAR), st.dates(),
    st.sampled_from(["command", "mini", "https://x.test/v1", "unix:///x.sock", "127.0.0.1:8080", "2m"]),
)
toml_value = st.recursive(toml_scalar, lambda children: st.one_of(
    st.lists(children, max_size=3), st.dictionaries(st.sampled_from(NEAR[:12]), children, max_size=3)),
    max_leaves=6)


def toml_text(value: object) -> str:
    """A value as TOML writes it (strings as JSON, whose escapes TOML shares)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, (int, date)):
        return str(value) if isinstance(value, int) else value.isoformat()
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_text, value)) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_text(v)}" for k, v in value.items()) + "}"


@st.composite
def toml_documents(draw) -> bytes:
    lines: list[str] = []
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "extra"]), max_size=4)):
        keys = st.sampled_from([*SECTIONS.get(section, []), "extra", "path"])
        table = draw(st.dictionaries(keys, toml_value, max_size=5))
        form = draw(st.sampled_from(["table", "array", "inline"]))
        if form == "inline":
            lines.append(f"{section} = {toml_text(table)}")
        else:
            lines.append(f"[[{section}]]" if form == "array" else f"[{section}]")
            lines.extend(f"{json.dumps(k)} = {toml_text(v)}" for k, v in table.items())
    text = "\n".join(lines) + "\n"
    depth = draw(st.sampled_from([0, 0, 50, 300, 5000]))
    if depth:
        text += f"deep = {'[' * depth}{']' * depth}\n"
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):  # a few bytes flipped, inserted or cut
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.binary(max_size=2)) + data[at + draw(st.integers(0, 2)):]
    return data


@pytest.mark.slow
@FUZZ
@given(document=st.one_of(toml_documents(), st.binary(max_size=200)))
def test_any_proctor_toml_gives_a_config_or_one_line(tmp_path, document):
    path = tmp_path / "proctor.toml"
    path.write_bytes(document)
    try:
        config = load_config(path)
    except EvalFileError as e:
        assert_one_line(e, str(path))
    else:
        assert isinstance(config, Config) and config.path == path
        assert 0 < config.defaults.timeout <= 7 * 86400 and config.defaults.concurrency <= 1024


# --- proctor run, end to end (in-process) -----------------------------------------------------------

GOOD_EVAL = "from engine import evaluation\n\n@evaluation({options})\ndef fine(c):\n    pass\n"
GOOD_TOML = b'[[variants]]\nname = "scripted"\ncommand = "true"\n'
NASTIEST = {
    "tags-with-None": ("tags=[1, None]", GOOD_TOML),
    "setup-a-string": ('setup="echo hi"', GOOD_TOML),
    "timeout-nan": ('timeout=float("nan")', GOOD_TOML),
    "secret-hosts-a-string": ('secrets={"K": __import__("engine").Secret(hosts="api.example.test")}', GOOD_TOML),
    "toml-not-utf8": ("", b'[defaults]\nimage = "caf\xe9"\n' + GOOD_TOML),
    "toml-5000-deep": ("", b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n" + GOOD_TOML),
    "toml-huge-concurrency": ("", b"[defaults]\nconcurrency = 1000000000000000000000000000000\n" + GOOD_TOML),
    "toml-timeout-nan": ("", b"[defaults]\ntimeout = nan\n" + GOOD_TOML),
}


@pytest.mark.parametrize(("options", "toml"), NASTIEST.values(), ids=NASTIEST.keys())
def test_proctor_run_refuses_the_nastiest_inputs_with_one_line_and_no_batch(tmp_path, capsys, options, toml):
    suite = tmp_path / "suite"
    suite.mkdir()
    eval_path = suite / "nasty.eval.py"
    eval_path.write_text(GOOD_EVAL.replace("{options}", options))
    (suite / "proctor.toml").write_bytes(toml)
    store = tmp_path / "proctor.db"

    code = main(["run", str(eval_path), "--store", str(store)])

    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"proctor: {suite}/"), err  # names the eval file or proctor.toml
    assert "Traceback" not in err
    if store.exists():  # nothing was started, so nothing is left "running"
        opened = Store(store)
        try:
            assert opened.list_batches() == [] and opened.running_batches() == []
        finally:
            opened.close()
