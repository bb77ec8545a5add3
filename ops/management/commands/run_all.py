"""`make run`: migrate, seed the demo when the database is empty, then run the web server, one Celery
worker and beat as child processes until Ctrl-C or SIGTERM.

The children share this process's process group (Ctrl-C in a terminal reaches all of them) and, on
Linux, are told to die with this process should it be killed outright. A child that exits stops the
others, and this command then exits with its status: a half-running stack is never left behind.

With DATABASE_URL and REDIS_URL set it runs against PostgreSQL and Redis; without, against SQLite and
kombu's filesystem broker under LOOPX_VAR_DIR (docs/celery.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from audits import tasks
from journals.models import Run
from ops.demo import demo_notifications, demo_seed
from teams.models import ALL_RUNS_TEAM
from teams.services import team_ensure, team_members_add

DEMO_PASSWORD = "loopx-demo"  # noqa: S105  the documented password of the demo accounts that `make run` creates
DEMO_USERS = (("operator", "operator"), ("viewer", "viewer"), ("admin", "admin"))
STOP_GRACE_SECONDS = 10.0


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes

        # Not glibc (OSError): the signal handlers below still stop the children.
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class Command(BaseCommand):
    help = "Migrate, seed demo data into an empty database, and run web + worker + beat until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--concurrency", type=int, default=2, help="the worker's pool size")
        parser.add_argument("--no-seed", action="store_true", help="do not seed demo data into an empty database")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        # Known passwords and made-up runs have no place in production: only the stack is started there.
        demo = not settings.PRODUCTION
        seeded = self._seed() if demo and not options["no_seed"] else []
        users = self._demo_users() if demo else []
        if demo:
            self._demo_notifications()
        self._children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._stopping = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        host, port = options["host"], options["port"]
        # The links in the demo's notifications lead to this server (the web, the worker and beat inherit it).
        os.environ.setdefault("LOOPX_PUBLIC_URL", f"http://{host}:{port}")
        base = [sys.executable, "-m"]
        # gunicorn, as in production (one process, threads like runserver's): it reads chunked request bodies,
        # which runserver cannot, and serves the static files through whitenoise's finders under DEBUG.
        self._start(
            "web",
            [
                *base,
                "gunicorn",
                "-c",
                "python:ops.gunicorn_conf",
                "--bind",
                f"{host}:{port}",
                "--workers",
                "1",
                "--threads",
                "8",
                "loopx_site.wsgi",
            ],
        )
        self._start(
            "worker",
            [
                *base,
                "celery",
                "-A",
                "loopx_site",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(options["concurrency"]),
                "--hostname",
                "worker@%h",
            ],
        )
        self._start("beat", [*base, "celery", "-A", "loopx_site", "beat", "--loglevel", "INFO"])
        self._banner(host, port, users, seeded)
        code = self._supervise()
        sys.exit(code)

    # -- setup -----------------------------------------------------------------------------------------

    def _seed(self) -> list[str]:
        if Run.objects.exists():
            return []
        run_ids = demo_seed()
        self._demo_audits()
        return run_ids

    def _demo_audits(self) -> None:
        """Ask the worker for one pass of the audits a few seconds after start, with their real thresholds:
        the chain verification finds the demo's tampered run at once; a turn is escalated or called lost
        only once it has really waited that long, as in production, so nothing on the first screen is a
        finding that clears itself minutes later."""
        for task in (tasks.audit_chain_verification, tasks.audit_unclaimed_blocked_turns, tasks.audit_stale_turns):
            # The assessments were published first; the countdown lets them land before the audits read them.
            task.apply_async(countdown=5)

    def _demo_notifications(self) -> None:
        """The demo team's email channel and rule: a held demo turn's email is printed by the worker."""
        demo_notifications()

    def _demo_users(self) -> list[tuple[str, str, bool]]:
        """(username, role, created). Existing users keep their passwords."""
        out = []
        for username, role in DEMO_USERS:
            user = User.objects.filter(username=username).first()
            created = user is None
            if user is None:
                user = User.objects.create_user(username=username, password=DEMO_PASSWORD)
                if role == "admin":
                    user.is_staff = user.is_superuser = True
                    user.save(update_fields=["is_staff", "is_superuser"])
                group = Group.objects.filter(name=role).first()
                if group is not None:
                    user.groups.add(group)
                # The demo's people see every run: members of the team of every run (docs/access.md).
                team_members_add(team=team_ensure(name=ALL_RUNS_TEAM, prefixes=[""]), users=[user])
            out.append((username, role, created))
        return out

    # -- children --------------------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> None:
        proc = subprocess.Popen(argv, cwd=settings.BASE_DIR, preexec_fn=_die_with_parent)  # noqa: S603  the project's own processes, from a fixed argument list
        self._children.append((name, proc))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _supervise(self) -> int:
        code = 0
        while not self._stopping:
            for name, proc in self._children:
                status = proc.poll()
                if status is not None:
                    self.stderr.write(f"{name} exited with status {status}: stopping the others")
                    code = status or 1
                    self._stopping = True
                    break
            else:
                time.sleep(0.3)
        self._stop_all()
        return code

    def _stop_all(self) -> None:
        for _, proc in self._children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for name, proc in self._children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in {STOP_GRACE_SECONDS:.0f}s: killing it")
                proc.kill()
                proc.wait()
        self.stdout.write("stopped web, worker and beat")

    def _banner(self, host: str, port: int, users: list[tuple[str, str, bool]], seeded: list[str]) -> None:
        db = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        broker = settings.CELERY_BROKER_URL.split("://", 1)[0]
        lines = [
            "",
            f"LoopX Recovery Audit is running at http://{host}:{port}/",
            f"  database: {db}    broker: {broker}    worker + beat: running",
        ]
        if seeded:
            lines.append(f"  demo data: {len(seeded)} runs ({', '.join(seeded)})")
        for username, role, created in users:
            password = DEMO_PASSWORD if created else "(unchanged)"
            lines.append(f"  login: {username} / {password}   ({role})")
        lines.append("  Ctrl-C stops everything.")
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
