"""Hypothesis: random bytes, random archives and mutated packages never raise, and never write outside the test's
temporary directory; checking writes nothing at all. Whatever is accepted restores to exactly its manifest.

Writes are observed with an audit hook (PEP 578): every ``open`` for writing, mkdir, rename, chmod, remove and
rmtree the process makes while a check or restore runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from recovery.packages import check_package, restore_package
from recovery.packages.report import ALL_CODES, FORMATS

from .crafting import E, make_archive, package_entries

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_EVENTS = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.chmod", "os.link", "os.symlink", "shutil.rmtree"}
_effects: list[tuple[str, str]] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _effects is None:
        return
    if event == "open":
        path, _mode, flags = args
        if isinstance(flags, int) and flags & _WRITE_FLAGS and not isinstance(path, int):
            _effects.append((event, os.fsdecode(path)))
    elif event in _EVENTS:
        for arg in args:
            if isinstance(arg, str | bytes | os.PathLike):
                _effects.append((event, os.fsdecode(arg)))


sys.addaudithook(_audit)  # once per process: audit hooks cannot be removed, so it is switched by _effects


@contextmanager
def observed() -> Iterator[list[tuple[str, str]]]:
    global _effects
    _effects = []
    try:
        yield _effects
    finally:
        _effects = None


FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="pkgfuzz-"))


def _assert_well_formed(report: Any) -> None:
    out = report.to_dict()
    json.dumps(out)
    assert out["accepted"] == (not out["findings"])
    assert out["format"] in (*FORMATS, None)
    for finding in out["findings"]:
        assert finding["code"] in ALL_CODES
        assert "\n" not in finding["detail"]


def _check_then_restore(data: bytes) -> None:
    """Check (must write nothing), restore (must write only under its scratch directory), verify the result."""
    scratch = _scratch()
    try:
        package = scratch / "package"
        package.write_bytes(data)
        with observed() as effects:
            report = check_package(package)
        assert effects == []
        _assert_well_formed(report)
        target = scratch / "sub" / "out"
        (scratch / "sub").mkdir()
        with observed() as effects:
            restored = restore_package(package, target)
        inside = str(scratch.resolve()) + os.sep
        for effect, path in effects:
            assert os.path.abspath(path).startswith(inside), (effect, path)
        assert restored.accepted == report.accepted
        event("accepted" if report.accepted else f"refused: {sorted(set(report.codes()))[0]}")
        if restored.accepted:
            _assert_matches_manifest(target)
        else:
            assert os.listdir(scratch / "sub") == []
    finally:
        __import__("shutil").rmtree(scratch, ignore_errors=True)


def _assert_matches_manifest(target: Path) -> None:
    manifest = json.loads((target / "manifest.json").read_bytes())
    listed = {m["path"]: m for m in manifest["members"]}
    files: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(target):
        for name in dirnames:
            assert os.stat(os.path.join(dirpath, name)).st_mode & 0o7777 == 0o700
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, target)
            assert not os.path.islink(full) and os.stat(full).st_mode & 0o7777 == 0o600
            files.add(rel)
            if rel != "manifest.json":
                data = Path(full).read_bytes()
                assert hashlib.sha256(data).hexdigest() == listed[rel]["sha256"]
    assert files == {"manifest.json", *listed}


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes(data: bytes) -> None:
    _check_then_restore(data)


@FUZZ
@given(st.sampled_from(FORMATS), st.binary(min_size=1, max_size=64))
def test_random_bytes_behind_a_valid_magic(fmt: str, tail: bytes) -> None:
    head = {"tar": b"", "tar.gz": b"\x1f\x8b\x08\x00", "zip": b"PK\x03\x04"}[fmt]
    data = head + tail
    if fmt == "tar":
        data = (tail * (600 // len(tail) + 1))[:257] + b"ustar\x0000" + tail
    _check_then_restore(data)


_PARTS = ["state", "a", "B", "..", ".", "", "\\", "\x00", "\x1b", "\u00e9", "e\u0301", "C:", "manifest.json"]
_names = st.lists(st.sampled_from(_PARTS), min_size=1, max_size=4).map("/".join) | st.text(max_size=12)
_kinds = st.sampled_from(["file", "file", "file", "dir", "symlink", "hardlink", "fifo", "chardev", "sparse"])
_entry = st.builds(E, name=_names, data=st.binary(max_size=64), kind=_kinds)
_state = st.dictionaries(
    st.lists(st.sampled_from(["a", "b", "C", "\u00e9", "x.json"]), min_size=1, max_size=3).map(
        lambda parts: "state/" + "/".join(parts)
    ),
    st.binary(max_size=200),
    max_size=4,
)


@FUZZ
@given(st.sampled_from(FORMATS), _state, st.lists(_entry, max_size=3), st.booleans())
def test_random_archives(fmt: str, state: dict[str, bytes], extra: list[E], dirs: bool) -> None:
    if fmt == "zip":
        extra = [e for e in extra if e.kind not in ("hardlink", "sparse")]  # zip cannot express them
    try:
        entries = package_entries(state=state, extra=extra, dirs=dirs)
        data = make_archive(fmt, entries)
    except (ValueError, UnicodeEncodeError):
        return  # the writer refused (e.g. a name tarfile cannot encode): nothing to check
    _check_then_restore(data)


_BASES = {
    fmt: make_archive(fmt, package_entries(state={"state/a": b"alpha" * 50, "state/s/b": bytes(range(200))}))
    for fmt in FORMATS
}
_mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("zero"), st.floats(0, 1, exclude_max=True), st.integers(1, 64)),
)


@FUZZ
@given(st.sampled_from(FORMATS), st.lists(_mutation, min_size=1, max_size=6))
def test_mutated_packages(fmt: str, mutations: list[tuple[str, float, int]]) -> None:
    data = bytearray(_BASES[fmt])
    for kind, where, value in mutations:
        if not data:
            break
        at = int(where * len(data)) if kind != "insert" else int(where * (len(data) + 1))
        at = min(at, len(data) - 1) if kind != "insert" else at
        if kind == "flip":
            data[at] ^= value
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes([value]) * 8
        else:
            data[at : at + value] = bytes(len(data[at : at + value]))
    _check_then_restore(bytes(data))


def test_the_fuzzed_bases_are_accepted() -> None:
    """The mutations start from real packages, so the fuzzer explores near-valid archives."""
    for fmt, data in _BASES.items():
        scratch = _scratch()
        try:
            (scratch / "p").write_bytes(data)
            assert check_package(scratch / "p").accepted, fmt
        finally:
            __import__("shutil").rmtree(scratch, ignore_errors=True)
