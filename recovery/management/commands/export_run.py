"""`python manage.py export_run RUN --out FILE [--format tar.gz|tar|zip]`: write a run's recovery package.

The package is built from the store (journal byte for byte, secrets included: contract section 8, so the
file is created 0600) and written through the atomic-write helper: an existing FILE is replaced in one step,
and a crash leaves the old file or none, never a partial one. Prints one JSON line: run, records, format,
sha256 and path. Exit 1 with one line on stderr when the run does not exist or the file cannot be written.
"""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from journals.selectors import run_find
from kernel.via import via
from recovery.packages.services import EXPORT_FORMATS, run_export


class Command(BaseCommand):
    help = "Export a run as a recovery package (tar.gz by default), written atomically."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="the run id")
        parser.add_argument("--out", required=True, help="the package file to write (replaced if it exists)")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="tar.gz", dest="fmt")

    def handle(self, *args: Any, **options: Any) -> None:
        run = run_find(run_id=options["run"])
        if run is None:
            raise CommandError(f"no such run: {json.dumps(options['run'])}")
        out = os.path.abspath(options["out"])
        if os.path.isdir(out):
            raise CommandError(f"{out} is a directory")
        if not os.path.isdir(os.path.dirname(out)):
            raise CommandError(f"the directory of {out} does not exist")
        try:
            with via("cli"):
                sha = run_export(run=run, out_path=out, fmt=options["fmt"], actor_name="manage.py export_run")
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror}") from None
        summary = {"run": run.run_id, "records": run.record_count, "format": options["fmt"], "sha256": sha, "path": out}
        self.stdout.write(json.dumps(summary, sort_keys=True))
