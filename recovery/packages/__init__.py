"""Recovery packages: verify before unpack, atomic restore, deterministic building (docs/packages.md).

Plain Python, no Django. Public API (docs/packages.md):

- ``check_package(path, limits=None) -> PackageReport``: verify completely, write nothing;
- ``restore_package(path, into_dir, limits=None) -> PackageReport``: verify, then unpack atomically;
- ``build_package(out_path, run, journal_bytes, state_files=None, *, fmt="tar.gz") -> str`` (sha256 hex);
- ``Limits``, ``PackageReport``, ``Finding``, ``PackageUsageError`` and the finding codes in ``report``.
"""

from .build import build_package, package_members, write_archive
from .limits import Limits
from .report import ALL_CODES, FORMATS, Finding, PackageReport
from .restore import restore_package
from .verify import PackageUsageError, check_package

__all__ = [
    "ALL_CODES",
    "FORMATS",
    "Finding",
    "Limits",
    "PackageReport",
    "PackageUsageError",
    "build_package",
    "check_package",
    "package_members",
    "restore_package",
    "write_archive",
]
