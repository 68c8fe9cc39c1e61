"""A scripted agent for the command harness: no model, a few canned skills.

It reads the prompt on standard input and prints the protocol's JSON lines.
"""

import json
import os
import subprocess
import sys
import time


def say(**item):
    item.setdefault("at", int(time.time() * 1000))
    print(json.dumps(item), flush=True)


def write(path, text):
    change = "modify" if os.path.exists(path) else "add"
    with open(path, "w") as f:
        f.write(text)
    say(type="fileChange", path=path, change=change)


def run(command):
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    say(type="command", command=command, exitCode=done.returncode, output=(done.stdout + done.stderr)[-2000:])


prompt = sys.stdin.read()
say(type="message", role="assistant", text=f"Working on: {prompt.strip()[:80]}")
if "greet" in prompt:
    write("greet.py", 'def greet(name):\n    """Greet someone by name."""\n    return f"Hello, {name}!"\n')
    write("test_greet.py", "from greet import greet\n\n\ndef test_greet():\n    assert greet('Ada') == 'Hello, Ada!'\n")
    run("python3 -c 'from greet import greet; print(greet(\"Ada\"))'")
    say(type="message", role="assistant", text="I created greet.py and test_greet.py.")
elif "add(" in prompt:
    write("calc.py", "def add(a, b):\n    return a - b\n")  # the bug the demo's check catches
    run("python3 -c 'from calc import add; print(add(2, 3))'")
    say(type="message", role="assistant", text="I created calc.py.")
else:
    say(type="message", role="assistant", text="I do not know how to do that.")
say(type="usage", input=1200, output=150, cacheRead=1000, cacheWrite=0)
say(type="finished", reason="done")
