"""`proctor mcp` as an MCP client sees it: the SDK's own client session over stdio, talking to
`python -m engine.cli mcp FOLDER --store S` in a subprocess.

A case run through the server runs in Docker and is stored with the trigger `mcp`; a path
outside the folder is refused (`..`, absolute, a symlink pointing out) and never loaded;
a broken eval file is a tool error naming its file and line and the server goes on; a
trial with a huge trajectory comes back bounded, page after page; a client that goes
away mid-batch leaves the batch closed; `--help` prints the client configuration as
valid JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from engine.mcp.views import ITEM_CHARS, REPLY_BYTES
from engine.models import Failure, TrajectoryItem, TrialRecord, TurnRecord, Validation
from engine.store import Store

from tests.conftest import suite_toml
from tests.engine.test_cli import cli_env, line_of

TOOLS = {"list_cases", "run_cases", "wait_batch", "list_batches", "show_trial", "search", "failure_groups"}
AGENT = """\
echo "agent ran" > agent.txt
echo '{"type":"command","command":"echo agent ran > agent.txt","exitCode":0,"output":""}'
echo '{"type":"message","role":"assistant","text":"I wrote agent.txt, marigold"}'
echo '{"type":"finished","reason":"done"}'
"""
CASE = """\
from engine import evaluation, git

print("the eval file says hello on stdout")  # must not reach the MCP channel


@evaluation(workspace=git(init=True), files={".agent/run.sh": open(__file__.replace("test.eval.py", "agent.sh")).read()})
def writes_agent_file(c):
    print("the case body says hello on stdout too")
    c.send("Write agent.txt")
    c.exec("cat agent.txt").stdout.to_contain("agent ran")
"""


@asynccontextmanager
async def served(folder: Path, store: Path, stderr: Path, **env: str) -> AsyncIterator[ClientSession]:
    """An initialized client session with `proctor mcp FOLDER --store STORE`."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "engine.cli", "mcp", str(folder), "--store", str(store)],
        env=cli_env(**env), cwd=store.parent)
    with stderr.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured reply; the test fails on a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """A tool error's text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text


def run_async(test) -> None:
    anyio.run(test)


# --- Docker: list, run, wait, show; the trigger is mcp -------------------------------------------


def test_a_case_runs_through_the_server_with_the_trigger_mcp(docker_client, tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "proctor.toml").write_text(suite_toml({"scripted": "sh .agent/run.sh"}))
    (folder / "test.eval.py").write_text(CASE)
    (folder / "agent.sh").write_text(AGENT)
    store_path = tmp_path / "proctor.db"
    stderr = tmp_path / "stderr.txt"

    async def session_test() -> None:
        async with served(folder, store_path, stderr) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == TOOLS
            trials = tools["run_cases"].input_schema["properties"]["trials"]
            assert {"maximum", "minimum"} <= set(json.dumps(trials).replace('"', " ").split()), trials
            assert tools["show_trial"].output_schema is not None
            assert tools["show_trial"].annotations.read_only_hint is True
            assert tools["run_cases"].annotations.read_only_hint is False

            listed = await call(session, "list_cases")
            assert [f["file"] for f in listed["files"]] == ["test.eval.py"]
            [case] = listed["files"][0]["cases"]
            assert case["id"] == "writes_agent_file"
            assert case["line"] == line_of(folder / "test.eval.py", "@evaluation")
            assert listed["files"][0]["variants"] == ["scripted"]
            assert listed["files"][0]["config"] == "proctor.toml"

            started = await call(session, "run_cases", paths=["test.eval.py"])
            assert started["trigger"] == "mcp" and started["trials"] == 1
            assert [(r["case_id"], r["variant"]) for r in started["runs"]] == [("writes_agent_file", "scripted")]
            batch_id = started["batch_id"]

            early = await call(session, "wait_batch", batch_id=batch_id, timeout_s=0)
            assert early["batch_id"] == batch_id  # a zero wait answers at once, running or not

            batch = await call(session, "wait_batch", batch_id=batch_id[:8], timeout_s=300)
            assert batch["status"] == "finished" and batch["trigger"] == "mcp"
            [run] = batch["runs"]
            assert run["distribution"]["passed"] == 1 and run["distribution"]["pass_rate"] == 1.0
            [trial] = run["trials"]
            assert trial["outcome"] == "pass"

            shown = await call(session, "show_trial", trial_id=trial["id"])
            assert shown["outcome"] == "pass" and shown["trigger"] == "mcp"
            [check] = shown["validations"]
            assert check["kind"] == "command" and check["status"] == "passed"
            assert "agent ran" in check["evidence"]["stdout"]
            kinds = [item["kind"] for item in shown["trajectory"]["items"]]
            assert kinds == ["command", "message"] and shown["trajectory"]["next_offset"] is None
            assert shown["trajectory"]["items"][0]["index"] == 0

            listed_batches = await call(session, "list_batches", limit=5)
            assert [(b["batch_id"], b["trigger"]) for b in listed_batches["batches"]] == [(batch_id, "mcp")]
            hits = await call(session, "search", query="marigold")
            assert [h["trial_id"] for h in hits["hits"]] == [trial["id"]]
            groups = await call(session, "failure_groups", batch_id=batch_id)
            assert groups["groups"] == []

    run_async(session_test)
    store = Store(store_path)
    try:
        summary = store.batch_summary(batch_id := store.list_batches()[0].batch_id)
        assert summary is not None and summary.trigger == "mcp" and summary.status == "finished"
        record = store.get_trial(summary.runs[0].trials[0].id)
        assert record is not None and record.trigger == "mcp" and record.outcome == "pass"
    finally:
        store.close()
    said = stderr.read_text()  # what the eval file and its body printed went to stderr, not the channel
    assert "the eval file says hello on stdout" in said and "the case body says hello" in said, said
    assert batch_id


# --- the folder rule ---------------------------------------------------------------------------------


EVAL = """\
from engine import evaluation


