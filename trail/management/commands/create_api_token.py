"""Create a runtime API token: `manage.py create_api_token NAME [--run-prefix P]`.

The token is printed once, alone on its own line (scripts read that line); only its sha256 is stored.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from journals.models import ApiToken
from kernel.via import via
from trail.tokens import api_token_create


class Command(BaseCommand):
    help = "Create a runtime API token and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="A unique name for the runtime the token belongs to.")
        parser.add_argument("--run-prefix", default="", help="Limit the token to runs whose id starts with this.")

    def handle(self, *args: Any, **options: Any) -> None:
        name: str = options["name"]
        if ApiToken.objects.filter(name=name).exists():
            raise CommandError(f"a token named {name!r} exists already")
        with via("cli"):
            _, raw = api_token_create(name=name, run_prefix=options["run_prefix"], actor_name="manage.py")
        self.stderr.write(f"Token {name!r} created; it is shown once and cannot be read again:")
        self.stdout.write(raw)
