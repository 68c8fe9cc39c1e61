"""The harness registry: a harness is a name, a class and its own options model.

What a user sees: `proctor.toml` keeps its flat `[[variants]]` tables; each
variant's keys beyond `name` and `harness` are checked by that harness's
`Options`, and every mistake is one line at the line to fix. A package adds a
harness through the `proctor.harnesses` entry point, found here through a real
dist-info folder on sys.path, and one Docker trial runs it end to end.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from engine.config import Variant, load_config
from engine.harness import make_harness
from engine.harness.command import CommandHarness
from engine.harness.mini import MiniHarness
from engine.harness.registry import harness_class, harness_names
from engine.spec import EvalFileError


def write(folder: Path, toml: str) -> Path:
    path = folder / "proctor.toml"
    path.write_text(textwrap.dedent(toml).lstrip("\n"))
    return path


def line_of(path: Path, marker: str, nth: int = 1) -> int:
    """The 1-based line of the `nth` line holding `marker`."""
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1) if marker in text]
    return lines[nth - 1]


def config_error(path: Path) -> str:
    with pytest.raises(EvalFileError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "\n" not in text, text
    return text


# --- the registry ----------------------------------------------------------------------------


def test_the_registry_lists_the_built_in_harnesses():
    assert harness_names()[:2] == ["command", "mini"]
    assert harness_class("command") is CommandHarness and harness_class("mini") is MiniHarness


def test_a_variant_holds_its_harness_options_validated_by_that_harness(tmp_path):
    path = write(tmp_path, """
        [[variants]]
        name = "scripted"
        harness = "command"
        command = "sh run.sh"

        [[variants]]
        name = "mini-4o"
        harness = "mini"
        model = "gpt-4o-mini"
        base_url = "https://api.openai.com/v1"
    """)
    scripted, mini = load_config(path).variants
    assert isinstance(scripted.options, CommandHarness.Options) and scripted.options.command == "sh run.sh"
    assert isinstance(mini.options, MiniHarness.Options)
    assert (mini.options.model, mini.options.max_steps, mini.options.api_key_env) == ("gpt-4o-mini", 30, None)
    assert isinstance(make_harness(scripted), CommandHarness) and isinstance(make_harness(mini), MiniHarness)


def test_a_variant_built_in_python_takes_the_same_flat_keys():
    variant = Variant(name="m", harness="mini", model="stand-in", base_url="http://model.test/v1", max_steps=3)
    assert variant.options == MiniHarness.Options(model="stand-in", base_url="http://model.test/v1", max_steps=3)
    assert Variant(name="c", command="true").harness == "command"  # the default harness, as before


# --- mistakes in proctor.toml: one line, at the line to fix ------------------------------------

TWO_VARIANTS = """
    [[variants]]
    name = "scripted"
    harness = "command"
    command = "true"

    [[variants]]
    name = "second"
    {second}
"""


def second(tmp_path: Path, body: str) -> Path:
    """The two variants above, the second's keys after its name being `body`."""
    keys = textwrap.indent(textwrap.dedent(body).strip(), "    ").lstrip()
    return write(tmp_path, TWO_VARIANTS.replace("{second}", keys))


def test_an_unknown_harness_names_the_known_ones_at_its_own_line(tmp_path):
    path = second(tmp_path, """
        harness = "codex-magic"
        command = "true"
    """)
    assert config_error(path) == (f"{path}:{line_of(path, 'harness', 2)}: "
                                  "variants[1].harness must be 'command', 'mini', 'claude-code', 'codex' or 'gemini-cli', not 'codex-magic'")


def test_an_option_of_another_harness_is_refused_naming_this_harness_options(tmp_path):
    """`max_steps` means nothing to a command agent: taking it silently would let a user think
    they had bounded the agent. It is an error, like any key no harness knows."""
    path = second(tmp_path, """
        harness = "command"
        command = "true"
        max_steps = 5
    """)
    assert config_error(path) == (f"{path}:{line_of(path, 'max_steps')}: variants[1].max_steps is not an "
                                  "option of the command harness (its options: command)")