@evaluation()
def {name}(c):
    pass
"""
LOADED_MARKER = """\
from pathlib import Path

Path(__file__).with_name("was-loaded").write_text("an outside eval file ran")
""" + EVAL


def test_paths_outside_the_folder_are_refused_and_never_loaded(tmp_path):
    folder = tmp_path / "evals"
    (folder / "inside").mkdir(parents=True)
    (folder / "inside" / "good.eval.py").write_text(EVAL.format(name="good"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.eval.py").write_text(LOADED_MARKER.format(name="secret"))
    (folder / "links").mkdir()
    (folder / "links" / "out.eval.py").symlink_to(outside / "secret.eval.py")
    (folder / "linked-folder").symlink_to(outside, target_is_directory=True)
    stderr = tmp_path / "stderr.txt"

    async def session_test() -> None:
        async with served(folder, tmp_path / "proctor.db", stderr) as session:
            attempts = [("list_cases", {"folder": ".."}),
                        ("list_cases", {"folder": str(outside)}),
                        ("list_cases", {"folder": "linked-folder"}),
                        ("list_cases", {"folder": "links"}),  # its eval file is a symlink out
                        ("list_cases", {"folder": "inside/../../elsewhere"}),
                        ("run_cases", {"paths": ["../elsewhere/secret.eval.py"]}),
                        ("run_cases", {"paths": [str(outside / "secret.eval.py")]}),
                        ("run_cases", {"paths": ["inside/good.eval.py", "links/out.eval.py"]}),
                        ("run_cases", {"paths": ["linked-folder/secret.eval.py"]})]
            for tool, arguments in attempts:
                text = await refused(session, tool, **arguments)
                assert "outside the folder this server serves" in text, (tool, arguments, text)
                assert "\n" not in text
            listed = await call(session, "list_cases", folder="inside")
            assert [f["file"] for f in listed["files"]] == ["inside/good.eval.py"]

    run_async(session_test)
    assert not (outside / "was-loaded").exists()


def test_an_empty_selection_is_refused_not_taken_as_every_case(tmp_path):
    """cases=[] (a filter that came out empty) must not run every case under every variant;
    and list_cases, which runs the eval files' Python, is not offered as a read-only tool."""
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "good.eval.py").write_text(EVAL.format(name="good"))

    async def session_test() -> None:
        async with served(folder, tmp_path / "proctor.db", tmp_path / "stderr.txt") as session:
            for arguments in ({"cases": []}, {"variants": []}):
                text = await refused(session, "run_cases", paths=["good.eval.py"], **arguments)
                assert "at least 1" in text or "too_short" in text, (arguments, text)
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert tools["list_cases"].annotations.read_only_hint is False

    run_async(session_test)
    assert Store(tmp_path / "proctor.db").list_batches() == []


