"""Loading eval files and proctor.toml (no Docker).

Every mistake a user can make in an eval file must end in one `EvalFileError`
whose text starts with `path:LINE:` at the line to fix, so `proctor run` can
print one line and exit 2.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from engine.config import find_config, load_config
from engine.spec import EvalFileError, Git, Step, find_eval_files, load_cases, load_eval_file, parse_duration

# --- helpers -----------------------------------------------------------------------------


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path.resolve()


def line_of(path: Path, marker: str) -> int:
    """The 1-based line of the first line holding `marker`."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def load_error(path: Path) -> EvalFileError:
    with pytest.raises(EvalFileError) as caught:
        load_eval_file(path)
    return caught.value


def assert_points_at(error: EvalFileError, path: Path, line: int, *words: str) -> None:
    text = str(error)
    assert text.startswith(f"{path}:{line}: "), text
    assert "\n" not in text, "the message is one line"
    for word in words:
        assert word in text, text


# --- a good file ---------------------------------------------------------------------------


def test_a_good_file_gives_its_cases_in_file_order_with_their_options(tmp_path):
    (tmp_path / "fixture").mkdir()
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "Dockerfile").write_text("FROM proctor-test-base:bookworm\n")
    (tmp_path / "agent.py").write_text("print('hi')\n")
    path = write(tmp_path / "good.eval.py", """
        from pathlib import Path

        from engine import Dockerfile, Secret, Step, evaluation, git


        @evaluation(
            image="proctor-test-base:bookworm",
            workspace=git(init=True),
            env={"LANG": "C.UTF-8"},
            secrets={"OPENAI_API_KEY": Secret(hosts=["api.openai.com"])},
            allow=["pypi.org"],
            files={"data/input.txt": "hello\\n", "raw.bin": b"\\x00\\x01",
                   ".agent/agent.py": Path("agent.py")},
            rules="Write a test for every function.",
            setup=["python3 -m venv .venv", Step("pip install -e .", timeout="2m")],
            timeout="90s",
            trials=3,
            tags=["smoke"],
        )
        def zeta_first(c):
            c.send("do it")


        @evaluation(workspace="fixture", image=Dockerfile("docker/Dockerfile"))
        def alpha_second(c):
            pass


        @evaluation(workspace=git("repo", ref="main"))
        def middle_third(c):
            pass


        def not_a_case(c):
            pass
    """)

    cases = load_eval_file(path)

    assert [c.id for c in cases] == ["zeta_first", "alpha_second", "middle_third"]  # file order, not a-z
    first, second, third = cases
    assert first.file == path and first.line == line_of(path, "@evaluation(")
    assert first.where == f"{path}:{first.line}"
    assert first.image == "proctor-test-base:bookworm"
    assert first.workspace == Git(init=True)
    assert first.env == {"LANG": "C.UTF-8"}
    assert first.secrets["OPENAI_API_KEY"].hosts == ("api.openai.com",)
    assert first.allow == ["pypi.org"]
    assert first.files == {"data/input.txt": b"hello\n", "raw.bin": b"\x00\x01",
                           ".agent/agent.py": b"print('hi')\n"}
    assert first.rules == "Write a test for every function."
    assert first.setup == [Step("python3 -m venv .venv"), Step("pip install -e .", timeout=120)]
    assert first.setup[0].timeout == 5 * 60  # the default step timeout
    assert first.timeout == 90
    assert first.trials == 3
    assert first.tags == ["smoke"]

    # Relative paths are relative to the eval file, not to the working folder.
    assert second.workspace == str(tmp_path / "fixture")
    assert second.image.base_dir == tmp_path
    assert third.workspace == Git(str(tmp_path / "repo"), ref="main")
    # Options left out mean "the config's default".
    assert second.timeout is None and second.trials is None and second.setup == []


def test_a_case_body_is_the_decorated_function(tmp_path):
    path = write(tmp_path / "body.eval.py", """
        from engine import evaluation

        @evaluation()
        def says_hi(c):
            return "hi " + c
    """)
    (case,) = load_eval_file(path)
    assert case.body("there") == "hi there"


