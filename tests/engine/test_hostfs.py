"""The host route's own logic, no Docker: when it applies (a local overlay2 daemon whose ids
are the host's, no mount over the path), and how paths and user entries are read."""

from __future__ import annotations

import pytest

from engine.sandbox import host_user, hostfs


class _Api:
    def __init__(self, base_url: str, info: dict, security: list[str] | None = None):
        self.base_url, self._info, self._security = base_url, info, security or []

    def inspect_container(self, _id: str) -> dict:
        return self._info

    def info(self) -> dict:
        return {"SecurityOptions": self._security}


class _Sandbox:
    def __init__(self, api: _Api):
        self.api, self.id, self.destroyed = api, "c", False


def _sandbox(tmp_path, base_url="http+docker://localhost", driver="overlay2", mounts=(), security=None):
    merged = tmp_path / "merged"
    merged.mkdir(exist_ok=True)
    info = {"GraphDriver": {"Name": driver, "Data": {"MergedDir": str(merged)}},
            "Mounts": [{"Destination": m} for m in mounts], "Config": {"Env": ["PATH=/opt/bin:/usr/bin"]}}
    return _Sandbox(_Api(base_url, info, security))


@pytest.fixture(autouse=True)
def as_root(monkeypatch):
    monkeypatch.setattr(hostfs.os, "geteuid", lambda: 0)
    monkeypatch.delenv(hostfs.ENV_SWITCH, raising=False)


def test_the_route_applies_only_to_a_local_overlay2_daemon_with_the_hosts_ids(tmp_path, monkeypatch):
    found = hostfs.root(_sandbox(tmp_path, mounts=["/tmp/.proctor/gw"]))
    assert found is not None and found.path == "/opt/bin:/usr/bin" and found.mounts == ("/tmp/.proctor/gw",)
    assert hostfs.root(_sandbox(tmp_path, base_url="http://10.0.0.2:2375")) is None
    assert hostfs.root(_sandbox(tmp_path, base_url="http+docker://ssh")) is None
    assert hostfs.root(_sandbox(tmp_path, driver="btrfs")) is None
    assert hostfs.root(_sandbox(tmp_path, security=["name=userns"])) is None
    assert hostfs.root(_sandbox(tmp_path, mounts=["/"])) is None
    monkeypatch.setenv(hostfs.ENV_SWITCH, "0")
    assert hostfs.root(_sandbox(tmp_path)) is None


def test_a_path_under_a_mount_or_not_plain_is_refused():
    host = hostfs.HostRoot("/nowhere", ("/tmp/.proctor/gw",))
    assert host.check("/workspace/a/b.txt") == ["workspace", "a", "b.txt"]
    for bad in ("/tmp/.proctor/gw/x", "tmp/.proctor/gw", "/tmp/.proctor", "/workspace/../etc/passwd",
                "/workspace/./a", "/workspace//a", "", "/"):
        with pytest.raises(hostfs.Unsafe):
            host.check(bad)


def test_user_entries_are_matched_as_the_hand_over_script_greps_them():
    assert host_user._match("agent:x:1001:1001::/home/agent:/bin/sh", name="agent", uid_from=1)
    assert not host_user._match("agent:x:0:0::/root:/bin/sh", name="agent", uid_from=1)
    assert not host_user._match("agents:x:1001:1001::/h:/bin/sh", name="agent", uid_from=1)
    assert host_user._match("dev:x:1000:1000::/home/dev:/bin/sh", uid=1000)
    assert not host_user._match("dev:x:10000:1000::/home/dev:/bin/sh", uid=1000)
    assert not host_user._match("dev:x:1000", uid=1000)  # the script's grep wants the colon after it
