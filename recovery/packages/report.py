"""Findings and the report that ``check_package`` / ``restore_package`` return (docs/packages.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Every code of the format's table (docs/packages.md, "Findings"), nothing else.
UNSUPPORTED_FORMAT = "unsupported_format"
ARCHIVE_CORRUPT = "archive_corrupt"
PATH_ABSOLUTE = "path_absolute"
PATH_TRAVERSAL = "path_traversal"
PATH_INVALID = "path_invalid"
LINK_MEMBER = "link_member"
SPECIAL_MEMBER = "special_member"
DUPLICATE_MEMBER = "duplicate_member"
MEMBER_TOO_LARGE = "member_too_large"
PACKAGE_TOO_LARGE = "package_too_large"
TOO_MANY_MEMBERS = "too_many_members"
COMPRESSION_RATIO = "compression_ratio"
MANIFEST_MISSING = "manifest_missing"
MANIFEST_INVALID = "manifest_invalid"
UNLISTED_MEMBER = "unlisted_member"
MISSING_MEMBER = "missing_member"
SIZE_MISMATCH = "size_mismatch"
CHECKSUM_MISMATCH = "checksum_mismatch"
JOURNAL_INVALID = "journal_invalid"
TARGET_EXISTS = "target_exists"

ALL_CODES: tuple[str, ...] = (
    UNSUPPORTED_FORMAT,
    ARCHIVE_CORRUPT,
    PATH_ABSOLUTE,
    PATH_TRAVERSAL,
    PATH_INVALID,
    LINK_MEMBER,
    SPECIAL_MEMBER,
    DUPLICATE_MEMBER,
    MEMBER_TOO_LARGE,
    PACKAGE_TOO_LARGE,
    TOO_MANY_MEMBERS,
    COMPRESSION_RATIO,
    MANIFEST_MISSING,
    MANIFEST_INVALID,
    UNLISTED_MEMBER,
    MISSING_MEMBER,
    SIZE_MISMATCH,
    CHECKSUM_MISMATCH,
    JOURNAL_INVALID,
    TARGET_EXISTS,
)

FORMATS: tuple[str, ...] = ("tar", "tar.gz", "zip")

# What to do about each refusal, in the package maker's words: every refusal says how to get past it.
REMEDIES: dict[str, str] = {
    UNSUPPORTED_FORMAT: "Pack it again as .tar, .tar.gz or .zip (for example `tar czf pkg.tar.gz -C DIR .`).",
    ARCHIVE_CORRUPT: "The file is truncated or damaged: copy it again from its source, or pack it again.",
    PATH_ABSOLUTE: "Pack the files with paths relative to the package root (`tar czf pkg.tar.gz -C DIR .`).",
    PATH_TRAVERSAL: "Remove the '..' components: pack from the package root so that every path stays inside it.",
    PATH_INVALID: "Rename the member: no control characters or backslashes, at most 1,024 bytes, naming a file.",
    LINK_MEMBER: "Replace the link by a copy of the file it points to, and list that file in the manifest.",
    SPECIAL_MEMBER: "Leave devices, fifos and other special files out of the package: only files and directories.",
    DUPLICATE_MEMBER: "Keep one member per path (also after case folding): rename or remove the other one.",
    MEMBER_TOO_LARGE: "Split or shrink the file, or raise the member limit where the package is checked.",
    PACKAGE_TOO_LARGE: "Leave out state files that are not needed for recovery, or raise the package limit.",
    TOO_MANY_MEMBERS: "Bundle small state files into fewer ones, or raise the member-count limit.",
    COMPRESSION_RATIO: "A member expands suspiciously far: pack the real files, not highly repetitive filler.",
    MANIFEST_MISSING: "Add manifest.json at the package root (the export command writes one for you).",
    MANIFEST_INVALID: "Fix manifest.json: format, version 1, run, and members listing journal.jsonl and state/ files.",
    UNLISTED_MEMBER: "List the file in manifest.json with its size and sha256, or leave it out of the package.",
    MISSING_MEMBER: "Add the file the manifest lists, or remove its entry from manifest.json.",
    SIZE_MISMATCH: "Write the file's real size into manifest.json, or pack the file the manifest describes.",
    CHECKSUM_MISMATCH: "Write the file's real sha256 into manifest.json, or pack the file the manifest describes.",
    JOURNAL_INVALID: "Put the run's own journal in journal.jsonl: UTF-8, complete records, the manifest's run.",
    TARGET_EXISTS: "Restore into a directory that does not exist yet, or move the existing one away first.",
}


def remedy(code: str) -> str:
    return REMEDIES.get(code, "")


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason to refuse a package.

    ``member`` is the offending member's name as the archive reports it (or the manifest's path for
    ``missing_member``), None for findings about the archive as a whole. ``detail`` is one line in words and
    never quotes file contents.
    """

    code: str
    member: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "member": self.member, "detail": self.detail}

    @property
    def remedy(self) -> str:
        """What to do about it (not in the stable JSON, whose keys are fixed)."""
        return remedy(self.code)


@dataclass(slots=True)
class PackageReport:
    """The stable result: ``{"accepted", "format", "members", "findings"}`` (docs/contract.md section 7)."""

    format: str | None = None
    members: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return not self.findings

    def add(self, code: str, member: str | None, detail: str) -> None:
        self.findings.append(Finding(code, member, detail))

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "format": self.format,
            "members": self.members,
            "findings": [f.to_dict() for f in self.findings],
        }