def test_a_misspelt_option_names_the_harness_options(tmp_path):
    path = second(tmp_path, """
        harness = "mini"
        modle = "gpt-4o-mini"
        base_url = "https://api.openai.com/v1"
    """)
    assert config_error(path) == (f"{path}:{line_of(path, 'modle')}: variants[1].modle is not an option of "
                                  "the mini harness (its options: model, base_url, api_key_env, max_steps)")


def test_a_missing_option_is_named_at_its_variant(tmp_path):
    path = second(tmp_path, """
        harness = "mini"
        base_url = "https://api.openai.com/v1"
    """)
    assert config_error(path) == (f"{path}:{line_of(path, '[[variants]]', 2)}: "
                                  "variant 'second' uses the mini harness but has no model")


def test_a_wrong_option_value_is_at_the_line_of_its_own_variant(tmp_path):
    path = write(tmp_path, """
        [[variants]]
        name = "small"
        harness = "mini"
        model = "m"
        base_url = "https://x.test/v1"
        max_steps = 5

        [[variants]]
        name = "zero"
        harness = "mini"
        model = "m"
        base_url = "https://x.test/v1"
        max_steps = 0
    """)
    assert config_error(path) == (f"{path}:{line_of(path, 'max_steps', 2)}: "
                                  "variants[1].max_steps must be at least 1, not 0")


@pytest.mark.parametrize("value", ["5", "[\"mini\"]", "{ name = \"mini\" }"])
def test_a_harness_that_is_no_name_is_one_line(tmp_path, value):
    path = second(tmp_path, f'harness = {value}\ncommand = "true"')
    text = config_error(path)
    assert text.startswith(f"{path}:{line_of(path, 'harness', 2)}: variants[1].harness must be "), text


# --- a harness from another package ------------------------------------------------------------

