"""The image of a trial: a reference used as is (pulled only if missing), or a
`Dockerfile(...)` / `Install(...)` built once and cached under a content-hash tag.
"""

from __future__ import annotations

import hashlib
import io
import threading
from pathlib import Path
from typing import Callable

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound

from ..spec import Dockerfile, ImageSpec, Install

BUILT_REPO = "proctor-image"


class ImageMissing(Exception):
    """A referenced image is neither present nor pullable: a user's mistake."""


class ImageBuildFailed(Exception):
    """A Dockerfile or Install build failed: the trial is void."""


def describe(spec: ImageSpec) -> str:
    if isinstance(spec, Dockerfile):
        return f"Dockerfile({spec.path})"
    if isinstance(spec, Install):
        return f"Install({spec.base}, {len(spec.commands)} commands)"
    return spec


def content_tag(spec: Dockerfile | Install) -> str:
    digest = hashlib.sha256()
    if isinstance(spec, Install):
        digest.update(spec.dockerfile().encode())
    else:
        dockerfile, context = _dockerfile_paths(spec)
        digest.update(dockerfile.read_bytes())
        for path in sorted(p for p in context.rglob("*") if p.is_file() and ".git" not in p.parts):
            digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
    return f"{BUILT_REPO}:{digest.hexdigest()[:16]}"


def _dockerfile_paths(spec: Dockerfile) -> tuple[Path, Path]:
    base = spec.base_dir or Path.cwd()
    dockerfile = (base / spec.path).resolve()
    context = (base / spec.context).resolve() if spec.context else dockerfile.parent
    return dockerfile, context


class Images:
    """Resolves image specs on one Docker daemon; concurrent trials share one build."""

    def __init__(self, client: docker.DockerClient):
        self.client = client
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, tag: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tag, threading.Lock())

    def present(self, ref: str) -> bool:
        try:
            self.client.images.get(ref)
            return True
        except ImageNotFound:
            return False

    def check_reference(self, ref: str) -> str:
        """Make sure a referenced image is here, pulling it if missing. Returns a detail."""
        with self._lock(ref):
            if self.present(ref):
                return "cache hit"
            try:
                self.client.images.pull(ref)
            except DockerException as e:
                reason = str(e).splitlines()[0][:160]
                raise ImageMissing(
                    f"image {ref!r} is not in Docker and could not be pulled ({reason}): "
                    f"build or load it (`docker pull {ref}` / `docker load`), or fix the name"
                ) from None
            return "pulled"

    def ensure(self, spec: ImageSpec, log: Callable[[str], None] = lambda line: None) -> tuple[str, str]:
        """The tag to run and a detail ("cache hit", "built", "pulled")."""
        if isinstance(spec, str):
            return spec, self.check_reference(spec)
        tag = content_tag(spec)
        with self._lock(tag):
            if self.present(tag):
                return tag, "cache hit"
            self._build(spec, tag, log)
            return tag, "built"

    def _build(self, spec: Dockerfile | Install, tag: str, log: Callable[[str], None]) -> None:
        kwargs: dict = {"tag": tag, "rm": True, "forcerm": True, "decode": True,
                        "labels": {"proctor": "1"}}
        if isinstance(spec, Install):
            kwargs["fileobj"] = io.BytesIO(spec.dockerfile().encode())
        else:
            dockerfile, context = _dockerfile_paths(spec)
            kwargs.update(path=str(context), dockerfile=str(dockerfile.relative_to(context)))
        self.build(kwargs, log)

    def build(self, kwargs: dict, log: Callable[[str], None]) -> None:
        """Run one `docker build` with the API's `kwargs` (a `tag` among them); a failure is
        `ImageBuildFailed` with one sentence. Also used by `node_cli` for its own contexts."""
        tag = kwargs["tag"]
        last = ""
        try:
            for chunk in self.client.api.build(**kwargs):
                if "error" in chunk:
                    raise BuildError(chunk["error"].strip(), [])
                line = (chunk.get("stream") or "").strip()
                if line:
                    last = line
                    log(line)
        except BuildError as e:
            raise ImageBuildFailed(f"image build failed: {e.msg}") from None
        except (APIError, DockerException, ValueError) as e:
            raise ImageBuildFailed(f"image build failed: {str(e).splitlines()[0][:200]} {last}") from None
        if not self.present(tag):
            raise ImageBuildFailed(f"image build failed: {last or 'no image produced'}")
