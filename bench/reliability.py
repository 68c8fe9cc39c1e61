#!/usr/bin/env python3
"""Issue 8's attacks, re-run against the real engine on the real Docker daemon.

Each attack is a small suite (an eval file, a proctor.toml and a hostile agent)
written into a temporary folder and run as a user runs it: `proctor run DIR
--store DB --json` in a subprocess. For each run the script measures

    outcome     the stored record (`proctor show ID --json`) against what the
                attack should give: the limit named, a 403, exit 2, …
    RSS         the engine process's peak resident memory (os.wait4 on it alone)
    store       the store's bytes on disk once the process has ended (db, -wal, -shm)
    leaks       the attack's secrets (a brokered key, a host *_TOKEN variable, a
                password, the answer in git history) found as raw bytes, base64,
                base64url, hex or reversed in the store's files or in what the
                run printed
    tracebacks  "Traceback" in anything `proctor` printed

and prints one markdown table, then a summary line. Goals (issue 8): engine memory
flat and <= 300 MB whatever the agent does, the store bounded by the caps, no leak,
no traceback. A row that misses its expected result or a goal is marked ✗. Always
exits 0 once the table is printed.

    DOCKER_HOST=unix:///run/proctor-docker/docker.sock python bench/reliability.py
        [--only WORD[,WORD…]] [--quick] [--rev REV] [--keep] [--list]

The engine measured is the working tree's, or with `--rev` a git revision
exported with `git archive` (so unfinished edits in the checkout do not count).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import ssl
import string
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.conftest import EchoUpstream, HostService  # noqa: E402  (the tests' loopback stand-ins)

SOURCE = ROOT  # the engine's code: the working tree, or a revision exported by --rev
DOCKER = None  # a docker client, to look for containers a batch left behind
IMAGE = "proctor-test-base:bookworm"
RSS_GOAL_MB = 300
RUN_TIMEOUT_S = 240

HEADER = "import os\nfrom pathlib import Path\nfrom engine import evaluation, git, Secret\n"
SEND = '    c.send("go")\n'
SEND_AND_CHECK = '    c.send("go")\n    c.exec("true").to_succeed()\n'
FINISHED = """echo '{"type":"finished","reason":"done"}'\n"""
TOML = f"""
[defaults]
image = "{IMAGE}"
timeout = "2m"
concurrency = 2

