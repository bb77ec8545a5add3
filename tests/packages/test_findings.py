"""Every finding code of docs/packages.md, with a crafted archive of each format that can express it.

Which codes cannot occur in which format (checked by ``test_every_code_is_covered``):

- ``compression_ratio`` cannot occur in a plain tar: its members are stored, so nothing expands (the one tar
  feature that expands, sparse files, is refused as ``special_member``);
- ``unsupported_format`` has no format by definition: it is tested once, with many kinds of bytes;
- ``target_exists`` is about the restore target, not the archive: tests/packages/test_restore.py covers it for
  each format.

Within a code some variants are format-specific (documented at each case): zip has no hard links and no
sparse files; a zip name cannot be invalid UTF-8 (without the UTF-8 flag it is cp437, which decodes any
byte); a tar file entry can end in ``/`` while in zip the name decides the type.
"""

from __future__ import annotations

import io
import json
import random
import struct
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from recovery.packages import ALL_CODES, Limits, check_package
from recovery.packages import report as codes

from .crafting import (
    FORMATS,
    E,
    gzip_bytes,
    journal,
    make_archive,
    manifest_bytes,
    package_entries,
    tar_bytes,
    zip_bytes,
)

ALL = FORMATS
TARS = ("tar", "tar.gz")
COMPRESSED = ("tar.gz", "zip")
SECRET = b"SECRET-CONTENT-NEVER-QUOTED"
STATE = {"state/a.json": b'{"a": 1, "s": "' + SECRET + b'"}\n', "state/sub/b.bin": bytes(range(256)) * 4}
MiB = 1024 * 1024
NOISE = random.Random(0).randbytes(64 * 1024)


def pkg(fmt: str, **kw: object) -> bytes:
    kw.setdefault("state", dict(STATE))
    return make_archive(fmt, package_entries(**kw))  # type: ignore[arg-type]


def extra(*entries: E) -> Callable[[str], bytes]:
    return lambda fmt: pkg(fmt, extra=list(entries))


def with_manifest(manifest: bytes) -> Callable[[str], bytes]:
    return lambda fmt: pkg(fmt, manifest=manifest)


def _files(state: dict[str, bytes] | None = None, journal_data: bytes | None = None) -> list[tuple[str, bytes]]:
    return [("journal.jsonl", journal() if journal_data is None else journal_data), *sorted((state or STATE).items())]


def manifest_obj(**override: object) -> dict[str, object]:
    return json.loads(manifest_bytes(_files(), **override))  # type: ignore[no-any-return]


# -- archive_corrupt builders, per format -------------------------------------------------------------------


def _valid_tar() -> bytes:
    return tar_bytes(package_entries(state=dict(STATE)))