def test_an_overview_of_many_long_named_checks_stays_within_a_reply():
    """200 checks named by 2,000-character commands: the overview lists what fits and says
    how to read the rest, instead of a reply of 230 KB (found by a review)."""
    from engine.mcp.views import size, trial_head

    checks = [Validation(kind="command", name=f"python3 - <<'EOF' {i} " + "x" * 2000, status="failed",
                         evidence={"exit_code": 1}) for i in range(200)]
    record = TrialRecord(id="t_1", batch_id="b_1", run_id="r_1", case_id="c", variant="v", trial=1,
                         trigger="mcp", outcome="fail", started_at="2026-12-01T10:00:00Z",
                         failure=Failure(kind="assertion", reason="check 1 failed"), validations=checks)
    view = trial_head(record)
    assert size(view) <= REPLY_BYTES * 2 // 3 and 0 < len(view.validations) < 200
    assert any("show_trial(trial_id, check=N)" in c and "of 200" in c for c in view.cut)


def test_a_broken_eval_file_is_a_tool_error_and_the_server_goes_on(tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "good.eval.py").write_text(EVAL.format(name="good"))
    broken = folder / "broken.eval.py"
    broken.write_text(textwrap.dedent("""\
        from engine import evaluation

        settings = {"retries": 3}
        value = settings["timeout"]  # a KeyError at load


        @evaluation()
        def never_declared(c):
            pass
    """))
    (folder / "syntax.eval.py").write_text("from engine import evaluation\n\n@evaluation(\ndef x(c):\n    pass\n")
    stderr = tmp_path / "stderr.txt"

    async def session_test() -> None:
        async with served(folder, tmp_path / "proctor.db", stderr) as session:
            text = await refused(session, "list_cases")
            assert f"broken.eval.py:{line_of(broken, 'settings[')}" in text and "KeyError" in text, text
            text = await refused(session, "run_cases", paths=["broken.eval.py"])
            assert f"broken.eval.py:{line_of(broken, 'settings[')}" in text, text
            text = await refused(session, "list_cases", folder="syntax.eval.py")
            assert "syntax.eval.py:3" in text and "syntax error" in text, text
            text = await refused(session, "run_cases", paths=["good.eval.py"], variants=["nope"])
            assert "variants" in text, text  # no proctor.toml: no variant to run, said in one line
            text = await refused(session, "show_trial", trial_id="t_missing")
            assert "no trial" in text
            text = await refused(session, "wait_batch", batch_id="b_missing", timeout_s=1)
            assert "no batch" in text
            text = await refused(session, "search", query='in:nowhere "x')
            assert "\n" not in text
            # Still serving, and the good file still lists.
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            listed = await call(session, "list_cases", folder="good.eval.py")
            assert listed["files"][0]["cases"][0]["id"] == "good"

    run_async(session_test)
    assert "Traceback" not in stderr.read_text()


# --- a huge trajectory, bounded and paged -----------------------------------------------------------