def test_a_case_bound_to_two_names_is_one_case(tmp_path):
    path = write(tmp_path / "alias.eval.py", """
        from engine import evaluation

        @evaluation()
        def only_case(c):
            pass

        ALIAS = only_case
    """)
    assert [c.id for c in load_cases([path])] == ["only_case"]


# --- mistakes in an eval file ----------------------------------------------------------------


def test_syntax_error_points_at_its_line(tmp_path):
    path = write(tmp_path / "syntax.eval.py", """
        from engine import evaluation


        @evaluation()
        def broken(c):
            c.send("unclosed"
            c.exec("true")  # SYNTAX
    """)
    error = load_error(path)
    assert_points_at(error, path, error.line, "syntax error")
    assert error.line in (line_of(path, 'c.send("unclosed"'), line_of(path, "# SYNTAX"))


def test_unknown_evaluation_option_points_at_the_decorator(tmp_path):
    path = write(tmp_path / "option.eval.py", """
        from engine import evaluation


        @evaluation(imagee="proctor-test-base:bookworm")
        def typo(c):
            pass
    """)
    error = load_error(path)
    assert_points_at(error, path, line_of(path, "imagee="), "imagee")
    assert "unknown option 'imagee' for @evaluation (options: image, workspace" in str(error)


def test_bad_timeout_points_at_the_decorator(tmp_path):
    path = write(tmp_path / "timeout.eval.py", """
        from engine import evaluation


        @evaluation(timeout="fast")
        def slow(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, 'timeout="fast"'), "timeout", "'fast'")


def test_bad_timeout_in_a_multi_line_decorator_points_at_its_first_line(tmp_path):
    path = write(tmp_path / "timeout2.eval.py", """
        from engine import evaluation


        @evaluation(
            image="proctor-test-base:bookworm",
            timeout="fast",
        )
        def slow(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "@evaluation("), "'fast'")


def test_bad_step_timeout_points_at_the_step(tmp_path):
    path = write(tmp_path / "step.eval.py", """
        from engine import Step, evaluation


        @evaluation(
            setup=[
                "true",
                Step("make", timeout="soon"),
            ],
        )
        def builds(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, 'Step("make"'), "Step timeout", "'soon'")


@pytest.mark.parametrize("trials", ["0", "-1", "1.5", "'3'"])
def test_trials_must_be_a_whole_number_of_at_least_one(tmp_path, trials):
    path = write(tmp_path / "trials.eval.py", f"""
        from engine import evaluation


        @evaluation(trials={trials})
        def counted(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "trials="), "trials")


def test_missing_workspace_folder_points_at_the_decorator(tmp_path):
    path = write(tmp_path / "ws.eval.py", """
        from engine import evaluation


        @evaluation(workspace="fixtures/nope")
        def needs_a_folder(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "workspace="), "fixtures/nope", "does not exist")


def test_missing_dockerfile_points_at_the_decorator(tmp_path):
    path = write(tmp_path / "df.eval.py", """
        from engine import Dockerfile, evaluation


        @evaluation(image=Dockerfile("docker/Dockerfile"))
        def builds_an_image(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "Dockerfile("), "docker/Dockerfile", "does not exist")


def test_unreadable_file_content_points_at_the_decorator(tmp_path):
    path = write(tmp_path / "files.eval.py", """
        from pathlib import Path

        from engine import evaluation


        @evaluation(files={"a.txt": Path("missing.txt")})
        def places_a_file(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "files="), "missing.txt")


@pytest.mark.parametrize("files", ['{"/etc/passwd": "x"}', '{"../outside": "x"}'])
def test_files_paths_stay_inside_the_workspace(tmp_path, files):
    path = write(tmp_path / "escape.eval.py", f"""
        from engine import evaluation


        @evaluation(files={files})
        def escapes(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "files="), "relative to the workspace")