def _tar_offsets(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return tf.getmembers()


def tar_truncated_in_data() -> bytes:
    data = _valid_tar()
    last = _tar_offsets(data)[-1]
    return data[: last.offset_data + last.size // 2]


def tar_without_end_marker() -> bytes:
    data = _valid_tar()
    last = _tar_offsets(data)[-1]
    return data[: last.offset_data + ((last.size + 511) // 512) * 512]


def tar_one_zero_block() -> bytes:
    return tar_without_end_marker() + bytes(512)


def tar_bad_checksum() -> bytes:
    data = bytearray(_valid_tar())
    second = _tar_offsets(bytes(data))[1]
    data[second.offset + 10] ^= 0x20  # a byte of the name: the header checksum no longer matches
    return bytes(data)


def tar_trailing_garbage() -> bytes:
    return _valid_tar() + b"hidden second archive"


def gz_truncated() -> bytes:
    data = gzip_bytes(_valid_tar())
    return data[: len(data) // 2]


def gz_bad_crc() -> bytes:
    data = bytearray(gzip_bytes(_valid_tar()))
    data[-8] ^= 0xFF  # the CRC32 of the trailer
    return bytes(data)


def gz_trailing_garbage() -> bytes:
    return gzip_bytes(_valid_tar()) + b"garbage after the gzip stream"


def gz_inner_no_end_marker() -> bytes:
    return gzip_bytes(tar_without_end_marker())


def _valid_zip(compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    return zip_bytes(package_entries(state=dict(STATE)), compression)


def zip_truncated() -> bytes:
    data = _valid_zip()
    return data[:-10]


def zip_bad_crc() -> bytes:
    data = bytearray(_valid_zip(zipfile.ZIP_STORED))
    at = bytes(data).index(b"\x00\x01\x02\x03\x04\x05")  # inside state/sub/b.bin, stored
    data[at + 3] ^= 0xFF
    return bytes(data)


def zip_overlapping() -> bytes:
    """A member whose data runs over the next member's local header: the overlapping-member zip bomb's trick."""
    data = bytearray(_valid_zip(zipfile.ZIP_STORED))
    locals_ = [i for i in range(len(data)) if data[i : i + 4] == b"PK\x03\x04"]
    centrals = [i for i in range(len(data)) if data[i : i + 4] == b"PK\x01\x02"]
    grow = 40  # past the next local header (30 bytes plus its name)
    for at, size_at in ((locals_[-2], 18), (centrals[-2], 20)):  # compressed and uncompressed sizes
        csize, usize = struct.unpack("<LL", data[at + size_at : at + size_at + 8])
        data[at + size_at : at + size_at + 8] = struct.pack("<LL", csize + grow, usize + grow)
    return bytes(data)


def zip_name_mismatch() -> bytes:
    data = bytearray(_valid_zip())
    cd = bytes(data).index(b"PK\x01\x02")
    name_at = cd + 46
    data[name_at] ^= 0x01  # the central name no longer matches the local header's
    return bytes(data)


def zip_encrypted() -> bytes:
    data = bytearray(_valid_zip())
    for sig, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = bytes(data).rindex(sig)  # the last member: state/sub/b.bin
        flags = struct.unpack("<H", data[at + flag_at : at + flag_at + 2])[0] | 0x1
        data[at + flag_at : at + flag_at + 2] = struct.pack("<H", flags)
    return bytes(data)


def zip_trailing_garbage() -> bytes:
    return _valid_zip() + b"garbage after the end record"


def zip_lzma() -> bytes:
    return zip_bytes(package_entries(state=dict(STATE)), zipfile.ZIP_LZMA)


# -- manifest_invalid variants --------------------------------------------------------------------------


def _m(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _entry_override(index: int = 1, **fields: object) -> bytes:
    obj = manifest_obj()
    members = obj["members"]
    assert isinstance(members, list)
    members[index].update(fields)
    return _m(obj)


MANIFEST_INVALID = {
    "not-json": b"{not json",
    "not-utf8": b'{"format": "\xff"}',
    "an-array": b"[]",
    "float": manifest_bytes(_files()).replace(b'"version": 1', b'"version": 1.0'),
    "duplicate-key": manifest_bytes(_files()).replace(b'"version": 1', b'"version": 1, "version": 1'),
    "wrong-format": _m(manifest_obj(format="zip-of-things")),
    "wrong-version": _m(manifest_obj(version=2)),
    "bool-version": _m(manifest_obj(version=True)),
    "empty-run": _m(manifest_obj(run="")),
    "extra-key": _m({**manifest_obj(), "note": "x"}),
    "members-not-list": _m(manifest_obj(members={})),
    "entry-extra-field": _entry_override(mode=420),
    "entry-negative-size": _entry_override(size=-1),
    "entry-bad-sha": _entry_override(sha256="abc"),
    "entry-outside-state": _entry_override(path="elsewhere/a.json"),
    "entry-traversal": _entry_override(path="state/../../a.json"),
    "entry-directory": _entry_override(path="state/sub/"),
    "entry-duplicate": _entry_override(2, path="state/A.JSON"),
    "no-journal-listed": _m(
        manifest_obj(members=[m for m in manifest_obj()["members"] if m["path"] != "journal.jsonl"])  # type: ignore[attr-defined]
    ),
}


# -- the cases ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    code: str
    formats: tuple[str, ...]
    build: Callable[[str], bytes]
    member: str | None = "?"  # the expected member of the finding; "?" = not asserted
    limits: Limits | None = None


def raw(per_format: dict[str, Callable[[], bytes]]) -> Callable[[str], bytes]:
    return lambda fmt: per_format[fmt]()


CASES: dict[str, Case] = {
    # path_absolute
    "absolute-slash": Case(codes.PATH_ABSOLUTE, ALL, extra(E("/etc/evil", b"x")), "/etc/evil"),
    "absolute-drive": Case(codes.PATH_ABSOLUTE, ALL, extra(E("C:/evil", b"x")), "C:/evil"),
    "absolute-unc": Case(codes.PATH_ABSOLUTE, ALL, extra(E("\\\\server\\share\\x", b"x")), "\\\\server\\share\\x"),
    # path_traversal
    "traversal": Case(codes.PATH_TRAVERSAL, ALL, extra(E("../evil", b"x")), "../evil"),
    "traversal-inner": Case(codes.PATH_TRAVERSAL, ALL, extra(E("state/../../evil", b"x")), "state/../../evil"),
    "traversal-folded": Case(codes.PATH_TRAVERSAL, ALL, extra(E("state/./..//evil", b"x")), "state/./..//evil"),
    "traversal-backslash": Case(codes.PATH_TRAVERSAL, ALL, extra(E("state\\..\\..\\evil", b"x"))),
    # a pax header renames a harmless-looking member: the final name is the one checked (tar only)
    "traversal-pax-rename": Case(
        codes.PATH_TRAVERSAL, TARS, extra(E("state/harmless", b"x", pax={"path": "../../evil"})), "../../evil"
    ),
    # path_invalid
    # in tar a NUL ends a ustar name field, so it can only arrive through a pax record
    "invalid-nul": Case(
        codes.PATH_INVALID, ALL, extra(E("state/a\x00b", b"x", pax={"path": "state/a\x00b"})), "state/a\x00b"
    ),
    "invalid-control": Case(codes.PATH_INVALID, ALL, extra(E("state/a\x1bb", b"x")), "state/a\x1bb"),
    "invalid-backslash": Case(codes.PATH_INVALID, ALL, extra(E("state\\a", b"x")), "state\\a"),
    "invalid-long": Case(codes.PATH_INVALID, ALL, extra(E("state/" + "x" * 1100, b"x")), "state/" + "x" * 1100),
    "invalid-long-multibyte": Case(codes.PATH_INVALID, ALL, extra(E("state/" + "é" * 520, b"x"))),
    # "./" as a directory is the root, folded (tests/packages/test_dot_root.py); as a file it names nothing
    "invalid-names-nothing": Case(codes.PATH_INVALID, ALL, extra(E(".", b"x"))),
    "invalid-empty": Case(codes.PATH_INVALID, ("zip",), extra(E("", b"x")), ""),
    "invalid-empty-pax": Case(codes.PATH_INVALID, TARS, extra(E("state/x", b"x", pax={"path": ""})), ""),
    # a tar file entry whose name marks a directory (in zip the name decides the type: special_member below)
    "invalid-file-with-slash": Case(codes.PATH_INVALID, TARS, extra(E("state/x/", b"x")), "state/x/"),
    "invalid-not-utf8": Case(
        codes.PATH_INVALID,
        TARS,
        lambda fmt: (lambda t: gzip_bytes(t) if fmt == "tar.gz" else t)(
            tar_bytes(package_entries(state=dict(STATE)) + [E("state/caf\udce9", b"x")], tarfile.GNU_FORMAT)
        ),
        "state/caf\udce9",
    ),
    # link_member
    "symlink": Case(codes.LINK_MEMBER, ALL, extra(E("state/link", kind="symlink", target="/etc/passwd")), "state/link"),
    "symlink-inside": Case(codes.LINK_MEMBER, ALL, extra(E("state/link", kind="symlink", target="a.json"))),
    "hardlink": Case(  # zip has no hard links
        codes.LINK_MEMBER, TARS, extra(E("state/hard", kind="hardlink", target="journal.jsonl")), "state/hard"
    ),
    # special_member
    "fifo": Case(codes.SPECIAL_MEMBER, ALL, extra(E("state/fifo", kind="fifo")), "state/fifo"),
    "chardev": Case(codes.SPECIAL_MEMBER, ALL, extra(E("state/null", kind="chardev")), "state/null"),
    "blockdev": Case(codes.SPECIAL_MEMBER, ALL, extra(E("state/sda", kind="blockdev")), "state/sda"),
    "unknown-type": Case(codes.SPECIAL_MEMBER, ALL, extra(E("state/vol", kind="unknown")), "state/vol"),
    "sparse": Case(codes.SPECIAL_MEMBER, TARS, extra(E("state/sparse", kind="sparse")), "state/sparse"),
    "dir-with-data": Case(codes.SPECIAL_MEMBER, ("zip",), extra(E("state/d/", b"data", kind="dir")), "state/d/"),
    # zip only: the mode bits say file, the name says directory
    "zip-file-mode-dir-name": Case(
        codes.SPECIAL_MEMBER,
        ("zip",),
        lambda fmt: zip_bytes(package_entries(state=dict(STATE)) + [E("state/x/", b"x")]),
        "state/x/",
    ),
    # duplicate_member
    "duplicate": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("state/a.json", b"again")), "state/a.json"),
    "duplicate-normalised": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("./state//a.json", b"again")), "./state//a.json"),
    "duplicate-nfc": Case(
        codes.DUPLICATE_MEMBER,
        ALL,
        lambda fmt: pkg(fmt, state={"state/caf\u00e9": b"nfc"}, extra=[E("state/cafe\u0301", b"nfd")]),
        "state/cafe\u0301",
    ),
    "duplicate-case": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("STATE/A.JSON", b"upper")), "STATE/A.JSON"),
    "duplicate-case-sharp-s": Case(
        codes.DUPLICATE_MEMBER,
        ALL,
        lambda fmt: pkg(fmt, state={"state/stra\u00dfe": b"1"}, extra=[E("state/STRASSE", b"2")]),
    ),
    "duplicate-file-and-dir": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("state/a.json/", kind="dir"))),
    "duplicate-file-under-file": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("state/a.json/x", b"x")), "state/a.json/x"),
    "duplicate-file-where-dir": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("state/sub", b"x")), "state/sub"),
    "duplicate-manifest": Case(codes.DUPLICATE_MEMBER, ALL, extra(E("manifest.json", b"{}")), "manifest.json"),
    # member_too_large
    "too-large": Case(
        codes.MEMBER_TOO_LARGE,
        ALL,
        lambda fmt: pkg(fmt, state={"state/big": b"y" * 5000}),
        "state/big",
        Limits(max_member_bytes=4096),
    ),
    # a pax "size" record makes the header claim a terabyte (the data is not there): refused unread
    "too-large-pax-claim": Case(
        codes.MEMBER_TOO_LARGE, TARS, extra(E("state/claim", b"abc", pax={"size": str(1 << 40)})), "state/claim"
    ),
    # package_too_large
    "package-too-large": Case(
        codes.PACKAGE_TOO_LARGE,
        ALL,
        lambda fmt: pkg(fmt, state={f"state/{n}": bytes([n]) * 2000 for n in range(4)}),
        None,
        Limits(max_total_bytes=6000),
    ),
    # too_many_members
    "too-many-members": Case(
        codes.TOO_MANY_MEMBERS,
        ALL,
        lambda fmt: pkg(fmt, state={f"state/{n}": b"x" for n in range(10)}),
        None,
        Limits(max_members=5),
    ),
    # compression_ratio (not in a plain tar: nothing there expands)
    "ratio-member": Case(
        codes.COMPRESSION_RATIO,
        COMPRESSED,
        # incompressible company keeps the archive as a whole under the ratio: the member is the bomb
        lambda fmt: pkg(fmt, state={"state/noise": NOISE, "state/zeros": bytes(4 * MiB)}),
        "state/zeros",
    ),
    "ratio-archive": Case(
        codes.COMPRESSION_RATIO,
        COMPRESSED,
        lambda fmt: pkg(fmt, state={f"state/z{n}": bytes(MiB) for n in range(8)}),  # each at the floor, not past it
        None,
    ),
    # manifest_missing
    "manifest-missing": Case(
        codes.MANIFEST_MISSING,
        ALL,
        lambda fmt: make_archive(fmt, package_entries(state=dict(STATE))[1:]),
        "manifest.json",
    ),
    "manifest-not-a-file": Case(
        codes.MANIFEST_MISSING,
        ALL,
        lambda fmt: make_archive(
            fmt, [E("manifest.json", kind="symlink", target="state/a.json"), *package_entries(state=dict(STATE))[1:]]
        ),
    ),
    "manifest-nested": Case(
        codes.MANIFEST_MISSING,
        ALL,
        lambda fmt: make_archive(
            fmt,
            [E("state/manifest.json", manifest_bytes(_files())), *package_entries(state=dict(STATE))[1:]],
        ),
    ),
    # unlisted_member
    "unlisted-state": Case(codes.UNLISTED_MEMBER, ALL, extra(E("state/extra", b"x")), "state/extra"),
    "unlisted-root": Case(codes.UNLISTED_MEMBER, ALL, extra(E("README", b"x")), "README"),
    "unlisted-directory": Case(codes.UNLISTED_MEMBER, ALL, extra(E("docs/", kind="dir"))),
    # missing_member
    "missing": Case(
        codes.MISSING_MEMBER,
        ALL,
        lambda fmt: make_archive(
            fmt,
            package_entries(
                state=dict(STATE),
                manifest=manifest_bytes(_files() + [("state/ghost", b"boo")]),
            ),
        ),
        "state/ghost",
    ),
    "missing-journal": Case(
        codes.MISSING_MEMBER,
        ALL,
        lambda fmt: make_archive(fmt, [e for e in package_entries(state=dict(STATE)) if e.name != "journal.jsonl"]),
        "journal.jsonl",
    ),
    # size_mismatch / checksum_mismatch
    "size-mismatch": Case(
        codes.SIZE_MISMATCH,
        ALL,
        lambda fmt: pkg(
            fmt,
            manifest=_m(
                manifest_obj(
                    members=[
                        {**m, "size": m["size"] + 1} if m["path"] == "state/a.json" else m
                        for m in manifest_obj()["members"]  # type: ignore[attr-defined]
                    ]
                )
            ),
        ),
        "state/a.json",
    ),
    "checksum-mismatch": Case(
        codes.CHECKSUM_MISMATCH,
        ALL,
        lambda fmt: pkg(
            fmt,
            manifest=_m(
                manifest_obj(
                    members=[
                        {**m, "sha256": "0" * 64} if m["path"] == "state/a.json" else m
                        for m in manifest_obj()["members"]  # type: ignore[attr-defined]
                    ]
                )
            ),
        ),
        "state/a.json",
    ),
    # journal_invalid
    "journal-not-utf8": Case(
        codes.JOURNAL_INVALID, ALL, lambda fmt: pkg(fmt, journal_data=journal() + b'{"run": "\xff"}\n'), "journal.jsonl"
    ),
    "journal-no-record": Case(
        codes.JOURNAL_INVALID, ALL, lambda fmt: pkg(fmt, journal_data=b'{"v": 2, "run": "run-1", "bra'), "journal.jsonl"
    ),
    "journal-empty": Case(codes.JOURNAL_INVALID, ALL, lambda fmt: pkg(fmt, journal_data=b""), "journal.jsonl"),
    "journal-other-run": Case(
        codes.JOURNAL_INVALID,
        ALL,
        lambda fmt: pkg(fmt, journal_data=journal() + journal("run-2", 1)),
        "journal.jsonl",
    ),
    "journal-wrong-run-everywhere": Case(
        codes.JOURNAL_INVALID, ALL, lambda fmt: pkg(fmt, journal_data=journal("run-2")), "journal.jsonl"
    ),
    # archive_corrupt
    "corrupt-truncated": Case(
        codes.ARCHIVE_CORRUPT,
        ALL,
        raw({"tar": tar_truncated_in_data, "tar.gz": gz_truncated, "zip": zip_truncated}),
    ),
    "corrupt-no-end-marker": Case(
        codes.ARCHIVE_CORRUPT, TARS, raw({"tar": tar_without_end_marker, "tar.gz": gz_inner_no_end_marker})
    ),
    "corrupt-half-end-marker": Case(
        codes.ARCHIVE_CORRUPT,
        TARS,
        raw({"tar": tar_one_zero_block, "tar.gz": lambda: gzip_bytes(tar_one_zero_block())}),
    ),
    "corrupt-bad-header": Case(
        codes.ARCHIVE_CORRUPT, TARS, raw({"tar": tar_bad_checksum, "tar.gz": lambda: gzip_bytes(tar_bad_checksum())})
    ),
    "corrupt-trailing-data": Case(
        codes.ARCHIVE_CORRUPT,
        ALL,
        raw({"tar": tar_trailing_garbage, "tar.gz": gz_trailing_garbage, "zip": zip_trailing_garbage}),
    ),
    "corrupt-checksum": Case(codes.ARCHIVE_CORRUPT, ("tar.gz", "zip"), raw({"tar.gz": gz_bad_crc, "zip": zip_bad_crc})),
    "corrupt-zip-overlap": Case(codes.ARCHIVE_CORRUPT, ("zip",), raw({"zip": zip_overlapping})),
    "corrupt-zip-name-mismatch": Case(codes.ARCHIVE_CORRUPT, ("zip",), raw({"zip": zip_name_mismatch})),
    "corrupt-zip-encrypted": Case(codes.ARCHIVE_CORRUPT, ("zip",), raw({"zip": zip_encrypted}), "state/sub/b.bin"),
    "corrupt-zip-lzma": Case(codes.ARCHIVE_CORRUPT, ("zip",), raw({"zip": zip_lzma})),
}
for _name, _data in MANIFEST_INVALID.items():
    CASES[f"manifest-invalid-{_name}"] = Case(codes.MANIFEST_INVALID, ALL, with_manifest(_data), "manifest.json")

