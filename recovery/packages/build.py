"""``build_package``: write a recovery package (tar.gz by default; tar or zip on request) atomically.

The archive is deterministic (fixed times, owners and modes) so the same inputs give the same bytes and the
same sha256. It goes through ``kernel.atomic.atomic_write``: a crash leaves the old file or none.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import zipfile
from collections.abc import Mapping
from typing import IO

from kernel.atomic import atomic_write, clean_stale_temporaries

from .manifest import FORMAT, JOURNAL, MANIFEST, VERSION
from .paths import check_path, collision_key

StrPath = str | os.PathLike[str]
BUILD_FORMATS = ("tar.gz", "tar", "zip")


def package_members(run: str, journal_bytes: bytes, state_files: Mapping[str, bytes] | None) -> list[tuple[str, bytes]]:
    """The members in archive order: manifest.json, journal.jsonl, then state/... sorted by path.

    ``state_files`` maps paths relative to ``state/`` to their bytes. Raises ValueError on a path that breaks
    the package's path rules or collides with another.
    """
    if not isinstance(run, str) or not run:
        raise ValueError("run must be a non-empty string")
    files: list[tuple[str, bytes]] = [(JOURNAL, bytes(journal_bytes))]
    keys: set[str] = {collision_key(JOURNAL)}
    dirs: set[str] = set()
    for rel, data in sorted((state_files or {}).items()):
        checked = check_path(rel)
        if not checked.ok or checked.is_dir or checked.normalised is None:
            raise ValueError(f"state file path {rel!r} breaks the package path rules")
        path = f"state/{checked.normalised}"
        key = collision_key(path)
        parts = key.split("/")
        ancestors = ["/".join(parts[:depth]) for depth in range(1, len(parts))]
        if key in keys or key in dirs or any(a in keys for a in ancestors):
            raise ValueError(f"state file path {rel!r} collides with another")
        keys.add(key)
        dirs.update(ancestors)
        files.append((path, bytes(data)))
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "run": run,
        "members": [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in files],
    }
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    return [(MANIFEST, manifest_bytes), *files]


def write_archive(fh: IO[bytes], members: list[tuple[str, bytes]], fmt: str = "tar.gz", compresslevel: int = 6) -> None:
    """Write ``members`` (path, bytes) as an archive of ``fmt`` to ``fh`` (seekable for zip)."""
    if fmt not in BUILD_FORMATS:
        raise ValueError(f"format must be one of {', '.join(BUILD_FORMATS)}")
    if fmt == "zip":
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as zf:
            for path, data in members:
                info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
                info.create_system = 3
                info.external_attr = 0o100600 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        return
    gz: gzip.GzipFile | None = None
    sink: IO[bytes] | gzip.GzipFile = fh
    if fmt == "tar.gz":
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=compresslevel)
        sink = gz
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path, data in members:
            member = tarfile.TarInfo(path)
            member.size = len(data)
            member.mode = 0o600
            member.mtime = 0
            tf.addfile(member, io.BytesIO(data))
    if gz is not None:
        gz.close()  # writes the gzip trailer; fh stays open


def build_package(
    out_path: StrPath,
    run: str,
    journal_bytes: bytes,
    state_files: Mapping[str, bytes] | None = None,
    *,
    fmt: str = "tar.gz",
    compresslevel: int = 6,
    mode: int = 0o600,
) -> str:
    """Write a package for ``run`` to ``out_path`` atomically and return the package file's sha256 (hex).

    ``state_files`` maps paths relative to ``state/`` to bytes; ``fmt`` is ``tar.gz`` (default), ``tar`` or
    ``zip``. The journal's bytes round-trip unchanged through check and restore.
    """
    members = package_members(run, journal_bytes, state_files)
    directory = os.path.dirname(os.path.abspath(os.fspath(out_path)))
    clean_stale_temporaries(directory)
    digest = hashlib.sha256()
    with atomic_write(out_path, mode) as fh:
        write_archive(fh, members, fmt, compresslevel)
        fh.flush()
        fh.seek(0)
        for chunk in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()
