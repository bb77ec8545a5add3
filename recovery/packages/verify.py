"""``check_package``: verify a recovery package completely, writing nothing (docs/packages.md).

One streaming pass: every member is read once, hashed (sha256) while it is read and never held whole; the
manifest (bounded) and one journal line at a time are the only things kept. All findings are reported, except
that a resource limit or structural corruption ends the scan (reading on would cost what the limit is there
to prevent, or would read garbage); checks that need the whole archive (a missing manifest, missing members)
are then skipped rather than guessed.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import report as codes
from ._formats import DIR, FILE, LINK, SPECIAL, Member, Unsupported, open_archive
from ._pipeline import Pipeline
from ._streams import MemberStop, PackageStop
from .journal import JournalCheck
from .limits import Limits
from .manifest import JOURNAL, MANIFEST, Manifest, parse_manifest
from .paths import check_path, collision_key, in_state
from .report import PackageReport

StrPath = str | os.PathLike[str]
# Progress hook (added for the dashboard's background import, recovery/packages/services.py): called after each
# member with (bytes of the package file read so far, the file's size). Optional and None by default, so the
# commands and every other caller behave exactly as before.
Progress = Callable[[int, int], None]


class PackageUsageError(Exception):
    """The package cannot be opened at all, or the target's parent is missing: a usage error (exit 2)."""


@dataclass(slots=True)
class PlanEntry:
    """What verification saw, in archive order; the unpacking pass must see exactly the same."""

    name: str
    kind: str
    path: str  # normalised
    size: int = 0
    sha256: str = ""


@dataclass(slots=True)
class Verification:
    report: PackageReport
    plan: list[PlanEntry] = field(default_factory=list)


@dataclass(slots=True)
class _Seen:
    name: str
    size: int
    readable: bool = True  # False when the member was too large (or broken) to read
    sha256: str = ""  # set by the hashing thread; final once the pipeline is drained


def _settle(digest: Any, seen: _Seen, entry: PlanEntry) -> None:
    seen.sha256 = entry.sha256 = digest.hexdigest()