def test_name_error_at_module_level_points_at_its_line(tmp_path):
    path = write(tmp_path / "name.eval.py", """
        from engine import evaluation

        AGENT = {".agent/run.sh": agent_script}


        @evaluation(files=AGENT)
        def uses_agent(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "agent_script"), "NameError", "agent_script")


def test_an_exception_in_a_helper_points_at_the_eval_files_line(tmp_path):
    path = write(tmp_path / "helper.eval.py", """
        from engine import evaluation


        def load_prompt():
            return open("no-such-prompt.txt").read()


        PROMPT = load_prompt()
    """)
    # The last line of this file in the traceback: the open() inside the helper.
    assert_points_at(load_error(path), path, line_of(path, "no-such-prompt"), "FileNotFoundError")


def test_a_file_with_no_cases_is_an_error_naming_the_file(tmp_path):
    path = write(tmp_path / "empty.eval.py", """
        from engine import evaluation


        def forgot_the_decorator(c):
            pass
    """)
    # No line to point at: the file is named.
    assert str(load_error(path)) == f"{path}: no @evaluation cases in this file"


def test_a_case_id_defined_twice_in_one_file_points_at_the_second(tmp_path):
    path = write(tmp_path / "twice.eval.py", """
        from engine import evaluation


        @evaluation()
        def same_name(c):
            pass


        @evaluation(trials=2)  # SECOND
        def same_name(c):
            pass
    """)
    error = load_error(path)
    assert_points_at(error, path, line_of(path, "# SECOND"), "'same_name'", "defined twice")
    assert f"line {line_of(path, '@evaluation()')}" in str(error)


def test_a_case_id_defined_in_two_files_points_at_the_second(tmp_path):
    source = """
        from engine import evaluation


        @evaluation()
        def shared_name(c):
            pass
    """
    first = write(tmp_path / "a.eval.py", source)
    second = write(tmp_path / "b.eval.py", "\n\n" + textwrap.dedent(source))
    with pytest.raises(EvalFileError) as caught:
        load_cases([tmp_path])
    error = caught.value
    assert_points_at(error, second, line_of(second, "@evaluation"), "'shared_name'", "defined twice")
    assert f"{first}:{line_of(first, '@evaluation')}" in str(error)  # where the other one is


def test_an_over_long_case_id_is_refused(tmp_path):
    name = "x" * 101
    path = write(tmp_path / "long.eval.py", f"""
        from engine import evaluation


        @evaluation()
        def {name}(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "@evaluation"), "longer than 100")


def test_a_wrong_image_type_points_at_the_decorator(tmp_path):
    path = write(tmp_path / "image.eval.py", """
        from engine import evaluation


        @evaluation(image=42)
        def odd_image(c):
            pass
    """)
    assert_points_at(load_error(path), path, line_of(path, "image=42"), "image")


# --- finding files and choosing cases ------------------------------------------------------------

CASES = """
    from engine import evaluation


    @evaluation()
    def one(c):
        pass


    @evaluation()
    def two(c):
        pass


    @evaluation()
    def three(c):
        pass
"""


def test_a_folder_means_every_eval_file_under_it(tmp_path):
    write(tmp_path / "suite" / "a.eval.py", CASES)
    write(tmp_path / "suite" / "deeper" / "b.eval.py", """
        from engine import evaluation

        @evaluation()
        def four(c):
            pass
    """)
    write(tmp_path / "suite" / "helpers.py", "raise RuntimeError('not an eval file')\n")
    found = find_eval_files([tmp_path / "suite"])
    assert [p.name for p in found] == ["a.eval.py", "b.eval.py"]
    assert all(p.is_absolute() for p in found)
    assert [c.id for c in load_cases([tmp_path / "suite"])] == ["one", "two", "three", "four"]


def test_a_path_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(EvalFileError, match=r"nope\.eval\.py: no such file or folder"):
        find_eval_files([tmp_path / "nope.eval.py"])


def test_a_folder_without_eval_files_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalFileError, match=r"no \*\.eval\.py files found"):
        find_eval_files([tmp_path / "empty"])


def test_case_filter_keeps_file_order(tmp_path):
    path = write(tmp_path / "cases.eval.py", CASES)
    assert [c.id for c in load_cases([path], ["three", "one"])] == ["one", "three"]


