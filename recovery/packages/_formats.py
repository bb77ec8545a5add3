"""Format recognition and one uniform member iterator per format (tar, tar.gz, zip).

Each iterator yields ``Member`` objects in archive order; a file member's ``chunks()`` streams its data once,
while it is the current member. Structural problems raise ``PackageStop`` (archive_corrupt, or a stream-level
limit); problems confined to one zip member raise ``MemberStop`` from ``chunks()`` so the scan can go on.
The same iterators serve verification and the unpacking pass of a restore, so both see identical members.
"""

from __future__ import annotations

import io
import stat
import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import report as codes
from ._streams import CHUNK, Gunzip, MemberStop, PackageStop, Window, corrupt
from .limits import Limits

FILE = "file"
DIR = "dir"
LINK = "link"
SPECIAL = "special"

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


@dataclass(slots=True)
class Member:
    name: str  # as the archive reports it (tarfile's final name, after pax and GNU long names)
    kind: str  # FILE, DIR, LINK or SPECIAL
    what: str  # the kind in words, for details
    size: int  # the size the header claims (files); 0 for the rest
    carries_data: bool  # a directory entry with data attached
    chunks: Callable[[], Iterator[bytes]]


def _no_data() -> Iterator[bytes]:
    return iter(())


@dataclass(slots=True)
class Opened:
    format: str
    members: Iterator[Member]
    declared_members: int | None = None  # the zip central directory's count, known up front


class Unsupported(Exception):
    """Not a tar, a gzip'd tar or a zip."""


def open_archive(fh: io.FileIO, limits: Limits) -> Opened:
    """Recognise the format by content and return its member iterator. Raises Unsupported or PackageStop."""
    fh.seek(0)
    head = fh.read(512)
    fh.seek(0)
    if head[:2] == _GZIP_MAGIC:
        return _open_tar(fh, limits, gz=True)
    if head[:4] in _ZIP_MAGICS:
        return _open_zip(fh, limits)
    if len(head) == 512 and head[257:262] == b"ustar":
        return _open_tar(fh, limits, gz=False)
    raise Unsupported("not a tar, a gzip'd tar or a zip")


# -- tar ----------------------------------------------------------------------------------------------------


def _stream_cap(limits: Limits) -> int:
    # Headers and padding take at most 1.5 KiB per member (pax header block, its data, the member header);
    # beyond what the members may hold plus that, the stream is not a package within the limits.
    return limits.max_total_bytes + (limits.max_members + 2) * 3 * 512 + 1024 * 1024


def _open_tar(fh: io.FileIO, limits: Limits, gz: bool) -> Opened:
    cap = _stream_cap(limits)
    pulled = 0
    gunzip = Gunzip(fh) if gz else None

    def archive_ratio() -> None:
        if gunzip is None or pulled <= limits.ratio_floor_bytes:
            return
        if pulled > limits.max_ratio * max(gunzip.compressed, 1):
            raise PackageStop(
                codes.COMPRESSION_RATIO,
                None,
                f"the archive expands more than {limits.max_ratio} times ({pulled} bytes from "
                f"{gunzip.compressed} compressed)",
            )

    def on_pull(n: int) -> None:
        nonlocal pulled
        pulled += n
        if pulled > cap:
            raise PackageStop(
                codes.PACKAGE_TOO_LARGE, None, f"the archive expands to over {cap} bytes, past the package limit"
            )
        if not window.data_mode:  # while member data is read, the member's own ratio is checked first
            archive_ratio()

    window = Window(gunzip.read if gunzip is not None else fh.read, on_pull)
    window.archive_ratio = archive_ratio
    if gunzip is not None:
        try:
            head = window.read(512)
        except PackageStop as stop:
            if stop.code == codes.ARCHIVE_CORRUPT:
                raise Unsupported(stop.detail) from None
            raise
        if len(head) < 512 or head[257:262] != b"ustar":
            raise Unsupported("a gzip stream that does not hold a tar")
        window.seek(0)
    return Opened("tar.gz" if gz else "tar", _iter_tar(window, gunzip, limits))