NOT_EXPRESSIBLE = {
    ("tar", codes.COMPRESSION_RATIO): "a plain tar stores members: nothing expands",
}
ELSEWHERE = {codes.UNSUPPORTED_FORMAT: "test_unsupported_format", codes.TARGET_EXISTS: "test_restore.py"}

PARAMS = [pytest.param(name, fmt, id=f"{name}-{fmt}") for name, case in CASES.items() for fmt in case.formats]


def _check(tmp_path: Path, data: bytes, fmt: str, limits: Limits | None = None):
    path = tmp_path / f"pkg.{fmt}"
    path.write_bytes(data)
    return check_package(path, limits)


@pytest.mark.parametrize(("name", "fmt"), PARAMS)
def test_finding(tmp_path: Path, name: str, fmt: str) -> None:
    case = CASES[name]
    report = _check(tmp_path, case.build(fmt), fmt, case.limits)
    assert not report.accepted
    assert report.format == fmt
    assert case.code in report.codes(), report.to_dict()
    found = [f for f in report.findings if f.code == case.code]
    if case.member != "?":
        assert any(f.member == case.member for f in found), report.to_dict()
    for finding in report.findings:
        assert finding.code in ALL_CODES
        assert finding.detail and "\n" not in finding.detail
        assert SECRET.decode() not in finding.detail
    json.dumps(report.to_dict())  # always serialisable


