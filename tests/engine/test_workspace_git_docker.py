"""A git workspace holds the ref's tree and nothing later (issue 8, item 10).

The host repository has the answer in a later commit, a tag, a branch, a stash,
a reflog, a hook and a remote. Inside the sandbox every git command an agent
would try must find only the one commit of the ref's tree, and the answer's
text must appear nowhere on the sandbox's disk. The source is fetched once per
batch on the host, however many trials use it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.phases.git_source import GitSources
from engine.spec import EvalFileError, Git, git, load_eval_file

HEADER = "from pathlib import Path\nfrom engine import evaluation, git\n"
# The answer, and a shell expression that prints it without holding it as one string,
# so a grep of the sandbox for it cannot match the command that greps.
ANSWER = "the-answer-7c2e91"
NEEDLE = '"$(printf %s%s the-answer- 7c2e91)"'


def make_repo(tmp_path: Path) -> tuple[Path, str]:
    """commit1 (f.txt=v1), then the answer everywhere git keeps history; returns (repo, commit1)."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def run(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                               *args], check=True, capture_output=True, text=True).stdout.strip()

    run("init", "-q", "-b", "main")
    (repo / "f.txt").write_text("v1\n")
    run("add", ".")
    run("commit", "-qm", "commit1")
    commit1 = run("rev-parse", "HEAD")
    (repo / "f.txt").write_text(f"v2 {ANSWER}\n")
    run("commit", "-qam", f"commit2 {ANSWER}")
    run("tag", "-a", "v2", "-m", f"release {ANSWER}")
    run("checkout", "-qb", f"solution-{ANSWER}")
    (repo / "g.txt").write_text(f"{ANSWER}\n")
    run("add", ".")
    run("commit", "-qm", "on a branch")
    run("checkout", "-q", "main")
    (repo / "f.txt").write_text(f"stashed {ANSWER}\n")
    run("stash", "-q")
    run("remote", "add", "origin", f"/srv/upstream-{ANSWER}.git")
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho {ANSWER} > /tmp/hooked\n")
    hook.chmod(0o755)
    return repo, commit1


def failed(record) -> list[str]:
    """Each failed check: its command, failed matchers and output."""
    lines = []
    for v in record.validations:
        if v.status != "passed":
            messages = [a["message"] for a in v.evidence.get("assertions", []) if not a["passed"]]
            lines.append(f"{v.name}: {messages} stdout={v.evidence.get('stdout', '')[:300]!r} "
                         f"stderr={v.evidence.get('stderr', '')[:300]!r}")
    return lines


# An agent that tries every way to the answer it knows and keeps whatever it finds.
CHEATER = f"""
needle={NEEDLE}
for try in "git show v2:f.txt" "git log --all -p" "git log -g -p" "git reflog -p" \\
           "git stash show -p" "git show-ref" "git fetch origin" "git fetch --all" \\
           "git cat-file --batch-all-objects --batch" "git fsck --lost-found --unreachable" \\
           "git for-each-ref" "cat .git/packed-refs .git/FETCH_HEAD" \\
           "git rev-list --all --reflog --objects"; do
  sh -c "$try" 2>&1
done | grep -F "$needle" > /tmp/found.txt
git log --format=%s > /tmp/agent-log.txt 2>&1  # the agent's own git works on its workspace
echo '{{"type":"finished","reason":"done"}}'
"""


