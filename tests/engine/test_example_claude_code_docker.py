"""examples/claude-code end to end: its eval and proctor.toml as shipped, the real Claude Code
CLI in Docker, against the stand-in Anthropic API of make_screenshot.py (the scripted model runs
the failing tests, reads slug.py, rewrites it, runs the tests again). The example's own checks
must pass, which they do only if the fix reached the workspace."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "claude-code"


def _example():
    spec = importlib.util.spec_from_file_location("claude_code_example",
                                                  EXAMPLE / "make_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.docker
@pytest.mark.slow
def test_the_claude_code_example_passes_once_the_agent_fixes_the_bug(run_eval, monkeypatch,
                                                                     tmp_path):
    example = _example()
    folder = Path(shutil.copytree(EXAMPLE, tmp_path / "example",
                                  ignore=shutil.ignore_patterns("__pycache__")))
    monkeypatch.setenv("ANTHROPIC_API_KEY", example.STANDIN_KEY)
    with example.StandIn(script=example.SESSION, model="claude-sonnet-4-6",
                         tls=tmp_path / "tls") as api:
        (folder / "proctor.toml").write_text(example.config_with(api))
        summary, _, records = run_eval(folder / "claude_code.eval.py")
    [record] = records.values()
    assert record.outcome == "pass", (record.failure, record.validations,
                                      [t.raw_output for t in record.turns])
    assert [v.status for v in record.validations] == ["passed", "passed"]

    # The tests failed before the edit and passed after it, in the agent's own runs.
    commands = [i for i in record.trajectory if i.kind == "command"]
    assert [(c.command, c.exit_code) for c in commands] == [
        ("python3 -m unittest", 1), ("python3 -m unittest -v", 0)]
    assert "'hello-world-' != 'hello-world'" in commands[0].output
    assert any(i.kind == "fileChange" and i.path == "/workspace/slug.py" for i in record.trajectory)
    [turn] = record.turns
    assert turn.files_changed == ["slug.py"] and 're.findall(r"\\w+", title)' in turn.diff
    assert turn.final_message.startswith("Fixed `slugify` in slug.py.")

    # The brokered key reached the stand-in; the sandbox held only a placeholder.
    assert api.keys() == {example.STANDIN_KEY}
