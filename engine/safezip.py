"""Reading a zip someone else wrote: a Proctor bundle, an Inspect AI log.

Nothing in the file is trusted. Before a byte is inflated, the zip's directory must say
something sane: not too many members, each named by a plain relative path and once, each
compressed by a method the format uses, none encrypted, none too large or inflating past
a ratio (a zip bomb), not too much in all. While a member is inflated the same limits are
held by what comes out, not by what the directory said, and no member may give more than
it declared: a directory that lies is caught there, or by the member's CRC.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import zstandard

ZSTD = 93  # zip compression method of Zstandard, as Inspect AI writes its logs
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then the name and extra field lengths
_CHUNK = 1 << 20

Progress = Callable[[int, int], None]  # (bytes inflated, bytes the directory declares)


class ZipRefused(Exception):
    """What is wrong with the zip, in words; the caller names the file."""


@dataclass(frozen=True)
class ZipLimits:
    member: int  # bytes one member may inflate to
    total: int  # bytes all members may inflate to
    members: int  # how many members
    ratio: int  # inflated / packed, for members past ratio_floor
    methods: frozenset[int]  # compression methods the format writes
    ratio_floor: int = 1 << 20


def size_words(size: int) -> str:
    return f"{size / 2**20:,.{0 if size >= 2**24 else 1}f} MB"


def _shown(name: str) -> str:
    return repr(name[:200]) if not name.isprintable() else name[:200]


class SafeZip:
    """A zip's members, checked as a whole when opened; `read` inflates one within limits."""

    def __init__(self, zf: zipfile.ZipFile, limits: ZipLimits,
                 progress: Progress | None = None) -> None:
        self.zf, self.limits, self.progress = zf, limits, progress
        # Folders carry nothing: some zip writers list them.
        self.infos = [i for i in zf.infolist() if not (i.filename.endswith("/") and i.file_size == 0)]
        if len(self.infos) > limits.members:
            raise ZipRefused(f"it holds {len(self.infos):,} members, more than the "
                             f"{limits.members:,} it may")
        self.by_name: dict[str, zipfile.ZipInfo] = {}
        self.declared = 0
        for info in self.infos:
            name = info.filename
            _check_path(name)
            if name in self.by_name:
                raise ZipRefused(f"member {_shown(name)} appears twice")
            self.by_name[name] = info
            self._check(info)
            self.declared += info.file_size
            if self.declared > limits.total:
                raise ZipRefused(f"its members inflate to more than {size_words(limits.total)}")
        self.done = 0

    def get(self, name: str) -> zipfile.ZipInfo | None:
        return self.by_name.get(name)

    def _check(self, info: zipfile.ZipInfo, size: int | None = None) -> None:
        name, limits = _shown(info.filename), self.limits
        size = info.file_size if size is None else size
        if size > limits.member:
            raise ZipRefused(f"member {name} inflates to {size_words(size)}, more than the "
                             f"{size_words(limits.member)} a member may hold")
        if size > limits.ratio_floor and size > limits.ratio * max(info.compress_size, 1):
            raise ZipRefused(f"member {name} inflates {size // max(info.compress_size, 1):,} times "
                             f"its packed size, past {limits.ratio:,}: a zip bomb, or corrupt")
        if info.compress_type not in limits.methods:
            raise ZipRefused(f"member {name} is compressed with method {info.compress_type}, "
                             "which these files never use")
        if info.flag_bits & 0x1:
            raise ZipRefused(f"member {name} is encrypted")

    def read(self, info: zipfile.ZipInfo) -> bytes | bytearray:
        """The member inflated: never more than it declared, nor past the limits."""
        self._check(info)
        data = self._zstd(info) if info.compress_type == ZSTD else self._inflate(info)
        self.done += len(data)
        if self.done > self.limits.total:
            raise ZipRefused(f"its members inflate to more than {size_words(self.limits.total)}")
        if self.progress:
            self.progress(min(self.done, self.declared), self.declared)
        return data

    def _inflate(self, info: zipfile.ZipInfo) -> bytes:
        chunks, size = [], 0
        # zipfile checks the CRC at the end of the member: a lie about the content fails there.
        with self.zf.open(info) as member:
            while chunk := member.read(_CHUNK):
                size += len(chunk)
                if size > info.file_size:
                    raise ZipRefused(f"member {_shown(info.filename)} holds more than the "
                                     f"{info.file_size:,} bytes the zip declares: corrupt")
                chunks.append(chunk)
        return b"".join(chunks)

    def _zstd(self, info: zipfile.ZipInfo) -> bytearray:
        """zipfile cannot inflate Zstandard (Python 3.11): read the member's bytes from where
        its local header says they are, and inflate exactly what the directory declares."""
        name = _shown(info.filename)
        f = self.zf.fp
        assert f is not None
        f.seek(info.header_offset)
        header = f.read(_LOCAL_HEADER.size)
        magic, name_len, extra_len = (_LOCAL_HEADER.unpack(header)
                                      if len(header) == _LOCAL_HEADER.size else (b"", 0, 0))
        if magic != b"PK\x03\x04":
            raise ZipRefused(f"member {name} does not start where the zip says: corrupt or truncated")
        f.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
        raw = f.read(info.compress_size)
        if len(raw) != info.compress_size:
            raise ZipRefused(f"member {name} is cut short: the file is truncated")
        out = bytearray(info.file_size)
        view = memoryview(out)
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
        got = 0
        while got < len(out):
            n = reader.readinto(view[got:])
            if not n:
                break
            got += n
        # Never more than the zip declared: a member that would grow past it is refused unread.
        if got != len(out) or reader.read(1):
            raise ZipRefused(f"member {name} does not hold the {info.file_size:,} bytes the zip "
                             "declares: corrupt or truncated")
        if zlib.crc32(out) != info.CRC:
            raise ZipRefused(f"member {name} fails its CRC check: corrupt")
        return out


_DRIVE = re.compile(r"[A-Za-z]:")


def _check_path(name: str) -> None:
    """A plain relative path: these zips are never unpacked to disk, but a name that could
    climb out of a folder has no business in them."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ZipRefused(f"member path {_shown(name)} is absolute")
    if ".." in parts:
        raise ZipRefused(f"member path {_shown(name)} climbs out of the zip (..)")
    if "\\" in name or "\0" in name or "" in parts or "." in parts:
        raise ZipRefused(f"member path {_shown(name)} is not a plain relative path")
