"""Images with Node.js and agent CLIs from npm (Claude Code, Codex, Gemini CLI), built offline.

The npm registry is reachable from the host only, so the host fetches everything and the build
runs with `network_mode="none"`:

1. on the host, `npm pack` fetches Node.js (the official build, as the registry package
   `node-linux-<arch>`) and npm itself, cached under ~/.cache/proctor/npm/dist;
2. on the host, the pinned npm installs the CLIs with `--ignore-scripts` into a throwaway prefix,
   only to fill an npm cache for this package set (~/.cache/proctor/npm/sets/<hash>), choosing
   the platform packages (Codex's and Claude Code's native binaries) for the daemon's arch;
3. in the build, with no network, that npm runs `npm install -g --offline` from the cache, so
   install scripts run inside the build, never on the host; a second stage keeps /usr/local only.

The image is tagged by a content hash of the base image id, the package list, the Node.js and
npm versions and the arch, so a second `ensure` is a cache hit. Each CLI's `--version` runs in
the build (a CLI that cannot start fails it) and is kept in the image for the record.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from docker.errors import DockerException, ImageNotFound

from .cleanup import owner_id
from .images import BUILT_REPO, ImageBuildFailed, Images

# Node.js 24 (LTS): Claude Code needs >= 22, Gemini CLI >= 20. Debian bookworm ships Node 18 and
# trixie's Node 20 .deb needs trixie's libc6, so installing it would upgrade the case image's libc;
# the official build needs only glibc >= 2.28 and libstdc++, and comes from the same registry.
NODE_VERSION = "24.22.3"
NPM_VERSION = "11.19.1"
# Bump when the recipe below changes, so old images are not taken for new ones.
RECIPE = "1"
VERSIONS_FILE = "/usr/local/share/proctor/cli-versions.json"
STAGE_LABEL = "proctor.cli-stage"
NPM_TIMEOUT_S = 900

_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_NAME = re.compile(r"(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")


class CliInstallFailed(Exception):
    """The CLIs could not be fetched, installed or started: the trial is void (infra_error)."""


@dataclass(frozen=True)
class CliImage:
    tag: str
    detail: str  # "cache hit" or "built"
    versions: dict[str, str]  # package name -> first line of its CLI's `--version`


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "proctor" / "npm"


def parse_package(spec: str) -> tuple[str, str]:
    """`name@1.2.3` (scoped names too) to (name, version); only exact versions, so the content
    hash names what is installed."""
    name, at, version = spec.rpartition("@")
    if not at or not name or not _NAME.fullmatch(name) or not _VERSION.fullmatch(version):
        raise ValueError(f"npm package {spec!r} must be a name at an exact version, "
                         "like '@openai/codex@0.171.0'")
    return name, version


def cli_tag(base_id: str, packages: Sequence[str], arch: str,
            node: str = NODE_VERSION, npm: str = NPM_VERSION) -> str:
    digest = hashlib.sha256(json.dumps(
        [RECIPE, base_id, sorted(packages), arch, node, npm]).encode()).hexdigest()
    return f"{BUILT_REPO}:cli-{digest[:16]}"


def dockerfile(base_id: str, packages: Sequence[str], registry: str, tag: str) -> str:
    names = sorted(parse_package(p)[0] for p in packages)
    specs = " ".join(sorted(packages))
    # Each CLI must start in the build; a failure is one line marked `proctor:` for the error.
    versions = ("const x=require('child_process').execFileSync,o={};"
                "for(const n of process.argv.slice(1)){"
                "const p=require('/usr/local/lib/node_modules/'+n+'/package.json');"
                "const b=typeof p.bin==='string'?n.split('/').pop():Object.keys(p.bin||{})[0];"
                "if(!b){console.error('proctor: '+n+' has no command to run');process.exit(1)}"
                "try{o[n]=x(b,['--version'],{encoding:'utf8',timeout:120000,"
                "stdio:['ignore','pipe','pipe']}).trim().split('\\n')[0]}"
                "catch(e){console.error('proctor: '+b+' --version failed: '"
                "+String(e.stderr||e.message).trim().split('\\n')[0]);process.exit(1)}}"
                f"require('fs').writeFileSync('{VERSIONS_FILE}',JSON.stringify(o));"
                "console.log('cli versions',JSON.stringify(o))")
    return "".join([
        f"FROM {base_id} AS install\n",
        # Marks the install stage, left dangling by the classic builder, so it can be removed.
        f"LABEL {STAGE_LABEL}={tag}\n",
        "COPY node.tgz npm.tgz /tmp/proctor-npm/\n",
        "COPY cache/ /tmp/proctor-npm/cache/\n",
        "RUN tar -xzf /tmp/proctor-npm/node.tgz -C /usr/local --strip-components=1 package/bin/node"
        " && mkdir -p /usr/local/lib/node_modules/npm /usr/local/share/proctor"
        " && tar -xzf /tmp/proctor-npm/npm.tgz --strip-components=1"
        " -C /usr/local/lib/node_modules/npm"
        " && ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm"
        " && ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx\n",
        # Scripts of the requested packages run (Claude Code's puts its native binary in place);
        # their dependencies' stay off, as npm's default for global installs.
        f"RUN npm install -g --offline --cache /tmp/proctor-npm/cache --registry {registry}"
        f" --no-audit --no-fund --no-update-notifier --allow-scripts={','.join(names)} {specs}\n",
        f"RUN node -e \"{versions}\" {' '.join(names)}\n",
        f"FROM {base_id}\n",
        "COPY --from=install /usr/local/ /usr/local/\n",
    ])


class NodeCliImages:
    """Builds and caches CLI images on one daemon; concurrent trials share one build."""

    def __init__(self, images: Images, cache_dir: Path | None = None):
        self.images = images
        self.client = images.client
        self.cache_dir = cache_dir or default_cache_dir()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._versions: dict[str, dict[str, str]] = {}

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def ensure(self, base: str, packages: Sequence[str],
               log: Callable[[str], None] = lambda line: None) -> CliImage:
        """The image of `base` (a tag or id, e.g. what `Images.ensure` gave for the case) plus
        Node.js and `packages` (`name@version`), built if missing. Raises ValueError for a bad
        package spec, ImageMissing for a missing base, CliInstallFailed (one sentence) else."""
        if not packages:
            raise ValueError("a CLI image needs at least one npm package")
        for spec in packages:
            parse_package(spec)
        self.images.check_reference(base)
        try:
            base_id = self.client.images.get(base).id
            arch = self._arch()
        except DockerException as e:
            raise CliInstallFailed(f"Docker failed while preparing the CLI image: {e}") from None
        tag = cli_tag(base_id, packages, arch)
        with self._lock(tag):
            if self.images.present(tag):
                return CliImage(tag, "cache hit", self._read_versions(tag))
            self._build(base_id, tuple(packages), arch, tag, log)
            return CliImage(tag, "built", self._read_versions(tag))

    def _arch(self) -> str:
        machine = str(self.client.info().get("Architecture", ""))
        if machine not in _ARCH:
            raise CliInstallFailed(f"CLI images are built for x86_64 or aarch64 daemons, "
                                   f"not {machine or 'an unknown architecture'}")
        return _ARCH[machine]

    def _build(self, base_id: str, packages: tuple[str, ...], arch: str, tag: str,
               log: Callable[[str], None]) -> None:
        node_tgz = self._pack(f"node-linux-{arch}@{NODE_VERSION}", log)
        npm_tgz = self._pack(f"npm@{NPM_VERSION}", log)
        npm_cli = self._host_npm(npm_tgz)
        registry = self._npm(npm_cli, ["config", "get", "registry"]).strip()
        if not re.fullmatch(r"https?://[^\s\"'\\]+", registry):
            raise CliInstallFailed(f"npm's registry setting {registry!r} is not a URL")
        cache = self._fill_cache(npm_cli, packages, arch, log)
        text = dockerfile(base_id, packages, registry, tag)
        with tempfile.TemporaryFile(dir=self.cache_dir) as context:
            # The context is a tar on disk: the npm cache is hundreds of MB, never held in memory.
            with tarfile.open(fileobj=context, mode="w") as tar:
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
                tar.add(node_tgz, arcname="node.tgz")
                tar.add(npm_tgz, arcname="npm.tgz")
                tar.add(cache, arcname="cache")
            context.seek(0)
            errors: list[str] = []

            def keep(line: str) -> None:
                plain = _ANSI.sub("", line)  # the builder colours a RUN's stderr
                errors.extend(ln for ln in plain.splitlines()
                              if ln.startswith(("npm error", "npm ERR!", "proctor: ")))
                log(line)

            try:
                self.images.build({"tag": tag, "fileobj": context, "custom_context": True,
                                   "network_mode": "none", "rm": True, "forcerm": True,
                                   "decode": True, "labels": {"proctor": "1"}}, keep)
            except ImageBuildFailed as e:
                ours = [ln.removeprefix("proctor: ") for ln in errors if ln.startswith("proctor: ")]
                reason = (ours[-1] if ours else _npm_reason("\n".join(errors)) if errors
                          else str(e).removeprefix("image build failed: "))
                raise CliInstallFailed(f"installing {', '.join(packages)} in the image failed: "
                                       f"{reason}") from None
            finally:
                self._remove_stage(tag)

    def _remove_stage(self, tag: str) -> None:
        """The install stage holds the npm cache (hundreds of MB) and nothing the image needs."""
        try:
            self.client.images.prune(filters={"dangling": True, "label": f"{STAGE_LABEL}={tag}"})
        except DockerException:
            pass  # only disk is lost; the image itself is fine

    def _pack(self, spec: str, log: Callable[[str], None]) -> Path:
        """The registry tarball of `spec`, fetched once into the cache."""
        dist = self.cache_dir / "dist"
        name, version = parse_package(spec)
        path = dist / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
        if path.exists():
            return path
        npm = shutil.which("npm")
        if npm is None:
            raise CliInstallFailed("npm is not installed on this machine: install Node.js and "
                                   "npm (e.g. `apt-get install npm`) to build CLI images")
        dist.mkdir(parents=True, exist_ok=True)
        log(f"fetching {spec}")
        with tempfile.TemporaryDirectory(dir=dist) as tmp:
            self._run([npm, "pack", spec, "--pack-destination", tmp, "--silent"], spec)
            packed = list(Path(tmp).glob("*.tgz"))
            if len(packed) != 1:
                raise CliInstallFailed(f"npm pack {spec} gave no tarball")
            packed[0].replace(path)  # atomic: a half-written tarball is never taken as cached
        return path

    def _host_npm(self, npm_tgz: Path) -> Path:
        """The pinned npm unpacked on the host, so the cache it fills is the one the image's
        npm (the same version) reads offline."""
        home = self.cache_dir / f"npm-{NPM_VERSION}"
        cli = home / "bin" / "npm-cli.js"
        if not cli.exists():
            with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
                with tarfile.open(npm_tgz) as tar:
                    tar.extractall(tmp, filter="data")
                try:
                    (Path(tmp) / "package").replace(home)  # atomic: whole or absent
                except OSError:
                    if not cli.exists():  # not another process that got there first
                        raise
        return cli

    def _fill_cache(self, npm_cli: Path, packages: tuple[str, ...], arch: str,
                    log: Callable[[str], None]) -> Path:
        key = hashlib.sha256(json.dumps([sorted(packages), arch, NPM_VERSION]).encode())
        cache = self.cache_dir / "sets" / key.hexdigest()[:16]
        complete = cache / ".proctor-complete"
        if complete.exists():  # an earlier fill of this exact set: nothing new to fetch
            return cache
        cache.mkdir(parents=True, exist_ok=True)
        log(f"fetching {', '.join(packages)} and their dependencies")
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as prefix:
            # Installed only to fill the cache; no script of theirs runs on the host.
            self._npm(npm_cli, ["install", "-g", "--prefix", prefix, "--cache", str(cache),
                                "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund",
                                "--no-update-notifier", "--os", "linux", "--cpu", arch,
                                "--libc", "glibc", *packages], ", ".join(packages))
        complete.touch()
        return cache

    def _npm(self, npm_cli: Path, args: list[str], what: str = "npm") -> str:
        node = shutil.which("node")
        if node is None:
            raise CliInstallFailed("Node.js is not installed on this machine: install it "
                                   "(e.g. `apt-get install nodejs npm`) to build CLI images")
        return self._run([node, str(npm_cli), *args], what)

    def _run(self, argv: list[str], what: str) -> str:
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env,
                                  timeout=NPM_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CliInstallFailed(f"npm took over {NPM_TIMEOUT_S} s to fetch {what}") from None
        if done.returncode != 0:
            raise CliInstallFailed(f"npm could not fetch {what}: {_npm_reason(done.stderr)}")
        return done.stdout

    def _read_versions(self, tag: str) -> dict[str, str]:
        """The CLIs' `--version` lines written by the build, read without starting a container."""
        if tag in self._versions:
            return self._versions[tag]
        try:
            # The image's `proctor=1` label passes to the container; a live owner keeps the
            # engine's start-up sweep (another process's) from removing it under us.
            container = self.client.containers.create(tag, command=["true"], network_mode="none",
                                                      labels={"proctor.owner": owner_id()})
            try:
                stream, _ = container.get_archive(VERSIONS_FILE)
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    member = tar.extractfile(tar.getmembers()[0])
                    versions = json.loads(member.read()) if member else {}
            finally:
                container.remove(force=True)
        except (DockerException, ImageNotFound, tarfile.TarError, ValueError) as e:
            raise CliInstallFailed(f"could not read the CLI versions of {tag}: "
                                   f"{str(e).splitlines()[0][:160]}") from None
        self._versions[tag] = versions
        return versions


def _npm_reason(stderr: str) -> str:
    """npm's most telling error line, e.g. "404 '@x/y@1.0.0' is not in this registry"."""
    lines = [ln.removeprefix("npm error").removeprefix("npm ERR!").strip()
             for ln in stderr.splitlines() if ln.startswith(("npm error", "npm ERR!"))]
    lines = [re.sub(r"^(?:[0-9]{3}|notarget)\s+", "", ln) for ln in lines
             if ln and not ln.startswith(("A complete log", "code "))]
    for ln in lines:
        if "could not be found" in ln or "No matching version" in ln:
            return ln.rstrip(".")
    if not lines:
        lines = stderr.strip().splitlines()[-1:] or ["no reason given"]
    return lines[0][:200].rstrip(".")