def huge_record(items: int) -> TrialRecord:
    """A finished trial with `items` commands of 4,000 characters of output each, a tool call
    with a huge input and a check with 64,000 characters of evidence."""
    trajectory = [TrajectoryItem(kind="command", turn=1 + n // 500, command=f"step {n}", exit_code=0,
                                 output=f"output {n} " + "x" * 3_990) for n in range(items)]
    trajectory[7] = TrajectoryItem(kind="toolCall", turn=1, name="edit",
                                   input={"path": "big.py", "text": "y" * 50_000, "parts": ["z" * 5_000] * 20})
    evidence = {"command": "pytest", "stdout": "s" * 16_000, "stderr": "e" * 16_000,
                "log": ["l" * 16_000, "m" * 16_000], "exit_code": 1}
    return TrialRecord(id="t_huge", batch_id="b_huge", run_id="r_huge", case_id="huge", variant="v", trial=1,
                       trigger="mcp", outcome="fail", failure=Failure(kind="assertion", reason="pytest failed"),
                       started_at="2026-12-01T10:00:00.000Z",
                       finished_at="2026-12-01T10:05:00.000Z", trajectory=trajectory,
                       command_count=items - 1,
                       turns=[TurnRecord(index=n, prompt="p" * 5_000, status="completed", ms=10,
                                         final_message="f" * 5_000, files_changed=[f"{n}/" + "d" * 300] * 500)
                              for n in range(1, 101)],
                       validations=[Validation(kind="command", name="pytest", status="failed", evidence=evidence)]
                       * 30)


def test_show_trial_of_a_huge_trajectory_is_bounded_and_pages(tmp_path):
    items = 1_200
    store_path = tmp_path / "proctor.db"
    store = Store(store_path)
    record = huge_record(items)
    store.create_batch("b_huge", "mcp", "host:1", "2026-12-01T10:00:00.000Z")
    store.create_run("r_huge", "b_huge", "huge", "v", 0)
    store.create_trial(record.model_copy(update={"trajectory": [], "outcome": None}), owner="host:1")
    store.save_trial(record).result()
    store.finish_batch("b_huge", "finished", "2026-12-01T10:05:00.000Z")
    store.close()
    stderr = tmp_path / "stderr.txt"

    async def session_test() -> None:
        async with served(tmp_path, store_path, stderr) as session:
            seen: list[int] = []
            offset: int | None = 0
            pages = 0
            while offset is not None:
                result = await session.call_tool("show_trial", {"trial_id": "t_huge", "offset": offset,
                                                                "limit": 200})
                assert not result.is_error, result.content
                reply = result.structured_content
                assert len(json.dumps(reply, separators=(",", ":")).encode()) <= REPLY_BYTES
                assert len(result.model_dump_json().encode()) <= 200_000  # structured, and as text
                page = reply["trajectory"]
                assert page["total"] == items and page["offset"] == offset
                assert 0 < len(page["items"]) < 200  # the size bound ends the page before the limit
                assert any(f"offset={page['next_offset']}" in c for c in reply["cut"]) or page["next_offset"] is None
                for item in page["items"]:
                    text = item.get("output") or json.dumps(item.get("input"))
                    assert len(text) <= ITEM_CHARS + 60 or item.get("cut")
                seen += [item["index"] for item in page["items"]]
                if offset == 0:  # the overview: every check, its evidence cut, and how to get it whole
                    assert len(reply["validations"]) == 30
                    assert any("check=N" in c for c in reply["cut"])
                    assert 0 < len(reply["turns"]) < 100 and any(c.startswith("turns:") for c in reply["cut"])
                else:  # later pages leave the room to the trajectory, and say so
                    assert reply["validations"] is None and reply["turns"] is None
                    assert any("offset=0" in c for c in reply["cut"])
                    assert len(page["items"]) >= 15
                offset = page["next_offset"]
                pages += 1
            assert seen == list(range(items)) and pages > 5
            tool_call = (await call(session, "show_trial", trial_id="t_huge", offset=7, limit=1))["trajectory"]["items"][0]
            assert tool_call["kind"] == "toolCall" and tool_call["cut"] is True
            assert "more characters cut" in tool_call["input"]["text"]

            one = await call(session, "show_trial", trial_id="t_huge", check=3, limit=1)
            [check] = one["validations"]
            assert check["index"] == 3 and len(check["evidence"]["stdout"]) > 5_000  # far more than the overview's 1,000
            assert len(json.dumps(one).encode()) <= REPLY_BYTES
            text = await refused(session, "show_trial", trial_id="t_huge", check=30)
            assert "from 0 to 29" in text

            # A batch this server did not start is read from the store.
            batch = await call(session, "wait_batch", batch_id="b_huge", timeout_s=5)
            assert batch["status"] == "finished" and batch["runs"][0]["trials"][0]["outcome"] == "fail"
            [group] = (await call(session, "failure_groups", batch_id="b_huge"))["groups"]
            assert group["trial_ids"] == ["t_huge"] and group["kind"] == "assertion"
            assert [b["batch_id"] for b in (await call(session, "list_batches"))["batches"]] == ["b_huge"]

    run_async(session_test)