def test_case_filter_with_an_unknown_name_lists_the_cases(tmp_path):
    path = write(tmp_path / "cases.eval.py", CASES)
    with pytest.raises(EvalFileError) as caught:
        load_cases([path], ["one", "nope"])
    text = str(caught.value)
    assert "no case named nope" in text
    assert "one, two, three" in text
    assert "\n" not in text


# --- durations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "seconds"), [
    ("15m", 900),
    ("2m30s", 150),
    ("8s", 8),
    ("500ms", 0.5),
    ("1h", 3600),
    ("1h30m", 5400),
    ("1.5s", 1.5),
    (" 90s ", 90),
    (90, 90),
    (2.5, 2.5),
])
def test_parse_duration(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [
    "fast", "", "15", "15 minutes", "m", "10x", "-5s", "0s", "0", 0, -1, True, None,
])
def test_parse_duration_refuses(value):
    with pytest.raises(ValueError, match="^timeout must be"):
        parse_duration(value)


def test_parse_duration_names_what_it_parses():
    with pytest.raises(ValueError, match=r"^step timeout must be a duration such as .*, not 'soon'"):
        parse_duration("soon", "step timeout")


# --- proctor.toml ----------------------------------------------------------------------------------

TOML = """
    [defaults]
    image = "proctor-test-base:bookworm"
    timeout = "2m"
    concurrency = 2

    [[variants]]
    name = "scripted"
    harness = "command"
    command = "sh .agent/run.sh"

    [[variants]]
    name = "mini-4o"
    harness = "mini"
    model = "gpt-4o-mini"
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"

    [judge]
    base_url = "https://api.openai.com/v1"
    model = "gpt-4o-mini"
    api_key_env = "OPENAI_API_KEY"
"""


def config_error(path: Path) -> str:
    with pytest.raises(EvalFileError) as caught:
        load_config(path)
    return str(caught.value)


def test_config_next_to_the_eval_file_is_found_and_loaded(tmp_path):
    config_path = write(tmp_path / "proctor.toml", TOML)
    eval_path = write(tmp_path / "x.eval.py", CASES)
    assert find_config(eval_path) == config_path
    config = load_config(find_config(eval_path))
    assert config.path == config_path
    assert config.defaults.image == "proctor-test-base:bookworm"
    assert config.defaults.timeout == 120
    assert config.defaults.concurrency == 2
    assert [v.name for v in config.variants] == ["scripted", "mini-4o"]
    assert config.variants[0].options.command == "sh .agent/run.sh"
    assert config.variants[1].harness == "mini" and config.variants[1].options.max_steps == 30
    assert config.judge is not None and config.judge.model == "gpt-4o-mini"


def test_config_in_a_parent_folder_is_found(tmp_path):
    config_path = write(tmp_path / "proctor.toml", TOML)
    eval_path = write(tmp_path / "suites" / "deep" / "x.eval.py", CASES)
    assert find_config(eval_path) == config_path
    assert find_config(eval_path.parent) == config_path


def test_the_nearest_config_wins(tmp_path):
    write(tmp_path / "proctor.toml", TOML)
    nearer = write(tmp_path / "suites" / "proctor.toml", TOML)
    assert find_config(write(tmp_path / "suites" / "x.eval.py", CASES)) == nearer


def test_no_config_gives_defaults(tmp_path):
    config = load_config(None)
    assert config.variants == [] and config.defaults.timeout == 15 * 60 and config.defaults.concurrency == 4


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [defaults]
        image = "proctor-test-base:bookworm"
        timeout =
    """)
    text = config_error(path)
    assert text.startswith(f"{path}:{line_of(path, 'timeout =')}: "), text
    assert "TOML" in text


def test_unknown_key_in_defaults_is_named(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [defaults]
        image = "proctor-test-base:bookworm"
        imagee = "typo"
    """)
    text = config_error(path)
    assert text.startswith(f"{path}:{line_of(path, 'imagee')}: "), text
    assert "defaults.imagee" in text


def test_bad_timeout_in_defaults_is_named(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [defaults]
        timeout = "fast"
    """)
    text = config_error(path)
    assert text.startswith(f"{path}:{line_of(path, 'timeout')}: "), text
    assert "'fast'" in text


def test_unknown_harness_is_named(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [[variants]]
        name = "x"
        harness = "codex-magic"
        command = "true"
    """)
    text = config_error(path)
    assert text.startswith(f"{path}:"), text
    assert "harness" in text


