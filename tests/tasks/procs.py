"""Real processes for the fault tests: a private redis-server, Celery workers and beat as subprocesses
against the test database, and the helpers to wait for them, park them at failpoints and kill them.

Each process gets its own session (process group), so a SIGKILL takes its pool children with it, the
way a host losing power would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

ROOT = Path(settings.BASE_DIR)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.2, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class RedisServer:
    """Our own redis-server on a spare port (never the shared one), with an append-only file so that a
    restart brings back what was queued, as a production Redis configured for a broker would."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        wait_for(self.ping, timeout=10, what="redis-server to answer")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown save; what survives is what the append-only file already holds."""
        if self.proc is not None:
            _kill_group(self.proc, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def restart(self, down_for: float = 1.0) -> None:
        self.kill()
        time.sleep(down_for)
        self.start()

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            sock.recv(16)


def database_url() -> str:
    """The test database as a URL the subprocesses can reach (pytest-django's test_ database)."""
    cfg = connection.settings_dict
    auth = cfg["USER"] + (f":{cfg['PASSWORD']}" if cfg.get("PASSWORD") else "")
    return f"postgres://{auth}@{cfg['HOST'] or '127.0.0.1'}:{cfg['PORT'] or 5432}/{cfg['NAME']}"


class Proc:
    """A Celery worker or beat subprocess with its log in a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115  closed in stop()
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._fh, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, marker: str, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            return marker in self.output()

        wait_for(ready, timeout=timeout, what=f"{self.name} to be ready")

    def kill(self) -> None:
        _kill_group(self.proc, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        _kill_group(self.proc, signal.SIGKILL)  # pool children that outlived their parent
        self._fh.close()


class Stack:
    """Starts workers and beat against the test database and a private Redis; stops them all."""

    def __init__(self, redis: RedisServer, tmp: Path) -> None:
        self.redis = redis
        self.tmp = tmp
        self.marks = tmp / "failpoints"
        self.marks.mkdir(exist_ok=True)
        self.procs: list[Proc] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_FAILPOINTS", "CELERY_"))}
        env.update(
            DJANGO_SETTINGS_MODULE="loopx_site.settings",
            DATABASE_URL=database_url(),
            REDIS_URL=self.redis.url,
            LOOPX_VAR_DIR=str(self.tmp / "var"),
            LOOPX_FAILPOINTS_DIR=str(self.marks),
            LOOPX_HEARTBEAT_SECONDS="1",
            # A dead worker's unacknowledged message comes back after 4 s, looked for every second.
            CELERY_VISIBILITY_TIMEOUT="4",
            CELERY_UNACKED_RESTORE_INTERVAL="1",
            CELERY_UNACKED_RESTORE_THROTTLE="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def worker(
        self, name: str, *, failpoints: str = "", concurrency: int = 1, env: dict[str, str] | None = None
    ) -> Proc:
        extra = {"LOOPX_FAILPOINTS": failpoints} if failpoints else {}
        extra.update(env or {})
        argv = [sys.executable, "-m", "celery", "-A", "loopx_site", "worker", "-n", f"{name}@%h", "--loglevel",
                "INFO", "--concurrency", str(concurrency), "--without-mingle", "--without-gossip"]
        proc = Proc(name, argv, self.env(**extra), self.tmp / f"{name}.log")
        self.procs.append(proc)
        proc.wait_ready(" ready.")
        return proc

    def beat(self) -> Proc:
        argv = [sys.executable, "-m", "celery", "-A", "loopx_site", "beat", "--loglevel", "INFO",
                "--max-interval", "1", "--pidfile", str(self.tmp / "beat.pid")]
        proc = Proc("beat", argv, self.env(), self.tmp / "beat.log")
        self.procs.append(proc)
        proc.wait_ready("beat: Starting")
        return proc

    def parked(self, failpoint: str) -> list[int]:
        """pids of the processes parked at ``failpoint`` so far."""
        return [int(p.name.rsplit(".", 1)[1]) for p in self.marks.glob(f"{failpoint}.*")]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


@contextlib.contextmanager
def publishing_to(url: str) -> Iterator[None]:
    """Make this (the test) process publish to ``url``: the Celery app caches its connection pool."""
    from kombu import pools

    from loopx_site.celery import app

    def reset() -> None:
        # kombu keeps producer pools in a process-wide registry keyed by connection: drop them all.
        pools.reset()
        app._pool = None
        app.amqp._producer_pool = None

    previous = app.conf.broker_url
    reset()
    app.conf.broker_url = url
    try:
        yield
    finally:
        reset()
        app.conf.broker_url = previous
