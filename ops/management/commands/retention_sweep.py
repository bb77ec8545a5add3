"""`python manage.py retention_sweep [--days N] [--limit N] [--dry-run] [--json]`

Exports completed runs idle for more than N days (default LOOPX_RETENTION_DAYS; 0 = off) to verified
packages in LOOPX_RETENTION_DIR, then removes them from the database (ops/retention.py).
Exit status 0, or 1 when a run could not be processed (it stays, and the next sweep tries again).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.via import via
from ops import retention


class Command(BaseCommand):
    help = "Export completed old runs to verified packages, then remove them from the database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=None, help="Override LOOPX_RETENTION_DAYS (0: off).")
        parser.add_argument("--limit", type=int, default=None, help="At most this many candidate runs.")
        parser.add_argument("--dry-run", action="store_true", help="Say what would go; change nothing.")
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["days"] is not None and options["days"] < 0:
            raise CommandError("--days must be 0 (off) or more")
        with via("cli"):
            report = retention.sweep(options["days"], limit=options["limit"], dry_run=options["dry_run"])
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        elif not report.enabled:
            self.stdout.write("retention is off (LOOPX_RETENTION_DAYS is 0 or unset); nothing removed")
        else:
            verb = "would remove" if options["dry_run"] else "removed"
            for item in report.removed:
                digest = f" sha256={item['sha256']}" if "sha256" in item else ""
                self.stdout.write(f"{verb} {item['run']}{digest}")
            for run_id, reason in sorted(report.kept.items()):
                self.stdout.write(f"kept {run_id}: {reason}")
            for run_id, error in sorted(report.errors.items()):
                self.stderr.write(f"error {run_id}: {error}")
            self.stdout.write(f"{len(report.removed)} {verb}, {len(report.kept)} kept, {len(report.errors)} errors")
        if report.errors:
            raise SystemExit(1)