class _Scan:
    def __init__(self, limits: Limits, report: PackageReport, hasher: Pipeline) -> None:
        self.limits = limits
        self.report = report
        self.hasher = hasher  # sha256 runs on its own thread, beside the reading and inflating
        self.plan: list[PlanEntry] = []
        self.stopped = False
        self.claimed = 0  # bytes the headers claim, all members
        self.read = 0  # bytes actually read, all members
        self.files: dict[str, _Seen] = {}  # normalised path -> first file member there
        self.manifest: bytes | None = None
        self.manifest_name = MANIFEST
        self.manifest_oversize = False
        self.journals: list[tuple[str, JournalCheck]] = []
        self._taken: dict[str, tuple[str, str]] = {}  # collision key -> (kind, normalised path)
        self._implied: set[str] = set()  # collision keys of directories implied by deeper paths

    def add(self, code: str, member: str | None, detail: str) -> None:
        self.report.add(code, member, detail)

    # -- per member -----------------------------------------------------------------------------------------
    def member(self, m: Member) -> None:
        checked = check_path(m.name)
        for code, detail in checked.problems:
            self.add(code, m.name, detail)
        if m.kind == FILE and checked.is_dir:
            self.add(codes.PATH_INVALID, m.name, "a file whose path ends in '/'")
        if m.kind == LINK:
            self.add(codes.LINK_MEMBER, m.name, f"{m.what}, which is never unpacked")
        elif m.kind == SPECIAL:
            self.add(codes.SPECIAL_MEMBER, m.name, f"{m.what}, not a regular file or a directory")
        elif m.carries_data:
            self.add(codes.SPECIAL_MEMBER, m.name, "a directory entry that carries data")
        if m.kind == DIR and checked.is_root:
            # The root entry of `tar -C dir .`: folded; the restore creates the root anyway.
            self.plan.append(PlanEntry(m.name, DIR, ""))
            return
        placeable = checked.ok and not (m.kind == FILE and checked.is_dir)
        norm = checked.normalised if placeable else None
        if norm is not None:
            self._register(m, norm)
        if m.kind == DIR:
            if norm is not None:
                if not in_state(norm):
                    self.add(codes.UNLISTED_MEMBER, m.name, "a directory outside state/")
                self.plan.append(PlanEntry(m.name, DIR, norm))
            return
        if m.kind != FILE:
            return
        self._file(m, norm)

    def _register(self, m: Member, norm: str) -> None:
        key = collision_key(norm)
        is_dir = m.kind == DIR
        earlier = self._taken.get(key)
        if earlier is not None:
            how = "the same path" if earlier[1] == norm else "the same path once Unicode (NFC) and case are folded"
            if (earlier[0] == DIR) != is_dir:
                how += ", one a file and one a directory,"
            self.add(codes.DUPLICATE_MEMBER, m.name, f"lands on {how} as an earlier member")
            return
        if not is_dir and key in self._implied:
            self.add(codes.DUPLICATE_MEMBER, m.name, "a file where an earlier member needs a directory")
        self._taken[key] = (DIR if is_dir else FILE, norm)
        parts = key.split("/")
        clash = False
        for depth in range(1, len(parts)):
            ancestor = "/".join(parts[:depth])
            held = self._taken.get(ancestor)
            if held is not None and held[0] != DIR and not clash:
                self.add(codes.DUPLICATE_MEMBER, m.name, "a path under an earlier member that is a file")
                clash = True
            self._implied.add(ancestor)

    def _file(self, m: Member, norm: str | None) -> None:
        limits = self.limits
        self.claimed += m.size
        if m.size > limits.max_member_bytes:
            self.add(
                codes.MEMBER_TOO_LARGE, m.name, f"the header claims {m.size} bytes, over {limits.max_member_bytes}"
            )
            if norm is not None:
                self.files.setdefault(norm, _Seen(m.name, m.size, readable=False))
            if self.claimed > limits.max_total_bytes:
                raise PackageStop(
                    codes.PACKAGE_TOO_LARGE, None, f"headers claim over {limits.max_total_bytes} bytes in all"
                )
            return
        if self.claimed > limits.max_total_bytes:
            raise PackageStop(
                codes.PACKAGE_TOO_LARGE, None, f"headers claim over {limits.max_total_bytes} bytes in all"
            )
        manifest = norm == MANIFEST and self.manifest is None and not self.manifest_oversize
        journal = JournalCheck(limits.max_journal_line_bytes) if norm == JOURNAL else None
        buffer = bytearray() if manifest else None
        digest = hashlib.sha256()
        done = 0
        try:
            for chunk in m.chunks():
                done += len(chunk)
                self.read += len(chunk)
                if done > limits.max_member_bytes:
                    raise MemberStop(codes.MEMBER_TOO_LARGE, f"over {limits.max_member_bytes} bytes read")
                if self.read > limits.max_total_bytes:
                    raise PackageStop(
                        codes.PACKAGE_TOO_LARGE, None, f"over {limits.max_total_bytes} bytes read in all members"
                    )
                self.hasher.submit(digest.update, chunk)
                if buffer is not None:
                    if len(buffer) + len(chunk) > limits.max_manifest_bytes:
                        buffer = None
                        self.manifest_oversize = True
                    else:
                        buffer += chunk
                if journal is not None:
                    journal.feed(chunk)
        except MemberStop as stop:
            self.add(stop.code, m.name, stop.detail)
            if norm is not None:  # it is there, just not verifiable: not "missing"
                self.files.setdefault(norm, _Seen(m.name, done, readable=False))
            return
        if norm is None:
            return
        seen = _Seen(m.name, done)
        entry = PlanEntry(m.name, FILE, norm, done)
        self.files.setdefault(norm, seen)
        self.plan.append(entry)
        self.hasher.submit(_settle, digest, seen, entry)
        if buffer is not None:
            self.manifest = bytes(buffer)
            self.manifest_name = m.name
        if journal is not None:
            journal.finish()
            self.journals.append((m.name, journal))

    # -- after the last member ------------------------------------------------------------------------------
    def finish(self) -> None:
        self.hasher.drain()
        manifest: Manifest | None = None
        if self.manifest_oversize:
            self.add(
                codes.MANIFEST_INVALID,
                self.manifest_name,
                f"the manifest is over {self.limits.max_manifest_bytes} bytes",
            )
        elif self.manifest is not None:
            manifest, problems = parse_manifest(self.manifest, self.limits.max_members)
            for problem in problems:
                self.add(codes.MANIFEST_INVALID, self.manifest_name, problem)
        elif not self.stopped:
            self.add(codes.MANIFEST_MISSING, MANIFEST, "no regular file manifest.json at the root")
        for name, journal in self.journals:
            for problem in journal.problems(manifest.run if manifest is not None else None):
                self.add(codes.JOURNAL_INVALID, name, problem)
        if manifest is None:
            return  # without a manifest, listed and unlisted cannot be told apart
        for norm, seen in self.files.items():
            if norm != MANIFEST and norm not in manifest.entries:
                self.add(codes.UNLISTED_MEMBER, seen.name, "a file the manifest does not list")
        for norm, entry in manifest.entries.items():
            found = self.files.get(norm)
            if found is None:
                if not self.stopped:
                    self.add(codes.MISSING_MEMBER, norm, "listed in the manifest but not in the archive")
                continue
            if not found.readable:
                continue  # too large or broken: already refused
            if found.size != entry.size:
                self.add(codes.SIZE_MISMATCH, found.name, f"{found.size} bytes where the manifest says {entry.size}")
            if found.sha256 != entry.sha256:
                self.add(codes.CHECKSUM_MISMATCH, found.name, "the sha256 differs from the manifest's")