PLUGIN = '''
"""A harness from another package: the command protocol under its own name and option."""
from pydantic import field_validator
from pydantic_core import PydanticCustomError

from engine.harness.command import CommandHarness
from engine.harness.registry import HarnessOptions


class ScriptHarness(CommandHarness):
    class Options(HarnessOptions):
        script: str

    def __init__(self, options: Options):
        super().__init__(CommandHarness.Options(command=f"sh {options.script}"))


class CheckedHarness(ScriptHarness):
    """Its options raise PydanticCustomError: a type of its own, and pydantic's without its context."""

    class Options(HarnessOptions):
        script: str

        @field_validator("script")
        @classmethod
        def _shell(cls, v: str) -> str:
            if not v:  # pydantic's own type, without the context pydantic gives it
                raise PydanticCustomError("value_error", "must name a script")
            if not v.endswith(".sh"):
                raise PydanticCustomError("not_a_script", "must name a .sh file, as {what} does not",
                                          {"what": "this"})
            return v


class NoOptions:
    pass
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package installed on sys.path as pip would: its module and a dist-info with entry points."""
    site = tmp_path / "site"
    info = site / "proctor_script_harness-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "proctor_script_harness.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: proctor-script-harness\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[proctor.harnesses]\n"
        "script = proctor_script_harness:ScriptHarness\n"
        "checked = proctor_script_harness:CheckedHarness\n"
        "optionless = proctor_script_harness:NoOptions\n"
        "gone = proctor_script_harness_gone:Harness\n"
        "command = proctor_script_harness:ScriptHarness\n")  # a built-in's name is not taken over
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop("proctor_script_harness", None)


def test_a_registered_harness_is_listed_and_validates_its_own_options(plugin, tmp_path):
    assert harness_names() == ["command", "mini", "claude-code", "codex", "gemini-cli", "checked", "gone", "optionless", "script"]
    assert harness_class("command") is CommandHarness
    path = write(tmp_path, """
        [[variants]]
        name = "plugged"
        harness = "script"
        script = "run.sh"
    """)
    [variant] = load_config(path).variants
    harness = make_harness(variant)
    assert type(harness).__name__ == "ScriptHarness" and harness.command == "sh run.sh"

    path = second(tmp_path, 'harness = "script"\ncommand = "true"')
    assert config_error(path) == (f"{path}:{line_of(path, 'command', 3)}: variants[1].command is not an "
                                  "option of the script harness (its options: script)")
    path = second(tmp_path, 'harness = "scrpt"')
    assert config_error(path) == (f"{path}:{line_of(path, 'harness', 2)}: variants[1].harness must be "
                                  "'command', 'mini', 'claude-code', 'codex', 'gemini-cli', 'checked', 'gone', 'optionless' or 'script', not 'scrpt'")


@pytest.mark.parametrize(("name", "why"), [
    ("gone", "'gone' could not be loaded (ModuleNotFoundError: No module named "
             "'proctor_script_harness_gone'): reinstall the package that registers it"),
    ("optionless", "'optionless' (proctor_script_harness:NoOptions) declares no Options model"),
])
def test_a_registered_harness_that_cannot_load_is_one_line(plugin, tmp_path, name, why):
    path = second(tmp_path, f'harness = "{name}"')
    assert config_error(path) == f"{path}:{line_of(path, 'harness', 2)}: variants[1].harness {why}"


@pytest.mark.parametrize(("value", "says"), [
    ("run.txt", "is wrong: must name a .sh file, as this does not, not 'run.txt'"),
    ("", "must name a script"),
])
def test_a_plugin_options_custom_error_is_one_line_at_its_key(plugin, tmp_path, value, says):
    path = second(tmp_path, f'harness = "checked"\nscript = "{value}"')
    assert config_error(path) == f"{path}:{line_of(path, 'script =')}: variants[1].script {says}"


def test_a_plugin_harness_is_looked_up_once_not_for_every_trial(plugin, tmp_path, monkeypatch):
    """Finding a plugin scans every installed package's entry points: once, not per trial."""
    from engine.harness import registry

    [variant] = load_config(write(tmp_path, """
        [[variants]]
        name = "plugged"
        harness = "script"
        script = "run.sh"
    """)).variants
    scans: list[str] = []
    scan = registry.entry_points
    monkeypatch.setattr(registry, "entry_points", lambda **kw: scans.append(kw["group"]) or scan(**kw))
    harnesses = [make_harness(variant) for _ in range(3)]
    assert [type(h).__name__ for h in harnesses] == ["ScriptHarness"] * 3
    assert len(scans) <= 1, scans


@pytest.mark.slow
def test_a_registered_harness_runs_a_trial_end_to_end(plugin, suite, run_eval):
    path = suite("""
        from pathlib import Path
        from engine import evaluation

        @evaluation(files={".agent/run.sh": Path("agent.sh")})
        def plugged(c):
            turn = c.send("say hello")
            assert turn.final_message == "hello from the plugin"
            c.exec("test -f hello.txt").to_succeed()
    """, toml="""
        [defaults]
        image = "proctor-test-base:bookworm"
        timeout = "2m"

        [[variants]]
        name = "plugged"
        harness = "script"
        script = ".agent/run.sh"
    """, files={"agent.sh": """
        cat > /dev/null
        echo hi > hello.txt
        echo '{"type":"fileChange","path":"hello.txt","change":"add"}'
        echo '{"type":"message","role":"assistant","text":"hello from the plugin"}'
    """})
    summary, _, records = run_eval(path)
    [run] = summary.runs
    record = records[run.trials[0].id]
    assert record.outcome == "pass", record.failure
    assert record.variant == "plugged"
    [harness_phase] = [p for p in record.phases if p.phase == "harness"]
    assert harness_phase.detail == "script harness · sh .agent/run.sh"
    assert [i.kind for i in record.trajectory] == ["fileChange", "message"]


@pytest.mark.parametrize("name", ["claude-code", "codex", "gemini-cli"])
def test_the_cli_harnesses_take_the_keys_spec_names(name):
    """SPEC.md: the CLI harnesses take version, model, max_turns, args, env, settings and mcp
    (each harness documents which it uses); `mcp` was first written `mcp_servers`."""
    from pydantic import ValidationError

    from engine.harness.registry import harness_class

    options = harness_class(name).Options
    keys = dict(model="m", args=["--x"], env={"A": "1"}, settings={"k": "v"},
                mcp={"docs": {"url": "https://mcp.example.com/mcp"}})
    assert options.model_validate(keys).mcp == keys["mcp"]
    assert {"version", "max_turns"} <= set(options.model_fields)
    with pytest.raises(ValidationError):
        options.model_validate(dict(mcp_servers=keys["mcp"]))
