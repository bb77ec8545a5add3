"""`python manage.py restore_archive PATH --into DIR --json`: verify a recovery package, then unpack it.

Stable (docs/contract.md section 7): the same JSON and exit codes as check_archive; exit 2 also when the
parent of DIR is missing, or when the restore cannot be written at all (disk full...), with one line on
stderr. DIR must not exist (``target_exists``); it appears complete or not at all (docs/packages.md).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from recovery.management.commands.check_archive import PackageCommand, UsageError, limits_from_settings
from recovery.packages import PackageUsageError, restore_package


class Command(PackageCommand):
    help = "Verify a recovery package, then unpack it atomically into DIR (which must not exist)."
    command_name = "restore_archive"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the package file")
        parser.add_argument("--into", required=True, metavar="DIR", help="the directory to create")
        parser.add_argument("--json", action="store_true", help="print the stable JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = restore_package(options["path"], options["into"], limits_from_settings())
        except PackageUsageError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"the restore could not be written: {exc.strerror or exc}") from None
        self.finish(report, options["json"], f"restored: a {report.format} package of {report.members} member(s)")
