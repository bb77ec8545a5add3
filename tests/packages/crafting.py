"""Hand-made archives for the package tests: full control over names, kinds, headers and bytes.

``make_archive(fmt, entries)`` writes the same logical entries as a tar, tar.gz or zip, so that every
finding can be produced in every format that can express it. ``package_entries`` gives the entries of a
valid package (manifest computed from the data) that a test then breaks in one precise way.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import stat
import tarfile
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Any

from engine.canonical import canonical_bytes

FORMATS = ("tar", "tar.gz", "zip")
RUN = "run-1"


@dataclass
class E:
    """One archive entry. ``kind``: file, dir, symlink, hardlink, fifo, chardev, blockdev, sparse, unknown."""

    name: str
    data: bytes = b""
    kind: str = "file"
    target: str = "elsewhere"
    pax: dict[str, str] = field(default_factory=dict)  # tar only: extra pax records (e.g. a renaming "path")


_TAR_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "fifo": tarfile.FIFOTYPE,
    "chardev": tarfile.CHRTYPE,
    "blockdev": tarfile.BLKTYPE,
    "sparse": tarfile.GNUTYPE_SPARSE,
    "unknown": b"V",  # a GNU volume label: not a file, not a directory
}

_ZIP_MODES = {
    "file": stat.S_IFREG | 0o644,
    "dir": stat.S_IFDIR | 0o755,
    "symlink": stat.S_IFLNK | 0o777,
    "fifo": stat.S_IFIFO | 0o644,
    "chardev": stat.S_IFCHR | 0o644,
    "blockdev": stat.S_IFBLK | 0o644,
    "unknown": 0o160000 | 0o644,  # an S_IFMT value no file type uses
}


def tar_bytes(entries: list[E], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = _TAR_TYPES[e.kind]
            info.mode = 0o644
            info.mtime = 0
            if e.kind in ("symlink", "hardlink"):
                info.linkname = e.target
            if e.kind == "file":
                info.size = len(e.data)
            if e.pax:
                info.pax_headers = dict(e.pax)
            tf.addfile(info, io.BytesIO(e.data) if e.kind == "file" else None)
    return buf.getvalue()


def gzip_bytes(data: bytes, level: int = 6) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def zip_bytes(entries: list[E], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    nul_names: list[tuple[bytes, bytes]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are the point of some tests
        with zipfile.ZipFile(buf, "w", compression=compression) as zf:
            for index, e in enumerate(entries):
                if e.kind in ("hardlink", "sparse"):
                    raise ValueError(f"zip cannot express a {e.kind}")
                name = e.name
                if "\x00" in name:  # zipfile cuts names at NUL: write a stand-in of equal length, patch after
                    stand_in = f"~{index}~".ljust(len(name), "~")[: len(name)]
                    nul_names.append((stand_in.encode(), name.encode()))
                    name = stand_in
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.create_system = 3
                info.external_attr = _ZIP_MODES[e.kind] << 16
                info.compress_type = compression
                data = e.target.encode() if e.kind == "symlink" else e.data
                zf.writestr(info, data)
    out = buf.getvalue()
    for stand_in, real in nul_names:
        out = out.replace(stand_in, real)
    return out


def make_archive(fmt: str, entries: list[E]) -> bytes:
    if fmt == "tar":
        return tar_bytes(entries)
    if fmt == "tar.gz":
        return gzip_bytes(tar_bytes(entries))
    if fmt == "zip":
        return zip_bytes(entries)
    raise ValueError(fmt)


def journal(run: str = RUN, records: int = 3, torn_tail: bool = False) -> bytes:
    lines = [
        canonical_bytes({"v": 2, "run": run, "branch": 0, "lsn": n, "kind": "note", "at": "2026-01-01T00:00:00Z"})
        for n in range(records)
    ]
    out = b"\n".join(lines) + b"\n"
    if torn_tail:
        out += b'{"v":2,"run":"' + run.encode() + b'","bra'
    return out


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(files: list[tuple[str, bytes]], run: str = RUN, **override: Any) -> bytes:
    obj: dict[str, Any] = {
        "format": "loopx-recovery-package",
        "version": 1,
        "run": run,
        "members": [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in files],
    }
    obj.update(override)
    return json.dumps(obj).encode()


def package_entries(
    *,
    run: str = RUN,
    journal_data: bytes | None = None,
    state: dict[str, bytes] | None = None,
    manifest: bytes | None = None,
    extra: list[E] | None = None,
    dirs: bool = False,
) -> list[E]:
    """A valid package's entries (plus ``extra``, unlisted). ``manifest`` replaces the computed one."""
    journal_data = journal(run) if journal_data is None else journal_data
    state = {"state/a.json": b'{"a": 1}\n', "state/sub/b.bin": bytes(range(256)) * 4} if state is None else state
    files = [("journal.jsonl", journal_data), *sorted(state.items())]
    entries = [E("manifest.json", manifest if manifest is not None else manifest_bytes(files, run))]
    if dirs:
        entries += [E("state/", kind="dir"), E("state/sub/", kind="dir")]
    entries += [E(p, d) for p, d in files]
    return entries + (extra or [])


def write(tmp_path: Any, fmt: str, entries: list[E], name: str = "pkg") -> Any:
    path = tmp_path / f"{name}.{fmt}"
    path.write_bytes(make_archive(fmt, entries))
    return path
