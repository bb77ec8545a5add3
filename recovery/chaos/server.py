"""A live LoopX service for the rig, as production runs it: gunicorn web workers and a Celery worker over a
PostgreSQL database of their own, with a Redis of their own as the broker. One service serves every seed of
a rig run (each seed is its own run id); the runtime children talk HTTP to it through the runtime client.

The service is killed too. The web (gunicorn's master and its workers, one process group) and the worker
(Celery's parent and its pool child, one group) run with an arm folder each (kernel/failpoints.py): the
rig arms a kill at a named point for one run, the process that reaches it dies with its whole group, and a
supervisor thread restarts whatever died. Nothing is killed by timing.

``LiveServer`` is the older, lighter service (runserver over SQLite) kept for the timed kill trials of
service_crash.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from types import TracebackType

from kernel.failpoints import ARM_DIR_ENV, arm_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The claim lease of the rig's service: short, so that a worker taking over a dead worker's turn waits a
# few seconds, not the production five minutes. What the rig checks is that the taken-over token is fenced.
# Two seconds, not one: a worker renews its lease over HTTP while the machine is loaded, and an unsafe
# effect starts only with more than its longest duration and a margin left of it.
CHAOS_LEASE_SECONDS = 2
OPERATOR = "chaos-operator"
ROLES = ("web", "worker", "beat")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_server_url() -> str:
    """The PostgreSQL server the rig makes its database on: LOOPX_CHAOS_DATABASE_URL, else DATABASE_URL when
    it names PostgreSQL, else the local server."""
    for name in ("LOOPX_CHAOS_DATABASE_URL", "DATABASE_URL"):
        url = os.environ.get(name, "")
        if url.startswith(("postgres://", "postgresql://")):
            return url
    return "postgres://postgres@127.0.0.1:5432/postgres"


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` against the service's settings (``env``): its output, or RuntimeError with its error."""
    proc = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed: {proc.stderr.strip()[-800:]}")
    return proc.stdout


