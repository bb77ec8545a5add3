"""A live LoopX server for the rig: `manage.py runserver` in a child process on a free port, over a
SQLite database of its own, migrated, with a runtime API token. The runtime children talk HTTP to it,
so a SIGKILLed runtime is a real client dying mid-conversation with the real service.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.db = root / "server.sqlite3"
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # The rig sends thousands of requests a minute with one token: the production throttle is not the
        # subject here. Everything else is the project's own settings.
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
        proc = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=PROJECT_ROOT, env=self.env, capture_output=True, text=True,
            timeout=300, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed: {proc.stderr.strip()[-800:]}")
        return proc.stdout

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
