"""`python manage.py retention_import PACKAGE`: verify a retention package and ingest its journal again
(through the store's ingest service: records come back byte for byte; already stored ones are duplicates)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ops import retention


class Command(BaseCommand):
    help = "Re-import a run from a retention package."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("package")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = retention.reimport(options["package"])
        except retention.RetentionRefused as exc:
            raise CommandError(str(exc)) from None
        except FileNotFoundError:
            raise CommandError("no such package file") from None
        self.stdout.write(json.dumps(result, sort_keys=True))
