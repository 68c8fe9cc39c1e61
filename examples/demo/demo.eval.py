"""The demo suite: one pass, one assertion failure, one infra error.

Run it with `proctor run examples/demo -v`. The agent is a small scripted
program (agent/agent.py) speaking the command-harness protocol, so the suite
runs offline with no model.
"""

from pathlib import Path

from engine import Step, evaluation, git

AGENT = {".agent/agent.py": Path("agent/agent.py")}


@evaluation(workspace=git(init=True), files=AGENT, rules="Keep functions small and tested.", tags=["demo"])
def writes_greet(c):
    c.send("Create greet.py with greet(name) returning 'Hello, <name>!' and a test for it.")
    c.exec("python3 -c \"from greet import greet; assert greet('Ada') == 'Hello, Ada!'\"").to_succeed()
    c.exec("cat greet.py").stdout.to_contain("def greet")
    c.capture("greet.py")


@evaluation(workspace=git(init=True), files=AGENT, tags=["demo"])
def adds_numbers(c):
    # The scripted agent gets this one wrong on purpose: an assertion failure.
    c.send("Create calc.py with add(a, b) returning the sum.")
    c.exec("python3 -c 'from calc import add; assert add(2, 3) == 5, add(2, 3)'").to_succeed()


@evaluation(files=AGENT, setup=[Step("test -f requirements.lock || (echo 'requirements.lock is missing' >&2; exit 1)", timeout="30s")],
            tags=["demo"])
def needs_a_lockfile(c):
    # The setup step fails, so the agent never gets a fair try: infra_error, void.
    c.send("Install the locked requirements.")
    c.exec("true").to_succeed()
