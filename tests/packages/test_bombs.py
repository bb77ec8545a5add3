"""Decompression bombs and streaming: refused early, in bounded memory, without reading the whole bomb."""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from recovery.packages import Limits, _streams, check_package
from recovery.packages import report as codes

from .crafting import E, make_archive, manifest_bytes, package_entries, tar_bytes

MiB = 1024 * 1024


def _expanded(detail: str) -> int:
    match = re.search(r"\((\d+) bytes", detail)
    assert match, detail
    return int(match.group(1))


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.PAX_FORMAT)


def _gzip_bomb(name: str, claimed: int, mib_of_zeros: int) -> bytes:
    """A tar.gz made of concatenated gzip members (which gzip allows): a header, then one ~1 KiB member per MiB
    of zeros, cheap to build however large it expands."""
    zeros = gzip.compress(bytes(MiB), compresslevel=9, mtime=0)
    head = gzip.compress(_tar_header(name, claimed), mtime=0)
    return head + zeros * mib_of_zeros + gzip.compress(bytes(1024), mtime=0)


def test_gzip_bomb_stops_at_the_floor(tmp_path: Path) -> None:
    """A tar.gz whose member is 1 GiB of zeros (about 1 MiB compressed): refused after a couple of MiB."""
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(_gzip_bomb("state/bomb", 1 << 30, 1024))
    report = check_package(path, Limits(max_member_bytes=2 << 30, max_total_bytes=4 << 30))
    ratio = [f for f in report.findings if f.code == codes.COMPRESSION_RATIO]
    assert ratio, report.to_dict()  # the member's or the whole archive's, whichever passes the floor first
    assert _expanded(ratio[0].detail) < 4 * MiB  # gzip's ratio is measured as it inflates


def test_gzip_bomb_hidden_in_a_skipped_member(tmp_path: Path) -> None:
    """A member too large by its header is skipped, but skipping still inflates: the ratio still stops it."""
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(_gzip_bomb("state/bomb", 100 * MiB, 100))  # over the member limit, under the total
    report = check_package(path)
    assert codes.MEMBER_TOO_LARGE in report.codes()
    ratio = [f for f in report.findings if f.code == codes.COMPRESSION_RATIO]
    assert ratio and ratio[0].member is None and _expanded(ratio[0].detail) < 4 * MiB