@pytest.mark.slow
def test_an_init_workspace_at_a_ref_has_one_commit_and_nothing_later(tmp_path, suite, run_eval):
    repo, commit1 = make_repo(tmp_path)
    checks = [
        ("cat f.txt", "to_equal", "v1"),
        ("ls -A", "to_equal", ".agent\n.git\nf.txt"),
        ("git log --all --oneline | wc -l", "to_equal", "1"),
        ("git rev-list --all | wc -l", "to_equal", "1"),
        ("git rev-list --all --reflog | sort -u | wc -l", "to_equal", "1"),
        ("git show v2:f.txt", "to_fail", None),
        (f"git show {commit1}", "to_fail", None),  # not even the source's commit id
        ("git tag", "to_equal", ""),
        ("git branch -a", "to_equal", "* main"),
        ("git reflog | wc -l", "to_match", r"^[01]$"),
        ("git remote -v", "to_equal", ""),
        ("git stash list", "to_equal", ""),
        ("git for-each-ref --format='%(refname)'", "to_equal", "refs/heads/main"),
        ("find .git/refs -type f", "to_equal", ".git/refs/heads/main"),
        # (the agent's own `git fetch` leaves an empty FETCH_HEAD)
        ("ls .git/packed-refs .git/ORIG_HEAD .git/shallow .git/logs 2>/dev/null | wc -l",
         "to_equal", "0"),
        ("cat .git/FETCH_HEAD 2>/dev/null | wc -c", "to_equal", "0"),
        ("find .git/hooks -type f 2>/dev/null | wc -l", "to_equal", "0"),
        ("git fsck --lost-found --unreachable --dangling --no-progress 2>&1", "to_equal", ""),
        # Every object in the sandbox's store is reachable from the one commit.
        ("test \"$(git cat-file --batch-all-objects --batch-check='%(objectname)' | sort)\""
         " = \"$(git rev-list --objects --all | cut -d' ' -f1 | sort)\"", "to_succeed", None),
        # commit, tree, blob
        ("git cat-file --batch-all-objects --batch-check | wc -l", "to_equal", "3"),
        (f"git cat-file --batch-all-objects --batch | grep -cF {NEEDLE}", "to_equal", "0"),
        (f"grep -ciE 'url|remote|{tmp_path.name}|/tmp' .git/config", "to_equal", "0"),
        ("git config --get-regexp '^remote\\.'", "to_fail", None),
        ("git log -1 --format='%an <%ae> %ad %cn <%ce>' --date=iso-strict", "to_equal",
         "proctor <proctor@localhost> 2000-01-01T00:00:00+00:00 proctor <proctor@localhost>"),
        ("git status --porcelain --untracked-files=no", "to_equal", ""),
        ("git diff-index --quiet HEAD --", "to_succeed", None),  # the index matches the files
        # Packs only in this repository's own store, and no copy of the source anywhere.
        ("find / \\( -path /proc -o -path /sys -o -path /workspace/.git/objects \\) -prune"
         " -o -name '*.pack' -print", "to_equal", ""),
        ("cat /tmp/found.txt", "to_equal", ""),
        ("cat /tmp/agent-log.txt", "to_equal", "workspace"),
        ("test -e /tmp/hooked", "to_fail", None),
        # The answer's text is on no file of the sandbox.
        (f"for d in /*; do case $d in /proc|/sys|/dev) ;; "
         f"*) grep -rlsF -D skip {NEEDLE} \"$d\";; esac; done", "to_equal", ""),
    ]
    lines = []
    for command, matcher, expected in checks:
        if matcher in ("to_fail", "to_succeed"):
            lines.append(f"    c.exec({command!r}).{matcher}()")
        else:
            lines.append(f"    c.exec({command!r}).stdout.{matcher}({expected!r})")
    path = suite(HEADER + f"""
@evaluation(workspace=git({str(repo)!r}, ref={commit1!r}, init=True),
            files={{".agent/run.sh": Path("agent.sh")}})
def no_answer(c):
    c.send("find the answer")
""" + "\n".join(lines) + "\n", files={"agent.sh": CHEATER})
    summary, _, records = run_eval(path)
    [record] = records.values()
    assert record.outcome == "pass", (record.failure, failed(record))


@pytest.mark.slow
def test_trials_of_a_batch_fetch_a_source_once(tmp_path, suite, run_eval, monkeypatch):
    """Four trials of two cases share one source at one ref: one fetch on the host. Without
    init the workspace is the tree alone; an empty git(init=True) is one empty commit."""
    repo, commit1 = make_repo(tmp_path)
    calls = tmp_path / "git-calls.log"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True,
                          text=True).stdout.strip()
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    source = f"git({str(repo)!r}, ref={commit1!r}"
    path = suite(HEADER + f"""
@evaluation(workspace={source}), trials=2)
def tree_only(c):
    c.exec("cat f.txt").stdout.to_equal("v1")
    c.exec("ls -A").stdout.to_equal("f.txt")
    c.exec("git rev-parse --git-dir").to_fail()
    c.exec("git show v2:f.txt").to_fail()
    c.exec('grep -rlsF {NEEDLE} /workspace /tmp | wc -l').stdout.to_equal("0")

@evaluation(workspace={source}, init=True), trials=2)
def with_git(c):
    c.exec("git rev-parse HEAD")
    c.exec("git rev-list --all | wc -l").stdout.to_equal("1")

@evaluation(workspace=git(init=True))
def empty_repo(c):
    c.exec("git rev-list --all | wc -l").stdout.to_equal("1")
    c.exec("git ls-tree -r HEAD | wc -l").stdout.to_equal("0")
    c.exec("git status --porcelain").stdout.to_equal("")

@evaluation(workspace=git({str(repo)!r}, ref="no-such-ref"))
def bad_ref(c):
    pass
""")
    summary, _, records = run_eval(path, concurrency=4)
    by_case = {}
    for run in summary.runs:
        by_case[run.case_id] = [records[t.id] for t in run.trials]
    for case in ("tree_only", "with_git", "empty_repo"):
        for record in by_case[case]:
            assert record.outcome == "pass", (case, record.failure, failed(record))
    [bad] = by_case["bad_ref"]
    assert bad.outcome == "infra_error" and "no-such-ref" in bad.failure.reason, bad.failure
    assert "\n" not in bad.failure.reason and "Traceback" not in bad.failure.reason
    heads = {r.validations[0].evidence["stdout"].strip() for r in by_case["with_git"]}
    assert len(heads) == 1, heads  # the fixed author and date make the commit reproducible
    fetches = [line for line in calls.read_text().splitlines()
               if str(repo) in line and commit1 in line]
    assert len(fetches) == 1, fetches