# --- --help ------------------------------------------------------------------------------------------


def test_help_prints_the_client_configuration_as_json(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine.cli", "mcp", "--help"], capture_output=True,
                          text=True, env=cli_env(), cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    snippet, _ = json.JSONDecoder().raw_decode(done.stdout[done.stdout.index("{"):])
    assert snippet == {"mcpServers": {"proctor": {"command": "proctor", "args": ["mcp", "/path/to/evals"]}}}
    for tool in TOOLS:
        assert tool in done.stdout


def test_other_commands_never_load_the_sdk(tmp_path):
    """`proctor` builds every subcommand's parser at each start: the SDK loads for `mcp` alone."""
    code = ("import sys, engine.cli; engine.cli._parser(); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=cli_env(), cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_missing_folder_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine.cli", "mcp", str(tmp_path / "nope"),
                           "--store", str(tmp_path / "s.db")], capture_output=True, text=True,
                          env=cli_env(), cwd=tmp_path, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"proctor: {tmp_path / 'nope'}: no such folder"]



SLOW_CASE = """\
from engine import evaluation, git


@evaluation(workspace=git(init=True), files={".agent/run.sh": "sleep 120\\n"}, trials=2)
def sleeps(c):
    c.send("Sleep")
"""


def test_closing_the_session_closes_its_batch(docker_client, tmp_path):
    """The client goes away mid-batch: the server cancels the batch, and every trial is
    closed in the store and its container removed, before the client's kill escalation."""
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "proctor.toml").write_text(suite_toml({"scripted": "sh .agent/run.sh"}))
    (folder / "slow.eval.py").write_text(SLOW_CASE)
    store_path = tmp_path / "proctor.db"
    started: dict[str, Any] = {}

    async def session_test() -> None:
        async with served(folder, store_path, tmp_path / "stderr.txt") as session:
            started.update(await call(session, "run_cases", paths=["slow.eval.py"]))
            batch = await call(session, "wait_batch", batch_id=started["batch_id"], timeout_s=0)
            trial_id = batch["runs"][0]["trials"][0]["id"]
            with anyio.fail_after(120):  # until the first trial's sandbox is up and its agent sleeping
                while (await call(session, "show_trial", trial_id=trial_id))["started_at"] is None:
                    await anyio.sleep(0.5)
            await anyio.sleep(3)

    t0 = time.monotonic()
    run_async(session_test)
    took = time.monotonic() - t0
    store = Store(store_path)
    try:
        summary = store.batch_summary(started["batch_id"])
        assert summary is not None and summary.status == "interrupted", summary
        outcomes = [t.outcome for t in summary.runs[0].trials]
        assert None not in outcomes, outcomes
    finally:
        store.close()
    left = docker_client.containers.list(all=True, filters={"label": f"proctor.batch={started['batch_id']}"})
    assert left == [], left
    assert took < 60


