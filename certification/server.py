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
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from types import TracebackType

from kernel.failpoints import ARM_DIR_ENV, arm_file

PROJECT_ROOT = Path(__file__).resolve().parents[1]
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
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
        _kill_group(self.proc, signal.SIGKILL)  # pool children that outlived their parent
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def postgres_bin() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` of the newest PostgreSQL installed under /usr/lib/postgresql, when
    a private cluster can be made here (as root, only through the ``postgres`` user: initdb refuses root)."""
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            if os.geteuid() == 0 and (shutil.which("runuser") is None or not _has_user("postgres")):
                return None
            return folder
    return None


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


class PrivatePostgres:
    """A PostgreSQL cluster of the service's own: ``initdb`` in a temporary folder, ``pg_ctl`` on a free
    loopback port. A fault test crashes and restarts it (``crash``: an immediate shutdown, no checkpoint, so
    the restart replays the WAL as after a crash) without touching the machine's shared server."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        # Not under the test's own folder: the server's user must be able to reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="loopx-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self._initialised = False

    def _run(self, *argv: str) -> None:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {(proc.stderr or proc.stdout).strip()[-800:]}")

    def start(self) -> None:
        if not self._initialised:
            if os.geteuid() == 0:
                user = pwd.getpwnam("postgres")
                os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            self._initialised = True
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "server.log"), "-o", options, "-w", "-t", "60",
                  "start")

    def crash(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        if self._initialised:
            with contextlib.suppress(RuntimeError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class LiveService:
    """PostgreSQL database + private Redis + gunicorn + one Celery worker, supervised.

    ``arm(role, point, run)`` arms a one-shot kill of ``role``'s whole process group at ``point`` for ``run``;
    ``restarts`` counts the restarts of each role after a death."""

    def __init__(
        self,
        root: Path,
        *,
        web_workers: int = 2,
        web_threads: int = 4,
        private_postgres: bool = False,
        settings: dict[str, str | None] | None = None,
        sweep_seconds: int = 1,
    ) -> None:
        """``private_postgres``: a cluster of its own (``PrivatePostgres``) instead of a database on the shared
        server, so that ``crash_postgres`` may take it down; ``settings`` overrides the service's environment
        (None removes a variable); ``sweep_seconds``: beat's assessment sweep period."""
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.database = f"loopx_chaos_{os.getpid()}_{secrets.token_hex(3)}"
        bindir = postgres_bin() if private_postgres else None
        if private_postgres and bindir is None:
            raise RuntimeError("no initdb under /usr/lib/postgresql/*/bin usable here for a private cluster")
        self.postgres = PrivatePostgres(bindir) if bindir is not None else None
        self.server_url = self.postgres.url if self.postgres is not None else postgres_server_url()
        self.sweep_seconds = sweep_seconds
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
            # And should the broker not give it back, the dead task's lease on its run runs out after 5 s and
            # the sweep asks again: both ways back well inside the rig's patience for a settled service.
            "LOOPX_ASSESS_LEASE_SECONDS": "5",
            # Beat's assessment sweep, every second (set up below), publishes what a kill left owed: a batch
            # committed by a web process killed before it could publish, a message the broker lost.
            "LOOPX_SWEEP_GRACE_SECONDS": "2",
            "LOOPX_SWEEP_REPUBLISH_SECONDS": "5",
            "LOOPX_HEARTBEAT_SECONDS": "5",
            "PYTHONUNBUFFERED": "1",
        }
        for name, value in (settings or {}).items():
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value
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
            if self.postgres is not None:
                self.postgres.start()
            self._admin(f'CREATE DATABASE "{self.database}"')
            self._start_redis()
            self._manage("migrate", "--noinput")
            self.token = self._manage("create_api_token", "chaos-runtime").strip().splitlines()[-1]
            self._manage(
                "shell", "-c", _SETUP.format(name=OPERATOR, password=self.operator_password, every=self.sweep_seconds)
            )
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
                        # It died again while starting (beat reads its schedule from a database that is
                        # down): try again in a second, for as long as the service runs.
                        self._stop.wait(1)

    def assessment_trace(self, run: str) -> str:
        """Why a run may be behind its prefix, for a failure message: its pending-assessment flag as stored,
        the worker's last lines about the run's tasks and its very last line (was it alive?), and the last
        errors the worker and beat logged. Never raises: it only explains a failure."""
        parts: list[str] = []
        try:
            import psycopg

            with psycopg.connect(self.database_url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT f.pending, f.requested_seq, f.enqueues, f.enqueued_at, f.started_at, f.finished_at,"
                    " f.outcome, f.lease_holder, f.lease_expires_at, now() FROM journals_pendingassessment f"
                    " JOIN journals_run r ON r.id = f.run_id WHERE r.run_id = %s",
                    (run,),
                ).fetchone()
            names = ("pending", "requested_seq", "enqueues", "enqueued_at", "started_at", "finished_at", "outcome",
                     "lease_holder", "lease_expires_at", "now")
            parts.append("flag: " + (", ".join(f"{n}={v}" for n, v in zip(names, row, strict=True)) if row else "none"))
        except Exception as exc:  # the database may be what failed
            parts.append(f"flag: unreadable ({type(exc).__name__}: {exc})")
        for role in ("worker", "beat"):
            log = self.root / f"{role}.log"
            try:
                lines = log.read_text(errors="replace").splitlines()
            except OSError:
                lines = []
            if role == "worker":
                # A task's "received" line names its run; its outcome line names only its id.
                named = f"'{run}'"  # as the task's arguments print it: chaos-6 is not chaos-63
                tasks = {m.group(1) for line in lines if named in line for m in [_TASK_ID.search(line)] if m}
                about = [_brief(line) for line in lines if named in line or any(t in line for t in tasks)]
                parts.append("worker on the run: " + (" | ".join(about[-4:]) or "nothing"))
                parts.append("worker's last line: " + (_brief(lines[-1]) if lines else "none"))
            errors = [line[:400] for line in lines if '"level":"ERROR"' in line or "Traceback" in line]
            parts.append(f"{role} errors ({len(errors)}): " + (" | ".join(errors[-3:]) or "none"))
        return "; ".join(parts)

    # -- the dependencies' faults -----------------------------------------------------------------------
    def kill_redis(self) -> None:
        """SIGKILL the service's redis-server. It keeps nothing on disk: ``start_redis`` brings it back empty."""
        if self._redis is not None:
            _kill_group(self._redis, signal.SIGKILL)
            self._redis.wait(timeout=10)
            self._redis = None

    def start_redis(self) -> None:
        self._start_redis()

    def crash_postgres(self) -> None:
        """Crash the service's private cluster (immediate shutdown: every connection is cut, no checkpoint)."""
        if self.postgres is None:
            raise RuntimeError("the service runs on the shared PostgreSQL server, which is not its to crash")
        self.postgres.crash()

    def start_postgres(self) -> None:
        if self.postgres is None:
            raise RuntimeError("the service runs on the shared PostgreSQL server")
        self.postgres.start()

    def terminate_connections(self) -> int:
        """Cut every connection to the service's database (``pg_terminate_backend``), as a database restart
        would, on a server the service shares; returns how many were cut."""
        import psycopg

        with psycopg.connect(self.server_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.database,),
            ).fetchall()
        return sum(1 for (cut,) in rows if cut)

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
        self.kill_redis()
        if self.postgres is not None:
            self.postgres.stop()  # the whole cluster goes, with its database
            return
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


def _brief(line: str) -> str:
    """A log line's time and message (the service logs JSON lines; anything else is cut short)."""
    try:
        entry = json.loads(line)
        return f"{str(entry['time'])[11:23]} {str(entry['message'])[:200]}"
    except (ValueError, KeyError, TypeError):
        return line[:240]


_TASK_ID = re.compile(r"\[([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\]")

# The rig's operator: a person in the operator group, in the team that sees every run. Beat's assessment
# sweep runs every second (or ``sweep_seconds``) instead of every 30, so that what a kill left owed is
# published within the seed.
_SETUP = """
from django.contrib.auth.models import Group, User
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from teams.models import ALL_RUNS_TEAM
from teams.services import team_ensure, team_members_add
user = User.objects.create_user(username="{name}", password="{password}")
user.groups.add(Group.objects.get(name="operator"))
team_members_add(team=team_ensure(name=ALL_RUNS_TEAM, prefixes=[""]), users=[user])
sweep, _ = IntervalSchedule.objects.get_or_create(every={every}, period="seconds")
PeriodicTask.objects.filter(task="audits.tasks.audit_assessment_sweep").update(interval=sweep)
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