[[variants]]
name = "hostile"
harness = "command"
command = "sh .agent/run.sh"
"""


def _random(n: int) -> str:
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(n))


# A host variable every engine run gets: its name says secret, so its value is never stored.
HOST_TOKEN = "rel-" + _random(24)
# Brokered to the loopback stand-in of api.example.test: the agent holds only a placeholder.
BROKERED_KEY = "real-example-key-" + _random(16)
PASSWORD = "Hunter2-" + _random(10)
ANSWER = "the-answer-" + _random(8)


# --- leaks ------------------------------------------------------------------------------------


def leak_forms(secret: str) -> set[bytes]:
    """The secret as raw bytes, hex, reversed, and in base64/base64url at each of the three
    byte alignments (only the characters its own bits decide: those a grep can find)."""
    data = secret.encode()
    forms = {data, data.hex().encode(), data.hex().upper().encode(), data[::-1]}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data)
        stable = encoded[-(-8 * offset // 6): 8 * (offset + len(data)) // 6]
        forms |= {stable, stable.replace(b"+", b"-").replace(b"/", b"_")}
    return forms


def count_leaks(secrets: list[str], blobs: list[bytes]) -> int:
    forms = [form for secret in secrets for form in leak_forms(secret)]
    return sum(blob.count(form) for form in forms for blob in blobs)


# The scanner must find what it looks for, or every "0 leaks" below means nothing.
_TOKEN = HOST_TOKEN.encode()
assert count_leaks([HOST_TOKEN], [base64.b64encode(b"x:" + _TOKEN), _TOKEN[::-1],
                                  _TOKEN.hex().encode()]) == 3


# --- running the engine -----------------------------------------------------------------------


@dataclass
class Run:
    """One `proctor run` process, measured, and what it stored."""
    code: int
    stdout: str
    stderr: str
    rss_mb: float
    seconds: float
    ended: float  # time.monotonic() when the process ended
    store: Path
    store_bytes: int = 0
    batch: dict | None = None
    records: list[dict] = field(default_factory=list)
    left: int = 0  # containers of the batch still on the daemon


OUTSIDE = ("PROCTOR_STORE", "CI", "GITHUB_ACTIONS")  # another store; a trigger other than cli


def engine_env(extra: dict[str, str], tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OUTSIDE}
    env["PYTHONPATH"] = str(SOURCE)  # ahead of the venv's editable install
    env["RELIABILITY_TOKEN"] = HOST_TOKEN
    env["TMPDIR"] = str(tmp)  # the run's own gateway folders, to see what it leaves
    return env | extra


def proctor(*args: str, store: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "engine.cli", *args, "--store", str(store)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120,
                          cwd=store.parent)


def run_engine(folder: Path, *, args: tuple[str, ...] = ("--json",),
               env: dict[str, str] | None = None,
               during: Callable[[subprocess.Popen, Path], None] | None = None) -> Run:
    """`proctor run folder` with its own store: its peak RSS alone, then its batch and records."""
    work = folder.parent
    store, out, err, tmp = work / "proctor.db", work / "stdout.txt", work / "stderr.txt", work / "t"
    tmp.mkdir(exist_ok=True)
    environ = engine_env(env or {}, tmp)
    started = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        command = [sys.executable, "-m", "engine.cli", "run", str(folder), *args,
                   "--store", str(store)]
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=environ, cwd=work,
                                   start_new_session=True)
        if during:
            threading.Thread(target=during, args=(process, out), daemon=True).start()
        status, usage = wait_for(process)
    ended = time.monotonic()
    run = Run(code=os.waitstatus_to_exitcode(status), stdout=out.read_text(errors="replace"),
              stderr=err.read_text(errors="replace"), rss_mb=usage.ru_maxrss / 1024,
              seconds=ended - started, ended=ended, store=store,
              store_bytes=sum(p.stat().st_size for p in work.glob("proctor.db*")))
    if store.exists():
        listing = proctor("ls", "--json", store=store, env=environ)
        run.stderr += listing.stderr
        batches = json.loads(listing.stdout or "[]") if listing.returncode == 0 else []
        run.batch = batches[0] if batches else None
    for trial in (t for r in (run.batch or {}).get("runs", []) for t in r["trials"]):
        shown = proctor("show", trial["id"], "--json", store=store, env=environ)
        run.stderr += shown.stderr
        lost = {"id": trial["id"]}
        run.records.append(json.loads(shown.stdout) if shown.returncode == 0 else lost)
    if run.batch:
        label = ["proctor=1", f"proctor.batch={run.batch['batch_id']}"]
        run.left = len(DOCKER.containers.list(all=True, filters={"label": label}))
    return run


def wait_for(process: subprocess.Popen):
    """The exit status and resource use of this one child (os.wait4), killed past the timeout."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits again
            return status, usage
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)  # the session we started it in, nothing else
            deadline = float("inf")
        time.sleep(0.05)


# --- suites and records -------------------------------------------------------------------------


@dataclass
class Context:
    root: Path
    quick: bool
    servers: dict[str, ThreadingHTTPServer] = field(default_factory=dict)

    def scale(self, n: int) -> int:
        return n // 10 if self.quick else n


