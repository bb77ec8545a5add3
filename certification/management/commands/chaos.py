"""`manage.py chaos`: the composition gate. SIGKILLs the reference runtime at seeded crash points of the
compound workload, and the service itself (web mid-batch, worker mid-assessment, a dead worker's claim
taken over), and checks recovery after every restart (certification/rig.py says what is checked).

    manage.py chaos --seeds 500        # seeds 0..499 over HTTP against a live service; exit 1 on any failure
    manage.py chaos --seed 137         # rerun one seed alone, with its details
    manage.py chaos --seeds 20 --store file   # the runtime's file adapter: checks the workload, fast

The live service runs on a PostgreSQL database made for the run (on LOOPX_CHAOS_DATABASE_URL's server, else
DATABASE_URL's when it names PostgreSQL, else 127.0.0.1:5432) and dropped after it, with a redis-server of
its own, gunicorn, one Celery worker and beat.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from certification.rig import failed_seeds, run_seeds


class Command(BaseCommand):
    help = "Kill -9 the reference runtime at seeded crash points and check recovery (the P2 composition gate)."
    # The rig touches neither the database nor the URLs: it must run while they are being worked on.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seeds", type=int, default=500, help="run seeds 0..N-1 (default 500)")
        parser.add_argument("--seed", type=int, action="append", help="run only this seed (repeatable)")
        parser.add_argument("--first-seed", type=int, default=0, help="start --seeds here")
        parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="runtimes in parallel")
        parser.add_argument("--workdir", type=Path, default=None, help="keep every seed's files here")
        parser.add_argument(
            "--store",
            choices=("http", "file"),
            default="http",
            help="http: a live service, the runtime talks to it through the runtime client (the certification);"
            " file: the runtime's adapter over files (fast, no service)",
        )
        parser.add_argument("--quiet", action="store_true", help="print only failing seeds and the table")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["seeds"] < 1 and not options["seed"]:
            raise CommandError("--seeds must be at least 1")
        seeds = options["seed"] or list(range(options["first_seed"], options["first_seed"] + options["seeds"]))
        if options["workdir"] is not None:
            options["workdir"].mkdir(parents=True, exist_ok=True)

        done = 0

        def echo(line: str) -> None:
            nonlocal done
            done += 1
            if not options["quiet"] or ": FAIL" in line:
                self.stdout.write(f"[{done}/{len(seeds)}] {line}")

        summary = run_seeds(seeds, jobs=options["jobs"], workdir=options["workdir"], echo=echo, store=options["store"])
        self.stdout.write("")
        self.stdout.write(summary.table())
        failing = failed_seeds(summary)
        if failing:
            self.stdout.write(f"FAILED seeds: {' '.join(map(str, failing))}")
            self.stdout.write("rerun one alone: python manage.py chaos --seed S --workdir DIR")
            raise SystemExit(1)
        self.stdout.write(self.style.SUCCESS("composition gate: pass"))