def test_command_variant_without_a_command_is_named(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [[variants]]
        name = "scripted"
        harness = "command"
    """)
    text = config_error(path)
    assert text.startswith(f"{path}"), text
    assert "'scripted'" in text and "no command" in text


def test_two_variants_with_one_name_are_refused(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [[variants]]
        name = "a"
        command = "true"

        [[variants]]
        name = "a"
        command = "false"
    """)
    assert "share a name" in config_error(path)


def test_select_variants(tmp_path):
    config = load_config(write(tmp_path / "proctor.toml", TOML))
    assert [v.name for v in config.select_variants(None)] == ["scripted", "mini-4o"]
    assert [v.name for v in config.select_variants(["mini-4o"])] == ["mini-4o"]
    repeated = config.select_variants(["mini-4o", "scripted", "mini-4o"])
    assert [v.name for v in repeated] == ["mini-4o", "scripted"]  # each once


def test_select_variants_with_an_unknown_name_lists_the_variants(tmp_path):
    path = write(tmp_path / "proctor.toml", TOML)
    config = load_config(path)
    with pytest.raises(EvalFileError) as caught:
        config.select_variants(["scripted", "nope"])
    text = str(caught.value)
    assert text.startswith(f"{path}: "), text
    assert "no variant named nope" in text and "scripted, mini-4o" in text


def test_no_variants_declared_says_where_to_add_one(tmp_path):
    path = write(tmp_path / "proctor.toml", """
        [defaults]
        image = "proctor-test-base:bookworm"
    """)
    with pytest.raises(EvalFileError, match=r"no \[\[variants\]\] declared"):
        load_config(path).select_variants(None)


# --- options checked by type (issue 8, item 11) ------------------------------------------------------


def eval_with(tmp_path: Path, options: str, name: str = "typed", imports: str = "") -> Path:
    """An eval file whose one decorator holds `options` (on one line), marked `# HERE` for line_of."""
    options = " ".join(part.strip() for part in options.splitlines())
    return write(tmp_path / f"{name}.eval.py", f"""
        import math
        from pathlib import Path

        from engine import Dockerfile, Install, Secret, Step, evaluation, git
        {imports}

        @evaluation({options})  # HERE
        def typed(c):
            pass
    """)