def suite(ctx: Context, name: str, agent: str, *, options: str = "", body: str = SEND,
          toml: str = TOML, files: dict[str, str | bytes] | None = None) -> Path:
    """One case `attack` whose agent is `.agent/run.sh`, with `files` placed under `.agent/`."""
    folder = ctx.root / name / "s"
    folder.mkdir(parents=True)
    files = {"run.sh": agent, **(files or {})}
    for file, content in files.items():
        (folder / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    placed = ", ".join(f'".agent/{f}": Path("{f}")' for f in files)
    options = f"files={{{placed}}}" + (f", {options}" if options else "")
    source = f"{HEADER}\n@evaluation({options})\ndef attack(c):\n{body}"
    (folder / "attack.eval.py").write_text(source)
    (folder / "proctor.toml").write_text(textwrap.dedent(toml))
    return folder


def record(run: Run) -> dict:
    return run.records[0] if run.records else {}


def outcome(rec: dict) -> str:
    """'pass', or 'fail · limit · "memory limit 128 MiB reached"'."""
    if not rec.get("outcome"):
        return "record unreadable" if rec else "no record"
    failure = rec.get("failure")
    if not failure:
        return rec["outcome"]
    return f'{rec["outcome"]} · {failure.get("kind")} · "{elide(failure.get("reason", ""), 70)}"'


def elide(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def turn(rec: dict) -> dict:
    return (rec.get("turns") or [{}])[0]


def passed(rec: dict) -> bool:
    return rec.get("outcome") == "pass"


def warnings(rec: dict) -> list[str]:
    return [w for item in rec.get("trajectory", []) for w in item.get("warnings", [])]


def texts(rec: dict) -> list[str]:
    return [i.get("text") or i.get("output") or "" for i in rec.get("trajectory", [])]


def redacted(rec: dict) -> int:
    return json.dumps(rec).count("[redacted]")


# --- the attacks --------------------------------------------------------------------------------

Verdict = tuple[bool, str]  # held (the expected result), what happened


@dataclass
class Attack:
    run: Callable[[Context], tuple[Run, Verdict]]
    secrets: list[str]  # what neither the store nor the output may hold


ATTACKS: dict[str, Attack] = {}


def attack(name: str, secrets: list[str] | None = None):
    """Register an attack under `name`; its run must not store or print `secrets`."""
    def register(fn: Callable[[Context], tuple[Run, Verdict]]):
        ATTACKS[name] = Attack(fn, secrets or [HOST_TOKEN])
        return fn
    return register


@attack("baseline: a no-op agent")
def baseline(ctx):
    run = run_engine(suite(ctx, "baseline", FINISHED))
    return run, (passed(record(run)), outcome(record(run)))


# Containment: each limit reached is fail · limit, naming it.

def expect_limit(ctx: Context, name: str, options: str, agent: str, reason: str):
    run = run_engine(suite(ctx, name, agent + FINISHED, options=options))
    rec = record(run)
    failure = rec.get("failure") or {}
    got = (rec.get("outcome"), failure.get("kind"), failure.get("reason"))
    held = got == ("fail", "limit", reason)
    return run, (held, outcome(rec))


@attack('memory: 300 MB past `memory="128m"`')
def memory(ctx):
    return expect_limit(ctx, "memory", 'memory="128m"', "python3 -c 'b = b\"x\" * (300 << 20)'\n",
                        "memory limit 128 MiB reached")


@attack("pids: 100 processes past `pids=64`")
def pids(ctx):
    return expect_limit(ctx, "pids", "pids=64", "for i in $(seq 100); do sleep 3 & done; wait\n",
                        "process limit 64 reached")


@attack('disk: 120 MB outside /workspace past `disk="100m"`')
def disk(ctx):
    fill = "head -c 60m /dev/zero > /var/tmp/f1; head -c 60m /dev/zero > /var/tmp/f2\n"
    return expect_limit(ctx, "disk", 'disk="100m"', fill, "disk limit 100 MiB reached")


SETUID_AGENT = """
gw=/run/proctor-gateway
if cp /usr/bin/id $gw/id 2>/tmp/err && chmod 4755 $gw/id 2>>/tmp/err
then text="setuid binary written"; else text="refused: $(head -c 80 /tmp/err | tr -d '\\n\\"')"; fi
echo "{\\"type\\":\\"message\\",\\"role\\":\\"assistant\\",\\"text\\":\\"$text\\"}"
grep " $gw " /proc/self/mountinfo > mount.txt
""" + FINISHED
SETUID_CHECKS = """    c.send("escape")
    c.exec("test -e /run/proctor-gateway/id").to_fail()
    options = set(c.read_file("mount.txt").split()[5].split(","))
    assert {"ro", "nosuid", "nodev"} <= options, options
"""


@attack("gateway folder: a root agent writes a setuid binary into it")
def gateway_setuid(ctx):
    run = run_engine(suite(ctx, "setuid", SETUID_AGENT, body=SETUID_CHECKS,
                           options='user="root", allow=["example.test"]'))
    rec = record(run)
    said = next((t for t in texts(rec) if t), "")
    held = passed(rec) and said.startswith("refused")
    return run, (held, f"{outcome(rec)} · agent: {elide(said, 60)} · mount ro,nosuid,nodev")


# The egress gateway, with loopback stand-ins: api.example.test (HTTPS, its own CA) and a
# service of the host's own on 127.0.0.1.

HTTP_AGENT = r'''
import json, os, urllib.error, urllib.request
def say(**item):
    print(json.dumps(item), flush=True)
for name in ("no_proxy", "NO_PROXY"):  # the relay's own loopback is exempt; ask the gateway anyway
    os.environ.pop(name, None)
url, key = os.environ["ATTACK_URL"], os.environ.get("EXAMPLE_KEY")
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
try:
    answer = urllib.request.urlopen(request, timeout=30).read().decode()
    open("/tmp/answer.txt", "w").write(answer)
    say(type="command", command="GET " + url, exitCode=0, output=answer)
except urllib.error.HTTPError as e:
    say(type="message", role="assistant", text=f"{url} {e.code}")
say(type="finished", reason="done")
'''
BROKERED = 'secrets={"EXAMPLE_KEY": Secret(hosts=["api.example.test"])}'
ECHO_CHECKS = f"""    c.send("go")
    c.exec("cat /tmp/answer.txt").stdout.to_contain("Bearer proctor-placeholder-EXAMPLE_KEY")
    grep = "grep -rl {BROKERED_KEY} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; true"
    c.exec(grep).stdout.to_equal("")
"""


def http_attack(ctx: Context, name: str, url: str, options: str, body: str = SEND):
    """The agent GETs `url` through the gateway; returns the run, what reached each stand-in,
    and the first egress entry."""
    port, ca, upstream_seen = start_upstream(ctx)
    _, service_seen = start_host_service(ctx)
    toml = TOML + f"""
[gateway]
resolve = {{"api.example.test" = "127.0.0.1:{port}"}}
trust = ["{ca}"]
"""
    path = suite(ctx, name, "python3 .agent/agent.py\n", files={"agent.py": HTTP_AGENT}, body=body,
                 options=f'env={{"ATTACK_URL": "{url}"}}, {options}', toml=toml)
    before = (len(upstream_seen), len(service_seen))
    run = run_engine(path, env={"EXAMPLE_KEY": BROKERED_KEY})
    reached = {"upstream": upstream_seen[before[0]:], "service": service_seen[before[1]:]}
    return run, reached, (record(run).get("egress") or [{}])[0]


def denied(entry: dict) -> str:
    reason = re.split(r"[;:] ", entry.get("reason") or "")[0]  # its first clause
    return f"egress {entry.get('status')} \"{elide(reason, 50)}\""


@attack('`allow=["localhost"]`: the agent asks for a service on the host\'s 127.0.0.1')
def allow_localhost(ctx):
    port, _ = start_host_service(ctx)
    run, reached, entry = http_attack(ctx, "localhost", f"http://localhost:{port}/admin",
                                      'allow=["localhost"]')
    rec = record(run)
    held = passed(rec) and entry.get("status") == 403 and not reached["service"]
    return run, (held, f"{outcome(rec)} · {denied(entry)} · "
                       f"host service got {len(reached['service'])} requests")


@attack("plain `http://` to a brokered host, with the key",
        secrets=[BROKERED_KEY, HOST_TOKEN])
def plain_http(ctx):
    run, reached, entry = http_attack(ctx, "plain", "http://api.example.test/v1/plain", BROKERED)
    rec = record(run)
    cleartext = "cleartext" in (entry.get("reason") or "")
    held = passed(rec) and entry.get("status") == 403 and cleartext and not reached["upstream"]
    return run, (held, f"{outcome(rec)} · {denied(entry)} · "
                       f"upstream got {len(reached['upstream'])} requests")


@attack("echoing upstream: a brokered host answers with the request's headers",
        secrets=[BROKERED_KEY, HOST_TOKEN])
def echo_upstream(ctx):
    run, reached, _ = http_attack(ctx, "echo", "https://api.example.test/v1/headers", BROKERED,
                                  body=ECHO_CHECKS)
    sent = [r for r in reached["upstream"] if r["auth"] == f"Bearer {BROKERED_KEY}"]
    rec = record(run)
    return run, (passed(rec) and len(sent) == 1,
                 f"{outcome(rec)} · the key went upstream {len(sent)}×, came back as the "
                 "placeholder, on no file of the sandbox")


# Hostile harness lines: each once lost the record or failed the trial on the agent's account.

def nested(depth: int) -> object:
    value: object = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


def hostile_lines(ctx: Context, name: str, lines: list[str], detail: Callable[[dict], str]):
    text = "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")
    run = run_engine(suite(ctx, name, "cat .agent/lines.jsonl\n" + FINISHED, body=SEND_AND_CHECK,
                           files={"lines.jsonl": text}))
    rec = record(run)
    held = passed(rec) and turn(rec).get("status") == "completed"
    return run, (held, f"{outcome(rec)} · {detail(rec) if rec else ''}")


@attack("harness line: usage `2**63` and `2**64`")
def usage_huge(ctx):
    line = json.dumps({"type": "usage", "input": 2**63, "output": 2**64})
    return hostile_lines(ctx, "usage", [line], lambda rec: "usage clamped to "
                         f"{rec['usage']['input']:,} / {rec['usage']['output']:,}")


@attack("harness line: a toolCall nested 520 deep")
def deep_tool_call(ctx):
    line = json.dumps({"type": "toolCall", "name": "edit", "input": nested(520)})
    return hostile_lines(ctx, "deep", [line],
                         lambda rec: f"warning: \"{elide('; '.join(warnings(rec)), 50)}\"")


@attack("harness lines: `NaN`, `1e309` and `at: 1e300`")
def non_finite(ctx):
    lines = ['{"type":"command","command":"ls","exitCode":NaN,"output":"x"}',
             '{"type":"command","command":"ls","exitCode":1e309,"output":"x"}',
             '{"type":"message","role":"assistant","text":"hi","at":1e300}']
    return hostile_lines(ctx, "nonfinite", lines, lambda rec: f"{len(warnings(rec))} items "
                         "with a warning, the field dropped")


@attack("harness lines: a lone surrogate `\\ud800`, escaped and raw")
def lone_surrogate(ctx):
    lines = ['{"type":"message","role":"assistant","text":"bad \\ud800 text"}',
             '{"type":"message","role":"assistant","text":"raw \ud800 byte"}']
    return hostile_lines(ctx, "surrogate", lines, lambda rec: "stored as " + " / ".join(
        repr(t) for t in texts(rec) if t.startswith(("bad", "raw"))))


# Floods: sizes from the issue (a tenth with --quick). {n} is the size.

FLOODS = {
    "line": "import json, sys\nsys.stdout.write(json.dumps("
            "{'type': 'message', 'role': 'assistant', 'text': 'x' * {n}}) + '\\n')\n",
    "items": "import sys\nfor i in range({n}):\n    sys.stdout.write('{\"type\":\"command\","
             "\"command\":\"ls %d\",\"exitCode\":0,\"output\":\"ok\"}\\n' % i)\n",
    "lines": "import sys\n"
             "block = ''.join('raw output line number %07d\\n' % i for i in range(2000))\n"
             "for _ in range({n}):\n    sys.stdout.write(block)\n",  # 60 KB a block
    "diff": "for i in range(20):\n"
            "    open('f%02d.txt' % i, 'w').write(('line %d of changed text\\n' % i) * {n})\n"
            "for i in range(300):\n"
            "    open('small%03d.txt' % i, 'w').write(('small file %d\\n' % i) * 800)\n",
    "sparse": "with open('big', 'wb') as f:\n    f.truncate({n})\n",
    "eyj": "import sys\nsys.stdout.write('-eyJ' * {n} + '\\n')\n",
}


def flood(ctx: Context, name: str, n: int, trials: int = 1) -> tuple[Run, dict]:
    script = FLOODS[name].replace("{n}", str(n))
    toml, options = TOML, "workspace=git(init=True)"
    if trials > 1:
        toml = TOML.replace("concurrency = 2", f"concurrency = {trials}")
        options += f", trials={trials}"
    run = run_engine(suite(ctx, f"{name}-{trials}", "python3 .agent/flood.py\n" + FINISHED,
                           files={"flood.py": script}, options=options, body=SEND_AND_CHECK,
                           toml=toml))
    return run, record(run)


@attack("flood: one 50 MB JSON line")
def line_50mb(ctx):
    run, rec = flood(ctx, "line", ctx.scale(50_000_000))
    raw, ms = turn(rec).get("raw_output", ""), turn(rec).get("ms", 0)
    return run, (passed(rec) and "truncated" in raw,
                 f"{outcome(rec)} · raw output kept {len(raw):,} chars, turn {ms / 1000:.1f} s")


@attack("flood: 100,000 items")
def items_100k(ctx):
    run, rec = flood(ctx, "items", ctx.scale(100_000))
    kept = rec.get("trajectory") or [{}]
    last = kept[-1].get("text") or ""
    return run, (passed(rec) and "items dropped" in last,
                 f"{outcome(rec)} · {len(kept):,} items kept, the last \"{elide(last, 30)}\"")


@attack("flood: 60 MB of short lines")
def short_lines(ctx):
    run, rec = flood(ctx, "lines", ctx.scale(1000))
    raw = turn(rec).get("raw_output", "")
    return run, (passed(rec) and "truncated" in raw,
                 f"{outcome(rec)} · raw output kept {len(raw):,} chars")


def diff_sizes(rec: dict) -> str:
    t = turn(rec)
    return (f"{len(t.get('files_changed', []))} files; diff {len(t.get('diff', '')):,} + "
            f"cumulative {len(t.get('cumulative_diff', '')):,} chars")


@attack("flood: 78 MB of changes in the workspace")
def diff_78mb(ctx):
    run, rec = flood(ctx, "diff", ctx.scale(160_000))
    cut = "diff of f00.txt too large" in turn(rec).get("diff", "")
    return run, (passed(rec) and cut, f"{outcome(rec)} · {diff_sizes(rec)}")


@attack("flood: 78 MB of changes in each of 4 trials at concurrency 4 (the default)")
def diff_78mb_x4(ctx):
    run, _ = flood(ctx, "diff", ctx.scale(160_000), trials=4)
    outcomes = [r.get("outcome") for r in run.records]
    return run, (outcomes == ["pass"] * 4, f"{outcomes.count('pass')} of 4 pass")


@attack("flood: 78 MB of changes in each of 8 trials at concurrency 8")
def diff_78mb_x8(ctx):
    run, _ = flood(ctx, "diff", ctx.scale(160_000), trials=8)
    outcomes = [r.get("outcome") for r in run.records]
    return run, (outcomes == ["pass"] * 8, f"{outcomes.count('pass')} of 8 pass")


@attack("flood: a 1 GiB sparse file in the workspace (read_tree)")
def sparse_file(ctx):
    run, rec = flood(ctx, "sparse", (256 if ctx.quick else 1024) << 20)
    found = re.search(r"<large file: \d+ bytes>", turn(rec).get("diff", ""))
    shown = f"`{found.group(0)}`" if found else "not marked"
    return run, (passed(rec) and bool(found), f"{outcome(rec)} · in the diff as {shown}")


@attack("flood: 512 KiB of `-eyJ` in the output (redaction time)")
def eyj(ctx):
    run, rec = flood(ctx, "eyj", ctx.scale(512 * 256))
    ms = turn(rec).get("ms", 0)
    return run, (passed(rec) and ms < 10_000 and bool(turn(rec).get("raw_output")),
                 f"{outcome(rec)} · turn {ms / 1000:.2f} s (was 37 s)")


# Secrets the agent holds and prints.

ENCODED_AGENT = r'''
import base64, json, os
value = os.environ["FOUND"].encode()
forms = {"base64": base64.b64encode(value), "base64url": base64.urlsafe_b64encode(b"u:" + value),
         "hex": value.hex().encode(), "reversed": value[::-1], "raw": value}
text = " ".join(f"{k}={v.decode()}" for k, v in forms.items())
print(json.dumps({"type": "message", "role": "assistant", "text": "my key: " + text}))
print(json.dumps({"type": "command", "command": "echo " + text, "exitCode": 0, "output": text}))
print("raw line " + text)
open("leak.txt", "w").write(text + "\n")
print(json.dumps({"type": "finished", "reason": "done"}))
'''
PASSWORD_AGENT = f"""
echo '{{"type":"message","role":"assistant",'\\
'"text":"use password={PASSWORD} or {{\\\\"secret\\\\": \\\\"{PASSWORD}\\\\"}}"}}'
echo "db: mysql --user=root --password={PASSWORD}"
echo "DB_PASSWORD={PASSWORD}" > .env
""" + FINISHED


@attack("the agent prints a host token in base64, base64url, hex, reversed")
def encoded_secret(ctx):
    options = 'workspace=git(init=True), env={"FOUND": os.environ["RELIABILITY_TOKEN"]}'
    run = run_engine(suite(ctx, "encoded", "python3 .agent/agent.py\n", options=options,
                           files={"agent.py": ENCODED_AGENT}))
    rec = record(run)
    wrote = "leak.txt" in turn(rec).get("files_changed", [])
    return run, (passed(rec) and wrote and redacted(rec) > 0,
                 f"{outcome(rec)} · {redacted(rec)} [redacted] in the record "
                 "(message, command, raw output, diff)")


@attack('`password=` and `"secret":` assignments in output and a file',
        secrets=[PASSWORD, HOST_TOKEN])
def password(ctx):
    run = run_engine(suite(ctx, "password", PASSWORD_AGENT, options="workspace=git(init=True)"))
    rec = record(run)
    return run, (passed(rec) and redacted(rec) > 0,
                 f"{outcome(rec)} · {redacted(rec)} [redacted] in the record")


# The workspace must not hold the answer.

CHEATER = """
for try in "git show v2:f.txt" "git log --all -p" "git reflog -p" "git fetch origin" \\
           "git branch -a" "git tag"; do
  echo "\\$ $try"; sh -c "$try" 2>&1
done > /tmp/tries.txt
python3 -c 'import json; print(json.dumps({"type": "command", "command": "git …",
            "exitCode": 0, "output": open("/tmp/tries.txt").read()}))'
""" + FINISHED
GIT_CHECKS = """    c.send("find the answer")
    c.exec("git show v2:f.txt").to_fail()
    c.exec("git log --all --oneline | wc -l").stdout.to_equal("1")
    c.exec("cat f.txt").stdout.to_equal("v1")
"""


def answer_repo(folder: Path) -> str:
    """commit1 (f.txt=v1), then the answer in a later commit, a tag, a branch; returns commit1."""
    def git(*args: str) -> str:
        command = ["git", "-C", str(folder), "-c", "user.email=t@t", "-c", "user.name=t", *args]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    folder.mkdir()
    git("init", "-q", "-b", "main")
    (folder / "f.txt").write_text("v1\n")
    git("add", ".")
    git("commit", "-qm", "commit1")
    commit1 = git("rev-parse", "HEAD")
    (folder / "f.txt").write_text(f"v2 {ANSWER}\n")
    git("commit", "-qam", f"commit2 {ANSWER}")
    git("tag", "-a", "v2", "-m", f"release {ANSWER}")
    git("branch", f"solution-{ANSWER}")
    git("remote", "add", "origin", str(folder))
    return commit1


@attack("workspace `git(repo, ref=commit1, init=True)`: `git show v2:f.txt`, `git log --all`",
        secrets=[ANSWER, HOST_TOKEN])
def git_answer(ctx):
    repo = ctx.root / "repo"
    commit1 = answer_repo(repo)
    run = run_engine(suite(ctx, "git", CHEATER, body=GIT_CHECKS,
                           options=f'workspace=git("{repo}", ref="{commit1}", init=True)'))
    rec = record(run)
    return run, (passed(rec), f"{outcome(rec)} · 1 commit, no tag, branch or remote: "
                              "the agent's tries found nothing")


# Mistakes in the eval file or proctor.toml: exit 2, one line, no batch started.

def mistake(ctx: Context, name: str, options: str, toml: bytes | None = None):
    folder = suite(ctx, name, FINISHED, options=options)
    if toml is not None:
        (folder / "proctor.toml").write_bytes(toml)
    run = run_engine(folder)
    lines = run.stderr.strip().splitlines()
    line = elide((lines or [""])[0].replace(f"{folder}/", ""), 80)
    return run, (run.code == 2 and len(lines) == 1 and run.batch is None,
                 f"exit {run.code} · {len(lines)} line: \"{line}\"")


@attack('eval mistake: `setup="echo hi"`')
def setup_string(ctx):
    return mistake(ctx, "setup", 'setup="echo hi"')


@attack("eval mistake: `tags=[1, None]`")
def tags_none(ctx):
    return mistake(ctx, "tags", "tags=[1, None]")


@attack("eval mistake: `timeout=inf`")
def timeout_inf(ctx):
    return mistake(ctx, "timeout", 'timeout=float("inf")')


@attack("`proctor.toml` in Latin-1, not UTF-8")
def toml_latin1(ctx):
    return mistake(ctx, "latin1", "", toml=TOML.replace("hostile", "caf\xe9").encode("latin-1"))


# SIGTERM, as `timeout`, a CI cancel or a shutdown send it.

def sigterm_when_agents_run(agents: int, sent: list[float]):
    """SIGTERM the engine once `agents` trials are inside their turn (read from its -v lines)."""
    def during(process: subprocess.Popen, stdout: Path) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.returncode is None:
            if stdout.read_text(errors="replace").count(" harness ") >= agents:
                time.sleep(1)  # the agents are now sleeping in their turns
                process.send_signal(signal.SIGTERM)
                sent.append(time.monotonic())
                return
            time.sleep(0.1)
    return during


@attack("SIGTERM during a run (2 trials in their turn, 1 waiting)")
def sigterm(ctx):
    toml = TOML.replace('command = "sh .agent/run.sh"', 'command = "sleep 60"')
    folder = suite(ctx, "sigterm", FINISHED, options='trials=3, allow=["example.com"]', toml=toml)
    sent: list[float] = []
    run = run_engine(folder, args=("-v",), during=sigterm_when_agents_run(2, sent))
    outcomes = sorted(str(r.get("outcome")) for r in run.records)
    gateways = list((folder.parent / "t").glob("proctor-gw-*"))
    status = (run.batch or {}).get("status")
    held = (bool(sent) and run.code == 130 and status == "interrupted" and run.left == 0
            and outcomes == ["infra_error", "infra_error", "skipped"] and not gateways)
    stopped = run.ended - sent[0] if sent else float("nan")
    return run, (held, f"exit {run.code} {stopped:.1f} s after SIGTERM · batch {status} · "
                       f"trials {', '.join(outcomes)} · {run.left} containers, "
                       f"{len(gateways)} gateway folders left")


# --- loopback stand-ins -------------------------------------------------------------------------


def _serve(ctx: Context, name: str, handler, context: ssl.SSLContext | None = None):
    if name not in ctx.servers:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if context:
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        ctx.servers[name] = server
    return ctx.servers[name]


def _cert(name: str, issuer_key, issuer, key, ca: bool):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer or subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(hours=1))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def start_upstream(ctx: Context) -> tuple[int, Path, list[dict]]:
    """An HTTPS stand-in for api.example.test on 127.0.0.1 with its own CA: (port, CA, requests)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder = ctx.root / "upstream"
    if "upstream" not in ctx.servers:
        folder.mkdir()
        ca_key, key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(2))
        ca = _cert("Upstream Test CA", ca_key, None, ca_key, ca=True)
        leaf = _cert("api.example.test", ca_key, ca.subject, key, ca=False)
        (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        (folder / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        (folder / "leaf.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(folder / "leaf.pem", folder / "leaf.key")
        _serve(ctx, "upstream", EchoUpstream, context)
    return ctx.servers["upstream"].server_address[1], folder / "ca.pem", EchoUpstream.seen


def start_host_service(ctx: Context) -> tuple[int, list[str]]:
    return _serve(ctx, "service", HostService).server_address[1], HostService.seen


# --- the table ----------------------------------------------------------------------------------


@dataclass
class Row:
    attack: str
    held: bool
    happened: str
    rss_mb: float
    store_bytes: int
    leaks: int
    tracebacks: int
    seconds: float


def measure(ctx: Context, name: str) -> Row:
    run, (held, happened) = ATTACKS[name].run(ctx)
    printed = [run.stdout.encode(), run.stderr.encode()]
    stored = [p.read_bytes() for p in run.store.parent.glob("proctor.db*")]
    lost = [r.get("id") for r in run.records if not r.get("outcome")]
    if lost:
        held, happened = False, f"{happened} · LOST records {', '.join(lost)}"
    if run.left and "containers" not in happened:
        held, happened = False, f"{happened} · {run.left} containers left"
    if run.rss_mb > RSS_GOAL_MB:
        held, happened = False, f"{happened} · RSS over {RSS_GOAL_MB} MB"
    leaks = count_leaks(ATTACKS[name].secrets, printed + stored)
    row = Row(attack=name, held=held, happened=happened, rss_mb=run.rss_mb,
              store_bytes=run.store_bytes, leaks=leaks,
              tracebacks=run.stdout.count("Traceback") + run.stderr.count("Traceback"),
              seconds=run.seconds)
    row.held = row.held and row.leaks == 0 and row.tracebacks == 0
    return row


def size(n: int) -> str:
    return "no store" if n == 0 else f"{n / 1e6:.2f} MB"


def table(rows: list[Row]) -> str:
    lines = ["| attack | outcome / what happened | engine peak RSS | store size | leaks "
             "| tracebacks |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        happened = r.happened.replace("|", "/")
        mark = "✓" if r.held else "✗"
        lines.append(f"| {r.attack} | {mark} {happened} | {r.rss_mb:.0f} MB | "
                     f"{size(r.store_bytes)} | {r.leaks} | {r.tracebacks} |")
    return "\n".join(lines)


def export(rev: str, into: Path) -> str:
    """The engine's code at `rev` into `into` (git archive); returns the short commit id."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", rev], check=True,
                          capture_output=True, text=True).stdout.strip()


