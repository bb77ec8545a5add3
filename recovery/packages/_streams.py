"""Bounded, counted byte streams under the archive readers.

``Gunzip`` decompresses with exact accounting of compressed bytes consumed (so that expansion ratios are
measured, not estimated from read-ahead). ``Window`` gives tarfile the forward-only file object it needs, with
a small look-back, a cap on what one header read may pull in, and a hook that sees every byte pulled from
the source (the stream-level size and ratio limits live there).
"""

from __future__ import annotations

import io
from collections.abc import Callable

from zlib_ng import zlib_ng as zlib  # zlib's API and checks (a port of CPython's module), inflating faster

from .report import ARCHIVE_CORRUPT

CHUNK = 1024 * 1024  # member data is read and hashed in pieces of this size
# Compressed input is read 1 MiB at a time, and a data read gives one inflate call up to that much: one call then
# usually yields a whole 1 MiB piece, where calls given 64 KiB each made as many short-lived output blocks plus a
# joined copy, and that churn kept faulting in fresh pages, which is kernel time. zlib copies whatever input a call
# leaves over (unconsumed_tail, unused_data), so a call gets at most 64 KiB when little output is wanted (tar headers:
# 512 bytes), and after a gzip member ends the next calls start at 4 KiB and double: neither many small reads nor many
# tiny gzip members (a concatenation of empty ones) can make that copying grow with the square of the input.
_GZ_IN = 1024 * 1024
_GZ_SMALL_READ = 64 * 1024
_GZ_AFTER_MEMBER = 4 * 1024
_LOOK_BACK = 4 * 1024  # tarfile steps back one byte, the end-of-archive check one header (512 bytes)
# tarfile reads a pax or GNU long-name header in one call; a legitimate one is a few KiB (paths are capped at
# 1,024 bytes). Anything larger is refused before it is read, so a header cannot make us hold megabytes.
MAX_HEADER_READ = 64 * 1024


class PackageStop(Exception):
    """A finding that ends the scan: a resource limit, or corruption after which nothing can be trusted."""

    def __init__(self, code: str, member: str | None, detail: str, *, fmt: str | None = None, members: int = 0) -> None:
        super().__init__(detail)
        self.code = code
        self.member = member
        self.detail = detail
        self.format = fmt  # set when the archive is refused before its first member (zip's central directory)
        self.members = members


class MemberStop(Exception):
    """A finding about one member after which the scan can go on with the next one (zip only)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def corrupt(detail: str, member: str | None = None) -> PackageStop:
    return PackageStop(ARCHIVE_CORRUPT, member, detail)


class Gunzip:
    """Decompress a gzip stream (concatenated members allowed) from ``raw``; nothing may follow it."""

    def __init__(self, raw: io.RawIOBase) -> None:
        self._raw = raw
        self._d = zlib.decompressobj(31)
        self._in = b""  # the last block read from raw; bytes before _pos are consumed
        self._pos = 0
        self._feed = _GZ_IN  # the most input one call is given (see _GZ_IN)
        self._done = False
        self.compressed = 0  # compressed bytes consumed by the decompressor so far
        self.decompressed = 0

    def read(self, n: int) -> bytes:
        out: list[bytes] = []
        want = n
        while want > 0 and not self._done:
            if self._pos == len(self._in):
                chunk = self._raw.read(_GZ_IN)
                if not chunk:
                    if self._d.eof:
                        self._done = True
                        break
                    raise corrupt("the gzip stream is truncated")
                self._in, self._pos = chunk, 0
            if self._d.eof:  # the next gzip member of a concatenation; zlib rejects anything else
                self._d = zlib.decompressobj(31)
                self._feed = _GZ_AFTER_MEMBER
            size = min(len(self._in) - self._pos, self._feed, max(want, _GZ_SMALL_READ))
            try:
                data = self._d.decompress(memoryview(self._in)[self._pos : self._pos + size], want)
            except zlib.error:  # type: ignore[misc]  # zlib-ng's stubs declare error an instance, not the class
                raise corrupt("the gzip stream is corrupt (bad header, data or checksum)") from None
            left = len(self._d.unused_data) if self._d.eof else len(self._d.unconsumed_tail)
            self.compressed += size - left
            self._pos += size - left
            if not self._d.eof:
                self._feed = min(self._feed * 2, _GZ_IN)
            if data:
                out.append(data)
                want -= len(data)
                self.decompressed += len(data)
        return b"".join(out)


class Window(io.RawIOBase):
    """A forward-only readable, seekable-within-reach file object over ``source``.

    Seeking forward reads and discards (so skipped bytes are still counted and checked); seeking back is
    possible only within the last 4 KiB. ``on_pull`` sees the count of every byte taken from the source and
    may raise ``PackageStop``.
    """

    def __init__(self, source: Callable[[int], bytes], on_pull: Callable[[int], None]) -> None:
        super().__init__()
        self._source = source
        self._on_pull = on_pull
        self._pos = 0
        self._end = 0
        self._tail = b""
        self.data_mode = False  # member data may be read in large pieces; headers may not
        self.archive_ratio: Callable[[], None] = lambda: None  # the whole-archive ratio check, set by the reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def _pull(self, n: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < n:
            data = self._source(n - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if data:
            self._on_pull(len(data))
            self._end += len(data)
            self._tail = data[-_LOOK_BACK:] if len(data) >= _LOOK_BACK else (self._tail + data)[-_LOOK_BACK:]
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a package stream cannot seek from its end")
        if offset < self._end - len(self._tail):
            raise corrupt("the archive points back to data already passed")
        while offset > self._end:
            if not self._pull(min(CHUNK, offset - self._end)):
                break  # past the end: the next read returns nothing and the reader reports truncation
        self._pos = min(offset, self._end) if offset > self._end else offset
        return self._pos

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            raise corrupt("an unbounded read of the archive")
        if not self.data_mode and n > MAX_HEADER_READ:
            raise corrupt(f"an extended header of {n} bytes, over {MAX_HEADER_READ}")
        out: list[bytes] = []
        if self._pos < self._end:
            start = len(self._tail) - (self._end - self._pos)
            piece = self._tail[start : start + n]
            out.append(piece)
            self._pos += len(piece)
            n -= len(piece)
        if n > 0:
            data = self._pull(n)
            self._pos += len(data)
            out.append(data)
        return out[0] if len(out) == 1 else b"".join(out)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