def test_claims_past_the_total_stop_before_inflating(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(_gzip_bomb("state/bomb", 1 << 40, 64))
    report = check_package(path)
    assert report.codes() == [codes.MEMBER_TOO_LARGE, codes.PACKAGE_TOO_LARGE]


def test_zip_bomb_member(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("state/bomb", bytes(60 * MiB))
    path = tmp_path / "bomb.zip"
    path.write_bytes(buf.getvalue())
    report = check_package(path)
    ratio = [f for f in report.findings if f.code == codes.COMPRESSION_RATIO]
    assert ratio and ratio[0].member == "state/bomb", report.to_dict()
    # zip's ratio is against the member's compressed size: refused once 200 times that is read (plus one piece)
    compressed = zipfile.ZipFile(path).getinfo("state/bomb").compress_size
    assert _expanded(ratio[0].detail) <= 200 * compressed + MiB


def test_zip_bomb_of_many_small_members(tmp_path: Path) -> None:
    """Each member stays under the 1 MiB floor; the archive as a whole does not."""
    state = {f"state/z{n:03d}": bytes(MiB) for n in range(100)}
    data = make_archive("zip", package_entries(state=state))
    path = tmp_path / "many.zip"
    path.write_bytes(data)
    report = check_package(path)
    ratio = [f for f in report.findings if f.code == codes.COMPRESSION_RATIO]
    assert ratio and ratio[0].member is None
    assert _expanded(ratio[0].detail) <= 200 * len(data) + MiB


def test_ratio_counts_only_past_the_floor(tmp_path: Path) -> None:
    """Highly compressible but small packages are fine: the ratio is counted once past 1 MiB."""
    for fmt in ("tar.gz", "zip"):
        path = tmp_path / f"small.{fmt}"
        path.write_bytes(make_archive(fmt, package_entries(state={"state/zeros": bytes(MiB // 2)})))
        assert check_package(path).accepted, fmt


def test_members_are_streamed_not_held(tmp_path: Path) -> None:
    """A 48 MiB member is verified with a few MiB of Python memory at most (it is read in 1 MiB pieces)."""
    big = os.urandom(48 * MiB)
    path = tmp_path / "big.tar"
    entries = package_entries(state={"state/big": big})
    path.write_bytes(tar_bytes(entries))
    del big, entries
    tracemalloc.start()
    try:
        report = check_package(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.accepted
    assert peak < 8 * MiB, peak


def test_gzip_stream_is_streamed_too(tmp_path: Path) -> None:
    big = os.urandom(24 * MiB)
    path = tmp_path / "big.tar.gz"
    path.write_bytes(gzip.compress(tar_bytes(package_entries(state={"state/big": big})), compresslevel=1))
    del big
    tracemalloc.start()
    try:
        report = check_package(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.accepted
    assert peak < 8 * MiB, peak


def test_an_oversized_pax_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    entries = package_entries(extra=[E("state/x", b"x", pax={"comment": "y" * (256 * 1024)})])
    path = tmp_path / "pax.tar"
    path.write_bytes(tar_bytes(entries))
    report = check_package(path)
    assert report.codes() == [codes.ARCHIVE_CORRUPT]
    assert "extended header" in report.findings[0].detail


def test_an_oversized_manifest_is_refused(tmp_path: Path) -> None:
    files = [("journal.jsonl", b"{}\n")]
    huge = manifest_bytes(files)[:-1] + b', "pad": "' + b"p" * (2 * MiB) + b'"}'
    path = tmp_path / "m.tar"
    path.write_bytes(tar_bytes(package_entries(state={}, manifest=huge)))
    report = check_package(path, Limits(max_manifest_bytes=MiB))
    assert report.codes() == [codes.MANIFEST_INVALID]
    assert "over 1048576 bytes" in report.findings[0].detail


def test_an_overlong_journal_line_cannot_be_verified(tmp_path: Path) -> None:
    journal_data = b'{"v":2,"run":"run-1"}\n{"v":2,"run":"run-1","pad":"' + b"p" * (2 * MiB) + b'"}\n'
    path = tmp_path / "j.tar"
    path.write_bytes(tar_bytes(package_entries(journal_data=journal_data)))
    assert check_package(path).accepted  # under the 4 MiB default: parsed like any line
    report = check_package(path, Limits(max_journal_line_bytes=MiB))
    assert report.codes() == [codes.JOURNAL_INVALID]
    assert "cannot be verified" in report.findings[0].detail


def test_many_tiny_gzip_members_cost_in_proportion_to_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zlib copies the input a call leaves over; were every call given a large block, a concatenation of empty
    gzip members (20 bytes each, legal and inflating to nothing) would cost a block's copy per member."""
    empty = gzip.compress(b"", mtime=0)
    path = tmp_path / "tiny.tar.gz"
    path.write_bytes(gzip.compress(tar_bytes(package_entries()), mtime=0) + empty * 10_000)
    fed = [0]
    real = _streams.zlib.decompressobj

    class Counting:
        def __init__(self, wbits: int) -> None:
            self._d = real(wbits)

        def __getattr__(self, name: str) -> object:
            return getattr(self._d, name)

        def decompress(self, data: bytes | memoryview, max_length: int = 0) -> bytes:
            fed[0] += len(data)
            return self._d.decompress(data, max_length)

    monkeypatch.setattr(_streams.zlib, "decompressobj", Counting)
    assert check_package(path).accepted  # gzip allows concatenated members, empty ones included
    assert fed[0] < 256 * path.stat().st_size, fed[0]  # 64 KiB per member would be about 1,600 times
