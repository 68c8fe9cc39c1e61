"""A real repository task for Claude Code: a failing test in a tiny Python package.

`repo/` is copied into the sandbox's /workspace; the agent must make its tests pass
without touching them. Run it with `proctor run examples/claude-code -v` (proctor.toml
says how the key is brokered and how to point it at a stand-in API instead).
"""

from engine import evaluation


@evaluation(workspace="repo", rules="Fix the code, not the tests. Keep the change small.",
            timeout="10m", tags=["claude-code"])
def fixes_slugify(c):
    c.send("`python3 -m unittest` fails in this repository. Find the bug in slug.py and fix it, "
           "then run the tests again.")
    c.exec("python3 -m unittest -v").to_succeed()
    c.exec("cat test_slug.py").stdout.to_contain('slugify("Hello, World!"), "hello-world"')
    c.capture("slug.py")
