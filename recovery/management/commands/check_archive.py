"""`python manage.py check_archive PATH --json`: verify a recovery package, unpack nothing.

Stable (docs/contract.md section 7): prints ``{"accepted", "format", "members", "findings": [{"code",
"member", "detail"}]}``; exits 0 when accepted, 1 when rejected, 2 on usage errors (a missing package file,
bad arguments) with one line on stderr. Without --json it prints a short summary. The library does the work
(recovery.packages); this is a thin wrapper, shared with restore_archive.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from recovery.packages import Limits, PackageReport, PackageUsageError, check_package


class UsageError(Exception):
    """Exit 2 with this one line on stderr."""


def limits_from_settings() -> Limits:
    return Limits.from_settings(lambda name, default: getattr(settings, name, default))


def _one_line(text: str) -> str:
    return " ".join(text.split())


class PackageCommand(BaseCommand):
    """Shared plumbing: one-line usage errors (exit 2), the stable JSON, exit 1 when rejected."""

    requires_system_checks: list[str] = []  # a verification tool must not depend on the rest of the site's health
    command_name = "check_archive"

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)

        def error(message: str) -> NoReturn:
            # argparse would print the usage too; the contract wants one line. call_command parses arguments
            # before execute(), so this exits here, the same way from the shell and from call_command.
            self._usage_exit(UsageError(message))

        parser.error = error  # type: ignore[method-assign]
        return parser

    def _usage_exit(self, exc: BaseException) -> NoReturn:
        sys.stderr.write(f"{self.command_name}: {_one_line(str(exc))}\n")
        sys.stderr.flush()
        sys.exit(2)

    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)
        except UsageError as exc:
            self._usage_exit(exc)

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except UsageError as exc:
            self._usage_exit(exc)

    def finish(self, report: PackageReport, as_json: bool, accepted_line: str) -> None:
        if as_json:
            self.stdout.write(json.dumps(report.to_dict()))  # ASCII: member names are escaped, never raw
        elif report.accepted:
            self.stdout.write(accepted_line)
        else:
            self.stdout.write(f"rejected: {len(report.findings)} finding(s), format {report.format or 'unknown'}")
            for finding in report.findings:
                member = json.dumps(finding.member) if finding.member is not None else "(archive)"
                self.stdout.write(f"  {finding.code:<20} {member}: {finding.detail}")
                self.stdout.write(f"  {'':<20} what to do: {finding.remedy}")
        self.stdout.flush()
        if not report.accepted:
            sys.exit(1)


class Command(PackageCommand):
    help = "Verify a recovery package (tar, tar.gz or zip) completely, without unpacking anything."
    command_name = "check_archive"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the package file")
        parser.add_argument("--json", action="store_true", help="print the stable JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = check_package(options["path"], limits_from_settings())
        except PackageUsageError as exc:
            raise UsageError(str(exc)) from None
        self.finish(report, options["json"], f"accepted: a {report.format} package of {report.members} member(s)")