# --- the host side, without Docker ---------------------------------------------------------


def test_a_source_resolves_any_ref_name_and_is_fetched_once_by_concurrent_trials(tmp_path):
    repo, commit1 = make_repo(tmp_path)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "main", "v2^{commit}"],
                          check=True, capture_output=True, text=True).stdout.split()
    sources = GitSources()
    try:
        for ref, commit in [(None, head[0]), ("main", head[0]), ("v2", head[1]),
                            (commit1[:7], commit1), (commit1, commit1)]:
            fetched, _ = sources.get(str(repo), ref, init=False)
            assert fetched.commit == commit, ref
        fetched, _ = sources.get(f"file://{repo}", commit1, init=False)
        with tarfile.open(fetched.tree_tar) as tar:
            assert tar.getnames() == ["workspace", "workspace/f.txt"]
            assert tar.extractfile("workspace/f.txt").read() == b"v1\n"
        before = sources.fetches
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: sources.get(str(repo), "HEAD~1", init=True),
                                    range(8)))
        assert sources.fetches == before + 1
        assert [cached for _, cached in results].count(False) == 1
        assert len({id(fetched) for fetched, _ in results}) == 1
        assert results[0][0].repo_tar is not None
    finally:
        sources.close()
    assert sources.root is not None and not sources.root.exists()


# An engine that fetched a source and then was SIGKILLed: its host copy stays behind.
KILLED_ENGINE = """
import sys, time
from engine.phases.git_source import GitSources
sources = GitSources()
sources.get(sys.argv[1], None, init=True)
print(sources.root, flush=True)
time.sleep(600)
"""


def test_cleanup_removes_the_git_folders_of_a_killed_engine_and_keeps_live_ones(tmp_path, docker_client):
    repo, _ = make_repo(tmp_path)
    engine = subprocess.Popen([sys.executable, "-c", KILLED_ENGINE, str(repo)], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2])
    live = GitSources()  # this process's: alive, so kept
    try:
        left = Path(engine.stdout.readline().strip())
        live.get(str(repo), None, init=False)
        assert left.is_dir() and (left.parent, live.root.parent) == (Path(tempfile.gettempdir()),) * 2
        engine.kill()
        engine.wait(10)
        done = subprocess.run([sys.executable, "-m", "engine.cli", "cleanup", "--store",
                               str(tmp_path / "proctor.db")], capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert not left.exists(), done.stdout
        assert live.root.is_dir()
        assert re.search(r", [1-9]\d* git folders", done.stdout), done.stdout
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        engine.stdout.close()
        live.close()


# --- git() is checked when the eval file loads -------------------------------------------


@pytest.mark.parametrize("call, words", [
    (lambda: git(init=True, ref=5), "ref"),
    (lambda: git("repo", ref=5), "ref"),
    (lambda: git("repo", ref=""), "ref"),
    (lambda: git("repo", ref="--upload-pack=touch /tmp/x"), "ref"),
    (lambda: git(init=True, ref="main"), "source"),
    (lambda: git(5), "source"),
    (lambda: git(""), "source"),
    (lambda: git("-oProxyCommand=x"), "source"),
    (lambda: git("repo", init="yes"), "init"),
    (lambda: git(), "source"),
])
def test_git_refuses_wrong_options_in_one_line(call, words):
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    text = str(caught.value)
    assert words in text and "\n" not in text, text


def test_git_keeps_the_source_with_init_and_takes_a_path():
    assert git("repo", ref="v1", init=True) == Git(source="repo", ref="v1", init=True)
    assert git(Path("repo")).source == "repo"


def test_a_wrong_git_option_points_at_its_line(tmp_path):
    path = tmp_path / "bad.eval.py"
    path.write_text(textwrap.dedent("""
        from engine import evaluation, git

        @evaluation(workspace=git(init=True, ref=5))
        def case(c):
            pass
    """).lstrip("\n"))
    with pytest.raises(EvalFileError) as caught:
        load_eval_file(path.resolve())
    text = str(caught.value)
    assert text.startswith(f"{path.resolve()}:3: ") and "ref" in text and "\n" not in text, text