def test_a_huge_batch_is_cut_to_one_reply_with_its_distributions_whole():
    """Logic only (views.batch_view): 30 runs of 1,000 trials each."""
    from engine.mcp.views import batch_list, batch_view, size
    from engine.models import BatchSummary, Failure, RunSummary, TrialSummary, distribution

    runs = []
    for r in range(30):
        trials = [TrialSummary(id=f"t_{r}_{n}", trial=n, outcome="fail" if n % 3 else "pass",
                               failure=Failure(kind="assertion", reason="x" * 200) if n % 3 else None)
                  for n in range(1, 1_001)]
        runs.append(RunSummary(run_id=f"r_{r}", case_id=f"case_{r}", variant="v",
                               distribution=distribution(trials), trials=trials))
    summary = BatchSummary(batch_id="b_big", trigger="mcp", status="finished", runs=runs)
    view = batch_view(summary)
    assert size(view) <= REPLY_BYTES and view.cut and "distribution counts them all" in view.cut
    assert [r.distribution for r in view.runs] == [r.distribution for r in runs]
    assert 0 < len(view.runs[0].trials) < 1_000
    listed = batch_list([summary, summary])
    assert size(listed) <= REPLY_BYTES and len(listed.batches) == 1 and "1 of the 2" in listed.cut


def test_docker_down_is_a_tool_error_of_one_line(tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "proctor.toml").write_text(suite_toml({"scripted": "true"}))
    (folder / "good.eval.py").write_text(EVAL.format(name="good"))

    async def session_test() -> None:
        async with served(folder, tmp_path / "proctor.db", tmp_path / "stderr.txt",
                          DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock") as session:
            text = await refused(session, "run_cases", paths=["good.eval.py"])
            assert "Docker is not reachable" in text and "\n" not in text, text
            assert (await call(session, "list_batches"))["batches"] == []  # nothing was stored

    run_async(session_test)


def test_a_batch_ended_by_an_engine_error_is_ended_and_says_why(tmp_path):
    """wait_batch on a batch Docker's loss ended: it has ended (the agent can read it), and
    `error` says why, instead of the error raised again at every call."""
    from types import SimpleNamespace

    from engine.mcp.batches import Batches

    batches = Batches(Store(tmp_path / "proctor.db"))
    batches._handles["b_1"] = SimpleNamespace(done=True, error=RuntimeError("Docker went\naway"))
    batches._handles["b_2"] = SimpleNamespace(done=False, error=None)
    assert batches.ended("b_1") and batches.error("b_1") == "Docker went away"
    assert not batches.ended("b_2") and batches.error("b_2") is None


def read_only_store(path: Path, monkeypatch) -> Store:
    """The store at `path` opened read-only, as a full disk or a file mode would leave its
    index unwritable (root ignores file modes, so SQLite's own read-only mode stands in)."""
    import engine.store.store as store_module

    create = store_module.create_engine
    monkeypatch.setattr(store_module, "create_engine",
                        lambda url, **kw: create(f"sqlite:///file:{path}?mode=ro&uri=true", **kw))
    return Store(path)


def test_search_says_why_trials_cannot_be_indexed_instead_of_search_again(tmp_path, monkeypatch):
    """A review found every search of such a store said "being indexed now, search again
    shortly", forever: the failure of the index's step never reached the client."""
    from engine.mcp.server import ProctorServer
    from tests.engine.test_search import unindexed_store

    path, done, word = unindexed_store(tmp_path, trials=60)
    with Store(path):
        pass  # migrated: the index is there and empty
    store = read_only_store(path, monkeypatch)
    server = ProctorServer(tmp_path, store)
    try:
        replies = [server.search(word)]  # starts the indexing, which fails
        deadline = time.monotonic() + 10
        while store.index_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        replies += [server.search(word), server.search(word)]
    finally:
        server.close()
        store.close()
    assert all(r.unindexed == done and not r.hits for r in replies)
    assert "read-only" in replies[-1].cut and "search again" not in replies[-1].cut, replies[-1].cut
