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
    assert_points_at(load_error(path), path, line_of(path, 'Step("make"'), "step timeout", "'soon'")


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
    with pytest.raises(ValueError, match="bad timeout"):
        parse_duration(value)


def test_parse_duration_names_what_it_parses():
    with pytest.raises(ValueError, match=r"bad step timeout 'soon'"):
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
    assert config.variants[0].command == "sh .agent/run.sh"
    assert config.variants[1].harness == "mini" and config.variants[1].max_steps == 30
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
