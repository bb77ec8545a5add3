"""Findings and the report that ``check_package`` / ``restore_package`` return (recovery-package.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Every code of the spec's table, nothing else.
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


@dataclass(slots=True)
class PackageReport:
    """The stable result: ``{"accepted", "format", "members", "findings"}`` (journal-contract.md section 7)."""

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