def verify_open_file(fh: io.FileIO, limits: Limits, progress: Progress | None = None) -> Verification:
    """Verify the package behind ``fh`` (opened unbuffered for reading). Writes nothing anywhere."""
    hasher = Pipeline()
    try:
        return _verify(fh, limits, hasher, progress)
    finally:
        hasher.close()


def _verify(fh: io.FileIO, limits: Limits, hasher: Pipeline, progress: Progress | None = None) -> Verification:
    report = PackageReport()
    size = os.fstat(fh.fileno()).st_size if progress is not None else 0
    scan = _Scan(limits, report, hasher)
    try:
        opened = open_archive(fh, limits)
    except Unsupported as exc:
        report.add(codes.UNSUPPORTED_FORMAT, None, str(exc))
        return Verification(report)
    except PackageStop as stop:
        report.format = stop.format
        report.members = stop.members
        report.add(stop.code, stop.member, stop.detail)
        return Verification(report)
    report.format = opened.format
    try:
        for m in opened.members:
            report.members += 1
            if report.members > limits.max_members:
                scan.add(codes.TOO_MANY_MEMBERS, None, f"more than {limits.max_members} entries")
                scan.stopped = True
                break
            scan.member(m)
            if progress is not None:
                # The file position is how far the readers got (zip seeks, gzip reads ahead): an estimate,
                # which the caller keeps monotonic.
                progress(min(fh.tell(), size), size)
    except PackageStop as stop:
        scan.add(stop.code, stop.member, stop.detail)
        scan.stopped = True
    scan.finish()
    return Verification(report, scan.plan)


def open_package(path: StrPath) -> io.FileIO:
    """Open a package file for reading, or raise PackageUsageError (missing, a directory, unreadable)."""
    name = os.fspath(path)
    try:
        # Refuse a fifo or a device before opening it: opening a fifo would block.
        if not stat.S_ISREG(os.stat(name).st_mode):
            raise PackageUsageError(f"not a regular file: {name}")
        fh = io.FileIO(name, "r")
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            fh.close()
            raise PackageUsageError(f"not a regular file: {name}")
    except FileNotFoundError:
        raise PackageUsageError(f"no such package file: {name}") from None
    except OSError as exc:
        raise PackageUsageError(f"cannot read {name}: {exc.strerror}") from None
    return fh


def check_package(path: StrPath, limits: Limits | None = None, progress: Progress | None = None) -> PackageReport:
    """Verify the package at ``path`` completely, writing nothing; ``report.accepted`` says if it may be used.

    ``progress(done, total)``, when given, is called after each member with the bytes of the package file read
    so far and its size. Raises PackageUsageError when the file cannot be opened at all.
    """
    with open_package(path) as fh:
        return verify_open_file(fh, limits or Limits(), progress).report