def _with_database(url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class _Child:
    """One supervised process group (gunicorn or Celery) with its log in a file."""

    def __init__(self, role: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.role = role
        self.argv = argv
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                self.argv, cwd=PROJECT_ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )

    def dead(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            _kill_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self.proc, signal.SIGKILL)  # pool children that outlived their parent
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class LiveService:
    """PostgreSQL database + private Redis + gunicorn + one Celery worker, supervised.

    ``arm(role, point, run)`` arms a one-shot kill of ``role``'s whole process group at ``point`` for ``run``;
    ``restarts`` counts the restarts of each role after a death."""

    def __init__(self, root: Path, *, web_workers: int = 2, web_threads: int = 4) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.database = f"loopx_chaos_{os.getpid()}_{secrets.token_hex(3)}"
        self.server_url = postgres_server_url()
        self.database_url = _with_database(self.server_url, self.database)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.redis_port = free_port()
        self.arm_dirs = {role: root / f"arm-{role}" for role in ("web", "worker")}
        for folder in self.arm_dirs.values():
            folder.mkdir(exist_ok=True)
        self.operator_password = secrets.token_urlsafe(18)
        self.token = ""
        self.restarts: Counter[str] = Counter()
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_FAILPOINTS", "CELERY_"))},
            "DJANGO_SETTINGS_MODULE": "loopx_site.settings",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "LOOPX_VAR_DIR": str(root / "var"),
            # The rig sends thousands of requests a minute with one token: the production throttle is not
            # the subject here. Everything else is the project's own settings.
            "API_TOKEN_THROTTLE": "100000000/min",
            "LOOPX_CLAIM_LEASE_SECONDS": str(CHAOS_LEASE_SECONDS),
            # A dead worker's unacknowledged assessment comes back after 2 s, looked for every second.
            "CELERY_VISIBILITY_TIMEOUT": "2",
            "CELERY_UNACKED_RESTORE_INTERVAL": "1",
            "CELERY_UNACKED_RESTORE_THROTTLE": "1",
            # Beat's assessment sweep, every second (set up below), publishes what a kill left owed: a batch
            # committed by a web process killed before it could publish, a message the broker lost.
            "LOOPX_SWEEP_GRACE_SECONDS": "2",
            "LOOPX_SWEEP_REPUBLISH_SECONDS": "5",
            "LOOPX_HEARTBEAT_SECONDS": "5",
            "PYTHONUNBUFFERED": "1",
        }
        self._children: dict[str, _Child] = {}
        self._redis: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watch: threading.Thread | None = None

    # -- setup ---------------------------------------------------------------------------------------
    def _manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql)

    def _start_redis(self) -> None:
        self._redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--protected-mode", "no", "--dir", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.redis_port), 0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.1)
        raise RuntimeError("redis-server did not answer within 20 s")

    def __enter__(self) -> LiveService:
        try:
            self._admin(f'CREATE DATABASE "{self.database}"')
            self._start_redis()
            self._manage("migrate", "--noinput")
            self.token = self._manage("create_api_token", "chaos-runtime").strip().splitlines()[-1]
            self._manage("shell", "-c", _SETUP.format(name=OPERATOR, password=self.operator_password))
            web_env = {**self.env, ARM_DIR_ENV: str(self.arm_dirs["web"]), "PORT": str(self.port),
                       "BIND_HOST": "127.0.0.1", "WEB_CONCURRENCY": "2", "GUNICORN_THREADS": "4",
                       "GUNICORN_MAX_REQUESTS": "0"}
            self._children["web"] = _Child(
                "web", [sys.executable, "-m", "gunicorn", "-c", "python:ops.gunicorn_conf", "loopx_site.wsgi"],
                web_env, self.root / "web.log",
            )
            self._children["worker"] = _Child(
                "worker",
                [sys.executable, "-m", "celery", "-A", "loopx_site", "worker", "-n", "chaos@%h", "--loglevel",
                 "INFO", "--concurrency", "1", "--without-mingle", "--without-gossip"],
                {**self.env, ARM_DIR_ENV: str(self.arm_dirs["worker"])}, self.root / "worker.log",
            )
            self._children["beat"] = _Child(
                "beat",
                [sys.executable, "-m", "celery", "-A", "loopx_site", "beat", "--loglevel", "INFO", "--max-interval",
                 "1", "--pidfile", str(self.root / "beat.pid")],
                self.env, self.root / "beat.log",
            )
            for role in ROLES:
                self._start(role)
            self._watch = threading.Thread(target=self._supervise, name="chaos-supervisor", daemon=True)
            self._watch.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    # -- the processes ---------------------------------------------------------------------------------
    def _start(self, role: str) -> None:
        child = self._children[role]
        child.start()
        if role == "web":
            self._wait(lambda: self._healthy(), child, "the web to answer /healthz")
        elif role == "beat":
            self._wait(lambda: "beat: Starting" in child.log.read_text(errors="replace"), child, "beat to start")
        else:
            self._wait(lambda: " ready." in child.log.read_text(errors="replace"), child, "the worker to be ready")

    def _wait(self, ready: object, child: _Child, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.dead():
                raise RuntimeError(f"{child.role} exited: {child.log.read_text(errors='replace')[-800:]}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2):
                return True
        except OSError:
            return False

    def _supervise(self) -> None:
        """Restart a role whose process group died (an armed kill); the rig counts the restarts."""
        while not self._stop.wait(0.05):
            for role in ROLES:
                with self._lock:
                    if self._stop.is_set() or not self._children[role].dead():
                        continue
                    self._children[role].stop()  # reap what is left of the group
                    self.restarts[role] += 1
                    try:
                        self._start(role)
                    except RuntimeError:
                        if not self._stop.is_set():
                            raise

    def arm(self, role: str, point: str, run: str, action: str = "kill-group") -> Path:
        """Arm a one-shot ``action`` at ``point`` in ``role``'s processes, for ``run`` only."""
        path = self.arm_dirs[role] / arm_file(point, run)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(action)
        tmp.rename(path)  # the failpoint never sees a half-written action
        return path

    def fired(self, role: str, point: str, run: str) -> bool:
        return any(self.arm_dirs[role].glob(f"{arm_file(point, run)}.*.fired"))

    def disarm(self, role: str, point: str, run: str) -> None:
        (self.arm_dirs[role] / arm_file(point, run)).unlink(missing_ok=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(timeout=30)
        with self._lock:
            for child in self._children.values():
                child.stop()
        if self._redis is not None:
            _kill_group(self._redis, signal.SIGKILL)
            self._redis.wait(timeout=10)
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


# The rig's operator: a person in the operator group, in the team that sees every run. Beat's assessment
# sweep runs every second instead of every 30, so that what a kill left owed is published within the seed.
_SETUP = """
from django.contrib.auth.models import Group, User
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from teams.models import ALL_RUNS_TEAM
from teams.services import team_ensure, team_members_add
user = User.objects.create_user(username="{name}", password="{password}")
user.groups.add(Group.objects.get(name="operator"))
team_members_add(team=team_ensure(name=ALL_RUNS_TEAM, prefixes=[""]), users=[user])
every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
PeriodicTask.objects.filter(task="audits.tasks.audit_assessment_sweep").update(interval=every_second)
"""


class LiveServer:
    """`manage.py runserver` in a child process on a free port, over a SQLite database of its own, migrated,
    with a runtime API token: the service_crash trials kill it by timing, which only a single process allows."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.db = root / "server.sqlite3"
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{self.db}",
            "API_TOKEN_THROTTLE": "100000000/min",
            "DJANGO_SETTINGS_MODULE": "loopx_site.settings",
        }
        self.token = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "server.log"

    def _manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def __enter__(self) -> LiveServer:
        for stale in self.root.glob("server.sqlite3*"):
            stale.unlink()  # a rerun into the same workdir starts from an empty database
        self._manage("migrate", "--noinput")
        self.token = self._manage("create_api_token", "chaos-runtime").strip().splitlines()[-1]
        self.start()
        return self

    def kill(self) -> None:
        """SIGKILL the web process (our own child): the service's own crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def start(self) -> None:
        """Start (or restart, after `kill`) the web process over the same database and token."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                cwd=PROJECT_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-800:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError("the server did not answer /healthz within 60 s")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # our own child, by its handle
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