def main() -> None:
    global DOCKER, SOURCE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only the attacks whose names hold one of these words (a,b)")
    parser.add_argument("--quick", action="store_true", help="floods at a tenth of their size")
    parser.add_argument("--rev", help="measure this git revision's engine, not the working tree's")
    parser.add_argument("--keep", action="store_true", help="keep suites and stores, to reproduce")
    parser.add_argument("--list", action="store_true", help="list the attacks and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join(ATTACKS))
        return
    os.environ.setdefault("DOCKER_HOST", "unix:///run/proctor-docker/docker.sock")
    import docker

    try:
        DOCKER = docker.from_env(timeout=120)
        DOCKER.images.get(IMAGE)
    except Exception as e:  # any failure to reach the daemon or find the image
        sys.exit(f"reliability: needs Docker at {os.environ['DOCKER_HOST']} and {IMAGE}: {e}")
    words = [w.strip().lower() for w in (args.only or "").split(",") if w.strip()]
    names = [n for n in ATTACKS if not words or any(w in n.lower() for w in words)]
    root = Path(tempfile.mkdtemp(prefix="prel-"))  # short: gateway sockets live below it
    ctx = Context(root=root, quick=args.quick)
    engine = f"commit {export(args.rev, root / 'src')}" if args.rev else "the working tree"
    if args.rev:
        SOURCE = root / "src"
    started = time.monotonic()
    rows = []
    try:
        for name in names:
            rows.append(measure(ctx, name))
            print(f"  {'held' if rows[-1].held else 'FAIL'} {rows[-1].seconds:5.1f} s  {name}",
                  file=sys.stderr, flush=True)
    finally:
        for server in ctx.servers.values():
            server.shutdown()
        if args.keep:
            print(f"suites, stores and output kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(table(rows))
    print()
    print(f"{len(rows)} attacks, {sum(r.held for r in rows)} held · max engine RSS "
          f"{max(r.rss_mb for r in rows):.0f} MB (goal <= {RSS_GOAL_MB}) · max store "
          f"{size(max(r.store_bytes for r in rows))} · leaks {sum(r.leaks for r in rows)} · "
          f"tracebacks {sum(r.tracebacks for r in rows)} · {time.monotonic() - started:.0f} s"
          f"{' (--quick)' if args.quick else ''} · engine: {engine}")


if __name__ == "__main__":
    main()