@pytest.mark.parametrize(("options", "words"), [
    # A string where a list is expected would be split into characters: refused, with the fix.
    ('setup="echo hi"', ["setup must be a list of commands, not a string: setup=['echo hi']"]),
    ('allow="example.com"', ["allow must be a list of host names, not a string: allow=['example.com']"]),
    ('tags="abc"', ["tags must be a list of tags, not a string: tags=['abc']"]),
    ('secrets={"API_KEY": Secret(hosts="api.example.test")}',
     ["hosts must be a list of host names, not a string: hosts=['api.example.test']"]),
    ('image=Install("proctor-test-base:bookworm", "apt-get install -y git")',
     ["commands must be a list of commands, not a string: commands=['apt-get install -y git']"]),
    # A bool is not a number.
    ("trials=True", ["trials", "True"]),
    ("pids=True", ["pids", "True"]),
    ("cpus=True", ["cpus", "True"]),
    ("trials=10**30", ["trials", "at most"]),
    ("pids=10**30", ["pids", "at most"]),
    ("cpus=math.nan", ["cpus", "nan"]),
    ("cpus=1e-9", ["cpus", "at least 0.01"]),
    ("memory=1", ["memory", "at least 6 MiB"]),
    ('memory="' + "9" * 400 + 'g"', ["memory"]),
    ("rules=123", ["rules must be a string, not 123"]),
    ('rules="\\ud800"', ["rules", "surrogate"]),
    # A timeout is finite and at most 7 days, in the eval file and in a Step.
    ("timeout=math.inf", ["timeout", "inf", "7 days"]),
    ("timeout=math.nan", ["timeout", "nan"]),
    ('timeout="99999999999h"', ["timeout", "'99999999999h'", "7 days"]),
    ('timeout="' + "9" * 400 + 's"', ["timeout", "7 days"]),
    ('timeout="8d"', ["timeout", "'8d'"]),
    ('setup=[Step("make", timeout=math.inf)]', ["Step timeout", "7 days"]),
    ('setup=[Step("make", timeout=True)]', ["Step timeout", "True"]),
    ('setup=[Step(["make"])]', ["Step command must be a shell command (a string), not ['make']"]),
    ('setup=[""]', ["setup[0]", "empty"]),
    ('setup=["true", 5]', ["setup[1] must be a command or Step(...), not 5"]),
    ('setup=["echo \\0"]', ["setup[0]", "NUL"]),
    # The workspace's git(): its types are checked here whatever git() itself accepts.
    ("workspace=git(init=True, ref=5)", ["ref", "5"]),
    ("workspace=5", ["workspace", "5"]),
    ('workspace=""', ["workspace", "empty"]),
    # env and secrets: names are variable names, values are strings.
    ('env={"LANG": 1}', ["env['LANG'] must be a string, not 1"]),
    ('env={1: "x"}', ["env key must be a string, not 1"]),
    ('env={"NOT A NAME": "x"}', ["env key must be a variable name", "not 'NOT A NAME'"]),
    ('env={"A": "x\\0y"}', ["env['A']", "NUL"]),
    ('env=["LANG=C"]', ["env must be a dict", "['LANG=C']"]),
    ('env={"K": "x"}, secrets={"K": Secret(hosts=["h.test"])}', ["'K'", "both in env and in secrets"]),
    ('secrets={"1BAD": Secret(hosts=["api.example.test"])}', ["secrets key must be a variable name", "'1BAD'"]),
    ('secrets={"API_KEY": "sk-123"}', ["secrets['API_KEY'] must be Secret(...), not 'sk-123'"]),
    ('secrets={"API_KEY": Secret(hosts=[])}', ["Secret hosts", "at least one host"]),
    ('secrets={"API_KEY": Secret(hosts=["h.test"], env="not a name")}', ["Secret env", "variable name"]),
    ('secrets={"API_KEY": Secret(hosts=["https://api.example.test/v1"])}', ["Secret hosts[0]", "host name"]),
    ('allow=["pypi.org", None]', ["allow[1] must be a string, not None"]),
    ('allow=["https://pypi.org"]', ["allow[0]", "host name"]),
    ('allow=[""]', ["allow[0]", "host name"]),
    # files: keys are relative paths, contents str, bytes or a Path to a regular file.
    ('files={1: "x"}', ["files key must be a string, not 1"]),
    ('files={"": "x"}', ["files key", "empty"]),
    ('files={".": "x"}', ["files key must be a file path", "'.'"]),
    ('files={"a" * 256: "x"}', ["files key", "255 bytes"]),
    ('files={"a.txt": 3}', ["files['a.txt'] must be str, bytes or a Path, not 3"]),
    ('files={"a.txt": "\\ud800"}', ["files['a.txt']", "surrogate"]),
    # Only a regular file is read (a device such as /dev/zero would never end).
    ('files={"a.txt": Path(".")}', ["files['a.txt']", "regular file"]),
    # image: a non-empty reference, Dockerfile(...) or Install(...).
    ('image=""', ["image", "empty"]),
    ('image="proctor test"', ["image", "whitespace"]),
    ('image=Install("", [])', ["Install base", "empty"]),
    ("image=Dockerfile(5)", ["Dockerfile path", "5"]),
    # tags: strings; a None or number is refused, not a crash at run time.
    ("tags=[1, None]", ["tags[0] must be a string, not 1"]),
    ('tags=[""]', ["tags[0]", "empty"]),
    ('user="nobody"', ["user", "'nobody'"]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_wrong_option_is_refused_at_its_line_with_one_sentence(tmp_path, options, words):
    path = eval_with(tmp_path, options)
    error = load_error(path)
    assert_points_at(error, path, line_of(path, "# HERE"), *words)
    assert len(str(error)) < len(str(path)) + 300


def test_an_over_long_case_id_is_elided_in_the_message(tmp_path):
    path = write(tmp_path / "long.eval.py", f"""
        from engine import evaluation


        @evaluation()
        def {"x" * 10_000}(c):
            pass
    """)
    error = load_error(path)
    assert_points_at(error, path, line_of(path, "@evaluation"), "longer than 100", "x" * 40 + "…")
    assert len(str(error)) < len(str(path)) + 200


def test_an_unknown_case_asked_for_is_elided_and_escaped_in_the_message(tmp_path):
    path = write(tmp_path / "cases.eval.py", CASES)
    with pytest.raises(EvalFileError) as caught:
        load_cases([path], ["y" * 10_000, "\x1b[2J"])
    text = str(caught.value)
    assert "y" * 40 + "…" in text and len(text) < 300
    assert "\x1b" not in text and "\\x1b[2J" in text  # no terminal escape reaches the terminal


@pytest.mark.parametrize(("source", "words"), [
    ("""
        @evaluation()
        async def typed(c):
            pass
    """, ["async"]),
    ("""
        @evaluation()
        def typed():
            pass
    """, ["one argument", "def typed(c)"]),
    ("""
        @evaluation
        def typed(c):
            pass
    """, ["@evaluation()"]),
])
def test_a_case_function_the_engine_cannot_call_is_refused(tmp_path, source, words):
    path = write(tmp_path / "fn.eval.py", "from engine import evaluation\n\n" + textwrap.dedent(source))
    assert_points_at(load_error(path), path, line_of(path, "@evaluation"), *words)


def test_an_exception_with_a_multi_line_message_is_one_line(tmp_path):
    path = write(tmp_path / "raise.eval.py", """
        from engine import evaluation

        raise ValueError("first\\nsecond\\r\\nthird " + "z" * 5000)  # RAISE
    """)
    error = load_error(path)
    assert_points_at(error, path, line_of(path, "# RAISE"), "ValueError: first second third")
    assert len(str(error)) < len(str(path)) + 600


def test_valid_typed_options_still_load(tmp_path):
    path = eval_with(tmp_path, """
        image=Install("proctor-test-base:bookworm", ("apt-get update", "apt-get install -y git")),
        env={"LANG": "C.UTF-8", "_X1": ""},
        secrets={"API_KEY": Secret(("api.example.test", "*.example.org"), env="HOST_KEY")},
        allow=("pypi.org", "*.pythonhosted.org", "10.0.0.1", "localhost"),
        setup=("true", Step("make", timeout=90)),
        timeout=1.5, trials=2, tags=("smoke", "slow one"), memory="512m", pids=64, cpus=1, disk=1 << 30,
        user="root", files={"a/b.txt": b"x", "c.txt": "y"}, rules="",
    """)
    (case,) = load_eval_file(path)
    assert case.image.commands == ("apt-get update", "apt-get install -y git")
    assert case.secrets["API_KEY"].hosts == ("api.example.test", "*.example.org")
    assert case.secrets["API_KEY"].env == "HOST_KEY"
    assert case.allow == ["pypi.org", "*.pythonhosted.org", "10.0.0.1", "localhost"]
    assert case.setup == [Step("true"), Step("make", timeout=90)]
    assert case.timeout == 1.5 and case.trials == 2 and case.tags == ["smoke", "slow one"]
    assert (case.memory, case.pids, case.cpus, case.disk, case.user) == (512 << 20, 64, 1.0, 1 << 30, "root")
    assert case.files == {"a/b.txt": b"x", "c.txt": b"y"} and case.rules == ""


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "99999999999h", "9" * 400 + "s", 8 * 86400, "8d"])
def test_parse_duration_refuses_what_is_not_finite_or_past_seven_days(value):
    with pytest.raises(ValueError, match="timeout"):
        parse_duration(value)


def test_parse_duration_allows_seven_days():
    assert parse_duration("168h") == 7 * 86400


# --- proctor.toml mistakes (issue 8, item 12) -----------------------------------------------------


def test_a_non_utf8_config_is_one_line_naming_file_and_line(tmp_path):
    path = tmp_path / "proctor.toml"
    path.write_bytes(b'[defaults]\nimage = "caf\xe9"\n')
    text = config_error(path)
    assert text.startswith(f"{path}:2: "), text
    assert "UTF-8" in text and "\n" not in text


@pytest.mark.parametrize("deep", [
    "a = " + "[" * 5000 + "]" * 5000,
    "a = " + "{b = " * 5000 + "1" + "}" * 5000,
    "[defaults]\nimage = " + "[" * 5000 + "]" * 5000,
])
def test_a_config_nested_5000_levels_deep_is_one_line(tmp_path, deep):
    path = tmp_path / "proctor.toml"
    path.write_text(deep + "\n")
    text = config_error(path)
    assert text.startswith(f"{path}"), text
    assert "nested" in text and "\n" not in text and len(text) < len(str(path)) + 300


@pytest.mark.parametrize(("toml", "words"), [
    ("[defaults]\ntimeout = nan", ["defaults.timeout", "nan"]),
    ("[defaults]\ntimeout = inf", ["defaults.timeout", "inf"]),
    ('[defaults]\ntimeout = "nan"', ["defaults.timeout", "'nan'"]),
    ('[defaults]\ntimeout = "99999999999h"', ["defaults.timeout", "7 days"]),
    ("[defaults]\nconcurrency = 1000000000000000000000000000000", ["defaults.concurrency", "at most"]),
    ("[defaults]\nconcurrency = true", ["defaults.concurrency", "True"]),
    ("[defaults]\nconcurrency = 2.0", ["defaults.concurrency", "2.0"]),
    ("[defaults]\ntrials = 1000000000000000000000000000000", ["defaults.trials", "at most"]),
    ("[defaults]\npids = 1000000000000000000000000000000", ["defaults.pids", "at most"]),
    ("[defaults]\ncpus = nan", ["defaults.cpus", "nan"]),
    ('[defaults]\nmemory = "' + "9" * 400 + 'g"', ["defaults.memory"]),
    ("[defaults]\nmemory = 1", ["defaults.memory", "at least 6 MiB"]),
    ('[defaults]\nimage = ""', ["defaults.image", "empty"]),
    ("[defaults]\nimage = 5", ["defaults.image must be a string, not 5"]),
    ('defaults = "x"', ["defaults must be a table", "'x'"]),
    ('[[variants]]\nname = 5\ncommand = "true"', ["variants[0].name must be a string, not 5"]),
    ('[[variants]]\nname = "a"\nharness = "mini"\nmodel = "m"\nbase_url = "https://x.test/v1"\n'
     'max_steps = 1000000000000000000000000000000', ["variants[0].max_steps", "at most"]),
    ('[[variants]]\nname = "a"\ncommand = ""', ["variants[0].command", "empty"]),
    ('[[variants]]\nname = "a"\nharness = "mini"\nmodel = "m"\nbase_url = "https://x.test/v1"\n'
     'api_key_env = "not a name"', ["api_key_env", "variable name"]),
    ('[judge]\nbase_url = "https://x.test/v1"\nmodel = "m"\nretries = 1000000000000000000000000000000',
     ["judge.retries", "at most"]),
    ('[judge]\nbase_url = "https://x.test/v1"\nmodel = "m"\ntimeout = inf', ["judge.timeout", "inf"]),
    ('[judge]\nbase_url = "x.test"\nmodel = "m"', ["judge.base_url", "http"]),
    ('[[hosts]]\nurl = "unix:///x.sock"\nslots = 1000000000000000000000000000000', ["hosts[0].slots", "at most"]),
    ('variants = "x"', ["variants must be a list", "'x'"]),
], ids=lambda v: v.replace("\n", " ")[:60] if isinstance(v, str) else None)
def test_a_wrong_config_value_is_one_line_naming_the_key(tmp_path, toml, words):
    path = tmp_path / "proctor.toml"
    path.write_text(toml + "\n")
    text = config_error(path)
    assert text.startswith(f"{path}"), text
    assert "\n" not in text and len(text) < len(str(path)) + 300, text
    for word in words:
        assert word in text, text
