"""CLI images built offline: the host fetches Node.js, npm and the agent CLIs from the npm
registry, the build runs with no network, and each pinned CLI then starts in a sandbox with
`--network none`. A second `ensure` is a cache hit; a package npm does not have is one sentence."""

from __future__ import annotations

import time

import pytest
from docker.errors import ImageNotFound

from engine.sandbox.cleanup import owner_id
from engine.sandbox.images import Images
from engine.sandbox.node_cli import (
    NODE_VERSION, CliInstallFailed, NodeCliImages, _npm_reason, cli_tag, dockerfile, parse_package,
)
from tests.conftest import BASE_IMAGE

CLAUDE, CODEX, GEMINI = "2.1.332", "0.171.0", "0.61.0"
PACKAGES = (f"@anthropic-ai/claude-code@{CLAUDE}", f"@openai/codex@{CODEX}",
            f"@google/gemini-cli@{GEMINI}")


def sandbox_says(client, tag: str, *argv: str) -> str:
    container = client.containers.create(tag, list(argv), network_mode="none", mem_limit="1g",
                                         labels={"proctor.owner": owner_id()})
    try:
        container.start()
        status = container.wait(timeout=120)["StatusCode"]
        out = container.logs().decode().strip()
    finally:
        container.remove(force=True)
    assert status == 0, f"{' '.join(argv)} exited {status}: {out}"
    return out


@pytest.mark.docker
@pytest.mark.slow
def test_three_clis_build_offline_run_pinned_and_cache(docker_client):
    clis = NodeCliImages(Images(docker_client))
    tag = cli_tag(docker_client.images.get(BASE_IMAGE).id, PACKAGES, clis._arch())
    try:  # the real build runs every time; only the host's npm downloads are kept
        docker_client.images.remove(tag)
    except ImageNotFound:
        pass
    lines: list[str] = []
    start = time.monotonic()
    built = clis.ensure(BASE_IMAGE, PACKAGES, lines.append)
    build_s = time.monotonic() - start
    assert (built.tag, built.detail) == (tag, "built")
    assert built.versions == {"@anthropic-ai/claude-code": f"{CLAUDE} (Claude Code)",
                              "@openai/codex": f"codex-cli {CODEX}",
                              "@google/gemini-cli": GEMINI}
    assert any("cli versions" in line for line in lines)

    # Each CLI starts in a sandbox with no network (Codex's native binary is the linux one).
    assert sandbox_says(docker_client, tag, "claude", "--version") == f"{CLAUDE} (Claude Code)"
    assert sandbox_says(docker_client, tag, "codex", "--version") == f"codex-cli {CODEX}"
    assert sandbox_says(docker_client, tag, "gemini", "--version") == GEMINI
    assert sandbox_says(docker_client, tag, "node", "--version") == f"v{NODE_VERSION}"

    start = time.monotonic()
    again = NodeCliImages(Images(docker_client)).ensure(BASE_IMAGE, tuple(reversed(PACKAGES)))
    hit_s = time.monotonic() - start
    assert (again.tag, again.detail, again.versions) == (tag, "cache hit", built.versions)
    assert hit_s < 5, f"cache hit took {hit_s:.1f} s (build took {build_s:.1f} s)"
    print(f"build {build_s:.1f} s, cache hit {hit_s:.2f} s, "
          f"image {docker_client.images.get(tag).attrs['Size'] / 1e6:.0f} MB")


@pytest.mark.docker
def test_a_package_npm_does_not_have_is_one_sentence(docker_client):
    clis = NodeCliImages(Images(docker_client))
    bogus = ["@proctor-test/no-such-cli@1.0.0"]
    with pytest.raises(CliInstallFailed) as failed:
        clis.ensure(BASE_IMAGE, bogus)
    message = str(failed.value)
    assert message.startswith("npm could not fetch @proctor-test/no-such-cli@1.0.0: ")
    assert "could not be found" in message
    assert "\n" not in message and "Traceback" not in message
    tag = cli_tag(docker_client.images.get(BASE_IMAGE).id, bogus, clis._arch())
    assert not clis.images.present(tag)


@pytest.mark.docker
@pytest.mark.slow
def test_a_package_without_a_command_fails_in_the_build_in_one_sentence(docker_client):
    clis = NodeCliImages(Images(docker_client))
    with pytest.raises(CliInstallFailed) as failed:
        clis.ensure(BASE_IMAGE, ["is-number@7.0.0"])  # a real, tiny package with no `bin`
    assert str(failed.value) == ("installing is-number@7.0.0 in the image failed: "
                                 "is-number has no command to run")
    tag = cli_tag(docker_client.images.get(BASE_IMAGE).id, ["is-number@7.0.0"], clis._arch())
    assert not clis.images.present(tag)
    assert not docker_client.images.list(filters={"label": f"proctor.cli-stage={tag}"})


@pytest.mark.parametrize("spec", ["@openai/codex", "@openai/codex@^0.171.0", "codex@latest",
                                  "@openai/codex@0.171", "Bad Name@1.0.0", "x@1.0.0 && true",
                                  "x@1.0.0\n", "x\n@1.0.0"])
def test_only_exact_versions_of_valid_names(spec):
    with pytest.raises(ValueError, match="exact version"):
        parse_package(spec)


def test_tag_is_a_hash_of_base_packages_and_arch():
    one = cli_tag("sha256:a", PACKAGES, "x64")
    assert one == cli_tag("sha256:a", tuple(reversed(PACKAGES)), "x64")
    assert one != cli_tag("sha256:b", PACKAGES, "x64")
    assert one != cli_tag("sha256:a", PACKAGES[:1], "x64")
    assert one != cli_tag("sha256:a", PACKAGES, "arm64")
    text = dockerfile("sha256:a", PACKAGES, "https://registry.npmjs.org/", one)
    assert "--offline" in text and "--allow-scripts=@anthropic-ai/claude-code," in text


def test_npm_failures_read_as_their_telling_line():
    not_found = """npm warn Unknown user config "nodedir".
npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/@x%2fy
npm error 404
npm error 404  The requested resource '@x/y@1.0.0' could not be found or you do not have permission.
npm error A complete log of this run can be found in: /tmp/x.log"""
    assert _npm_reason(not_found) == ("The requested resource '@x/y@1.0.0' could not be found "
                                      "or you do not have permission")
    no_version = """npm error code ETARGET
npm error notarget No matching version found for @openai/codex@0.0.999.
npm error notarget In most cases you or one of your dependencies are requesting a package."""
    assert _npm_reason(no_version) == "No matching version found for @openai/codex@0.0.999"
    assert _npm_reason("npm error code EACCES\nnpm error permission denied, mkdir '/x'") == \
        "permission denied, mkdir '/x'"
    assert _npm_reason("") == "no reason given"