def _tar_kind(ti: tarfile.TarInfo) -> tuple[str, str]:
    if ti.type == tarfile.GNUTYPE_SPARSE or ti.sparse is not None:
        return SPECIAL, "a sparse file"  # holes expand without compressed bytes behind them
    if ti.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
        return FILE, "a file"
    if ti.isdir():
        return DIR, "a directory"
    if ti.issym():
        return LINK, "a symbolic link"
    if ti.islnk():
        return LINK, "a hard link"
    if ti.ischr():
        return SPECIAL, "a character device"
    if ti.isblk():
        return SPECIAL, "a block device"
    if ti.isfifo():
        return SPECIAL, "a fifo"
    return SPECIAL, "an entry of an unknown type"


def _iter_tar(window: Window, gunzip: Gunzip | None, limits: Limits) -> Iterator[Member]:
    try:
        tf = tarfile.TarFile(fileobj=window, mode="r")
    except PackageStop:
        raise
    except Exception as exc:  # whatever tarfile raises on bad input is corruption
        raise corrupt(f"an unreadable first header ({type(exc).__name__})") from None
    while True:
        try:
            ti = tf.next()
        except PackageStop:
            raise
        except Exception as exc:
            raise corrupt(f"an unreadable header at byte {tf.offset} ({type(exc).__name__})") from None
        if ti is None:
            break
        tf.members.clear()  # type: ignore[attr-defined]  # tarfile keeps every header; we need none again
        kind, what = _tar_kind(ti)
        name = ti.name
        chunks = _tar_chunks(window, gunzip, ti, limits) if kind == FILE else _no_data
        yield Member(name, kind, what, ti.size if kind == FILE else 0, kind == DIR and ti.size > 0, chunks)
    _check_tar_end(window, tf.offset)


def _tar_chunks(
    window: Window, gunzip: Gunzip | None, ti: tarfile.TarInfo, limits: Limits
) -> Callable[[], Iterator[bytes]]:
    def chunks() -> Iterator[bytes]:
        window.seek(ti.offset_data)
        start_compressed = gunzip.compressed if gunzip is not None else 0
        remaining = ti.size
        done = 0
        window.data_mode = True
        try:
            while remaining > 0:
                data = window.read(min(CHUNK, remaining))
                if not data:
                    raise corrupt("the archive ends inside this member's data", ti.name)
                remaining -= len(data)
                done += len(data)
                if gunzip is not None and done > limits.ratio_floor_bytes:
                    used = gunzip.compressed - start_compressed
                    if done > limits.max_ratio * max(used, 1):
                        # Skipping the rest would mean inflating it: the scan stops here.
                        raise PackageStop(
                            codes.COMPRESSION_RATIO,
                            ti.name,
                            f"the member expands more than {limits.max_ratio} times ({done} bytes from {used})",
                        )
                window.archive_ratio()
                yield data
        finally:
            window.data_mode = False

    return chunks


def _check_tar_end(window: Window, offset: int) -> None:
    """Everything after the last member must be the end-of-archive marker: two or more zero blocks, only zeros."""
    window.seek(offset)
    window.data_mode = True
    zeros = 0
    try:
        while True:
            data = window.read(CHUNK)
            if not data:
                break
            window.archive_ratio()
            if data.strip(b"\0"):
                zeros += len(data) - len(data.lstrip(b"\0"))
                if zeros < 1024:
                    raise corrupt(f"a bad header at byte {offset}, where the next member or the end should be")
                raise corrupt("data after the end-of-archive marker")
            zeros += len(data)
    finally:
        window.data_mode = False
    if zeros < 1024:
        raise corrupt("no clean end-of-archive marker (the archive is truncated)")


# -- zip ----------------------------------------------------------------------------------------------------

_LOCAL = struct.Struct("<4s2B4HL2L2H")
_CD_ENTRY_BUDGET = 8 * 1024  # bytes of central directory per entry that a real archive comes nowhere near


