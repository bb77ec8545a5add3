"""Resource limits of package verification (docs/packages.md); the commands fill them from settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """All sizes are counted on bytes actually read, and also checked against what headers claim.

    The first four mirror the settings ``LOOPX_PACKAGE_MAX_MEMBER_BYTES``, ``LOOPX_PACKAGE_MAX_TOTAL_BYTES``,
    ``LOOPX_PACKAGE_MAX_MEMBERS`` and ``LOOPX_PACKAGE_MAX_RATIO``. The rest are where the format is silent
    (docs/packages.md): a manifest or a journal line larger than these cannot be verified, so it is refused.
    """

    max_member_bytes: int = 64 * MiB
    max_total_bytes: int = 512 * MiB
    max_members: int = 10_000
    max_ratio: int = 200
    ratio_floor_bytes: int = 1 * MiB  # the ratio counts once a member (or the archive) expands past this
    max_manifest_bytes: int = 16 * MiB
    max_journal_line_bytes: int = 4 * MiB

    @classmethod
    def from_settings(cls, get: Callable[[str, Any], Any]) -> Limits:
        """``Limits.from_settings(lambda name, default: getattr(settings, name, default))``."""
        base = cls()
        return cls(
            max_member_bytes=int(get("LOOPX_PACKAGE_MAX_MEMBER_BYTES", base.max_member_bytes)),
            max_total_bytes=int(get("LOOPX_PACKAGE_MAX_TOTAL_BYTES", base.max_total_bytes)),
            max_members=int(get("LOOPX_PACKAGE_MAX_MEMBERS", base.max_members)),
            max_ratio=int(get("LOOPX_PACKAGE_MAX_RATIO", base.max_ratio)),
        )