def test_every_code_is_covered() -> None:
    for code in ALL_CODES:
        if code in ELSEWHERE:
            continue
        for fmt in FORMATS:
            if (fmt, code) in NOT_EXPRESSIBLE:
                assert not any(c.code == code and fmt in c.formats for c in CASES.values())
                continue
            assert any(c.code == code and fmt in c.formats for c in CASES.values()), (code, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_benign_package_is_accepted(tmp_path: Path, fmt: str) -> None:
    report = _check(tmp_path, pkg(fmt), fmt)
    assert report.to_dict() == {"accepted": True, "format": fmt, "members": 4, "findings": []}


@pytest.mark.parametrize("fmt", FORMATS)
def test_benign_variants_are_accepted(tmp_path: Path, fmt: str) -> None:
    """Directory entries, ./ and // in names, a torn journal tail, Unicode names, empty state: all fine."""
    entries = package_entries(
        journal_data=journal(torn_tail=True),
        state={"state/caf\u00e9.json": b"{}", "state/deep/er/x": b"", "state/Upper": b"u"},
        dirs=True,
    )
    entries = [
        E("./" + e.name.replace("/", "//"), e.data, e.kind) if e.name.startswith("state/") else e for e in entries
    ]
    report = _check(tmp_path, make_archive(fmt, entries), fmt)
    assert report.accepted, report.to_dict()
    assert report.members == len(entries)


@pytest.mark.parametrize("fmt", FORMATS)
def test_journal_contract_violations_do_not_refuse(tmp_path: Path, fmt: str) -> None:
    """Only the three journal_invalid reasons refuse: gaps, floats, a record without a run are evidence."""
    data = (
        journal(records=2)
        + b'{"v":2,"run":"run-1","branch":0,"lsn":7,"kind":"note","at":"x"}\n'  # lsn gap
        + b'{"v":2,"run":"run-1","branch":0,"lsn":8,"kind":"note","at":"x","f":1.5}\n'  # record_invalid
        + b'{"v":2,"branch":0,"lsn":9,"kind":"note"}\n'  # no run at all
        + b"\n"  # an empty line
        + b'{"torn'
    )
    report = _check(tmp_path, pkg(fmt, journal_data=data), fmt)
    assert report.accepted, report.to_dict()


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_findings_are_reported_not_just_the_first(tmp_path: Path, fmt: str) -> None:
    data = make_archive(
        fmt,
        package_entries(
            state=dict(STATE),
            manifest=manifest_bytes(_files() + [("state/ghost", b"")]),
            extra=[
                E("/abs", b"x"),
                E("../up", b"x"),
                E("state/link", kind="symlink"),
                E("state/fifo", kind="fifo"),
                E("state/a.json", b"dup"),
                E("state/unlisted", b"x"),
            ],
        ),
    )
    report = _check(tmp_path, data, fmt)
    assert set(report.codes()) >= {
        codes.PATH_ABSOLUTE,
        codes.PATH_TRAVERSAL,
        codes.LINK_MEMBER,
        codes.SPECIAL_MEMBER,
        codes.DUPLICATE_MEMBER,
        codes.UNLISTED_MEMBER,
        codes.MISSING_MEMBER,
    }
    assert report.members == 10


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"hello, world\n" * 100, id="text"),
        pytest.param(bytes(10240), id="zeros"),
        pytest.param(gzip_bytes(b"not a tar at all\n" * 100), id="gzip-of-text"),
        pytest.param(gzip_bytes(b""), id="gzip-of-nothing"),
        pytest.param(b"\x1f\x8b\x08\x00garbage", id="gzip-magic-then-garbage"),
        pytest.param(__import__("bz2").compress(tar_bytes([E("x", b"x")])), id="tar.bz2"),
        pytest.param(__import__("lzma").compress(tar_bytes([E("x", b"x")])), id="tar.xz"),
        pytest.param(b"junk" + zip_bytes([E("x", b"x")]), id="zip-with-prefix"),
        pytest.param(tar_bytes([E("x", b"x")], tarfile.USTAR_FORMAT).replace(b"ustar", b"     "), id="v7-tar"),
    ],
)
def test_unsupported_format(tmp_path: Path, data: bytes) -> None:
    report = _check(tmp_path, data, "bin")
    assert report.to_dict()["format"] is None
    assert report.codes() == [codes.UNSUPPORTED_FORMAT]
    assert report.members == 0


def test_format_is_recognised_by_content_not_name(tmp_path: Path) -> None:
    for fmt in FORMATS:
        path = tmp_path / "package.zip.tar.gz.misleading"
        path.write_bytes(pkg(fmt))
        assert check_package(path).format == fmt


def test_zip_too_many_members_counts_the_central_directory(tmp_path: Path) -> None:
    report = _check(tmp_path, pkg("zip", state={f"state/{n}": b"x" for n in range(10)}), "zip", Limits(max_members=5))
    assert report.codes() == [codes.TOO_MANY_MEMBERS]
    assert report.members == 12  # 10 state files, the journal, the manifest


def test_long_names_are_fine_below_the_limit(tmp_path: Path) -> None:
    name = "state/" + "d" * 200 + "/" + "f" * 700  # over ustar's 100 and 155: pax (tar) or plain (zip)
    for fmt in FORMATS:
        report = _check(tmp_path, pkg(fmt, state={name: b"long"}), fmt)
        assert report.accepted, report.to_dict()
    gnu = tar_bytes(package_entries(state={name: b"long"}), tarfile.GNU_FORMAT)  # GNU long-name headers
    assert _check(tmp_path, gnu, "tar").accepted