def _zip_kind(zi: zipfile.ZipInfo, name: str) -> tuple[str, str]:
    mode = zi.external_attr >> 16 if zi.create_system == 3 else 0
    fmt = stat.S_IFMT(mode)
    named_dir = name.endswith("/")
    if fmt == stat.S_IFLNK:
        return LINK, "a symbolic link"
    if fmt == stat.S_IFCHR:
        return SPECIAL, "a character device"
    if fmt == stat.S_IFBLK:
        return SPECIAL, "a block device"
    if fmt == stat.S_IFIFO:
        return SPECIAL, "a fifo"
    if fmt == stat.S_IFSOCK:
        return SPECIAL, "a socket"
    if fmt not in (0, stat.S_IFREG, stat.S_IFDIR):
        return SPECIAL, "an entry of an unknown type"
    if fmt == stat.S_IFDIR and not named_dir:
        return SPECIAL, "a directory by its mode whose name does not end in '/'"
    if fmt == stat.S_IFREG and named_dir:
        return SPECIAL, "a file by its mode whose name ends in '/'"
    if named_dir:
        return DIR, "a directory"
    return FILE, "a file"


def _zip_layout(fh: io.FileIO, infos: list[zipfile.ZipInfo], endrec: list[object], size: int) -> None:
    """Members must not overlap, nothing may precede the first or follow the end record (fail closed on zip
    tricks: overlapping members are the 'better zip bomb', prefixed data hides a second archive)."""
    location = int(endrec[zipfile._ECD_LOCATION])  # type: ignore[attr-defined,call-overload]
    size_cd = int(endrec[zipfile._ECD_SIZE])  # type: ignore[attr-defined,call-overload]
    offset_cd = int(endrec[zipfile._ECD_OFFSET])  # type: ignore[attr-defined,call-overload]
    comment = endrec[zipfile._ECD_COMMENT]  # type: ignore[attr-defined]
    concat = location - size_cd - offset_cd
    if endrec[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:  # type: ignore[attr-defined]
        concat -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator  # type: ignore[attr-defined]
    if concat != 0:
        raise corrupt("data before the first member or before the central directory")
    if location + zipfile.sizeEndCentDir + len(comment) != size:  # type: ignore[attr-defined,arg-type]
        raise corrupt("data after the end of the archive")
    spans: list[tuple[int, int, str]] = []
    for zi in infos:
        fh.seek(zi.header_offset)
        raw = fh.read(_LOCAL.size)
        if len(raw) != _LOCAL.size:
            raise corrupt("a local header past the end of the archive", zi.orig_filename)
        sig, _v, _r, flags, method, _t, _d, crc, csize, usize, nlen, xlen = _LOCAL.unpack(raw)
        if sig != b"PK\x03\x04":
            raise corrupt("a member whose local header is missing", zi.orig_filename)
        name = fh.read(nlen)
        central = zi.orig_filename.encode("utf-8" if zi.flag_bits & 0x800 else "cp437", "surrogateescape")
        if name != central or method != zi.compress_type:
            raise corrupt("a local header that disagrees with the central directory", zi.orig_filename)
        # Sizes and CRC are in the local header unless a data descriptor follows (flag 0x08) or ZIP64 holds them.
        in_header = not flags & 0x08 and 0xFFFFFFFF not in (csize, usize)
        if in_header and (crc, csize, usize) != (zi.CRC, zi.compress_size, zi.file_size):
            raise corrupt("a local header that disagrees with the central directory", zi.orig_filename)
        start = zi.header_offset + _LOCAL.size + nlen + xlen
        spans.append((zi.header_offset, start + zi.compress_size, zi.orig_filename))
    spans.sort()
    expected = 0
    for begin, end, name_ in spans:
        if begin < expected:
            raise corrupt("members that overlap", name_)
        if expected == 0 and begin != 0:
            raise corrupt("data before the first member")
        expected = end
    if spans and expected > offset_cd:
        raise corrupt("member data that runs into the central directory", spans[-1][2])


def _open_zip(fh: io.FileIO, limits: Limits) -> Opened:
    """Read and check the central directory up front (zip is random access); refusals carry format zip."""
    try:
        return _open_zip_checked(fh, limits)
    except PackageStop as stop:
        stop.format = "zip"
        raise


def _open_zip_checked(fh: io.FileIO, limits: Limits) -> Opened:
    size = fh.seek(0, io.SEEK_END)
    try:
        endrec = zipfile._EndRecData(fh)  # type: ignore[attr-defined]
    except Exception:
        endrec = None
    if not endrec:
        raise corrupt("no end-of-central-directory record (truncated or not a zip)")
    declared = int(endrec[zipfile._ECD_ENTRIES_TOTAL])  # type: ignore[attr-defined]
    size_cd = int(endrec[zipfile._ECD_SIZE])  # type: ignore[attr-defined]
    if declared > limits.max_members:
        raise PackageStop(
            codes.TOO_MANY_MEMBERS,
            None,
            f"the central directory declares {declared} entries, over {limits.max_members}",
            members=declared,
        )
    if size_cd > size or size_cd > max(64 * 1024, declared * _CD_ENTRY_BUDGET):
        raise corrupt(f"a central directory of {size_cd} bytes for {declared} entries")
    try:
        zf = zipfile.ZipFile(fh)
        infos = zf.infolist()
        if len(infos) != declared:
            raise corrupt(f"a central directory with {len(infos)} entries where {declared} are declared")
        _zip_layout(fh, infos, endrec, size)
    except PackageStop:
        raise
    except Exception as exc:
        raise corrupt(f"an unreadable central directory ({type(exc).__name__})") from None
    return Opened("zip", _iter_zip(zf, infos, limits, size), declared)


def _iter_zip(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], limits: Limits, size: int) -> Iterator[Member]:
    total = [0]
    for zi in infos:
        name = zi.orig_filename
        kind, what = _zip_kind(zi, name)
        chunks = _zip_chunks(zf, zi, limits, size, total) if kind == FILE else _no_data
        carries = kind == DIR and zi.file_size > 0
        yield Member(name, kind, what, zi.file_size if kind == FILE else 0, carries, chunks)


def _zip_chunks(
    zf: zipfile.ZipFile, zi: zipfile.ZipInfo, limits: Limits, archive_size: int, total: list[int]
) -> Callable[[], Iterator[bytes]]:
    def chunks() -> Iterator[bytes]:
        if zi.flag_bits & 0x1:
            raise MemberStop(codes.ARCHIVE_CORRUPT, "an encrypted member, which cannot be verified")
        if zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            # Other methods (lzma's dictionary size comes from the archive) could make us allocate at will.
            raise MemberStop(codes.ARCHIVE_CORRUPT, f"compression method {zi.compress_type}, not stored or deflate")
        done = 0
        try:
            handle = zf.open(zi)
        except Exception as exc:
            raise MemberStop(codes.ARCHIVE_CORRUPT, f"an unreadable member ({type(exc).__name__})") from None
        with handle:
            while True:
                try:
                    data = handle.read(CHUNK)
                except Exception as exc:
                    raise MemberStop(
                        codes.ARCHIVE_CORRUPT, f"unreadable member data or a bad checksum ({type(exc).__name__})"
                    ) from None
                if not data:
                    break
                done += len(data)
                total[0] += len(data)
                if done > limits.ratio_floor_bytes and done > limits.max_ratio * max(zi.compress_size, 1):
                    raise MemberStop(
                        codes.COMPRESSION_RATIO,
                        f"the member expands more than {limits.max_ratio} times ({done} bytes from {zi.compress_size})",
                    )
                if total[0] > limits.ratio_floor_bytes and total[0] > limits.max_ratio * archive_size:
                    raise PackageStop(
                        codes.COMPRESSION_RATIO,
                        None,
                        f"the archive expands more than {limits.max_ratio} times ({total[0]} bytes from "
                        f"{archive_size})",
                    )
                yield data

    return chunks
