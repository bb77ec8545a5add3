"""Fixtures of the operability tests: a private redis-server, a loopback webhook receiver, the JSON log
stream, and scrape helpers."""

from __future__ import annotations

import io
import json
import logging
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OwnRedis:
    port: int
    process: subprocess.Popen[bytes] | None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture
def own_redis(tmp_path) -> Iterator[OwnRedis]:
    """A redis-server of this test only, on a spare loopback port (never the shared 6379)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not on PATH")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = OwnRedis(port, process)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            time.sleep(0.05)
    else:
        server.stop()
        pytest.fail("own redis-server did not start")
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Receiver:
    url: str
    statuses: list[int]
    requests: list[dict[str, Any]] = field(default_factory=list)
    accepted_keys: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        """The receiver's address without its path: any path under it reaches it too."""
        return self.url.rsplit("/", 1)[0]

    def posted(self, path: str) -> list[dict[str, Any]]:
        """The JSON bodies received at ``path``, in order."""
        return [json.loads(r["body"]) for r in self.requests if r["path"] == path]


@pytest.fixture
def webhook_receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback answering the scripted statuses in order (then 200), deduplicating
    accepted deliveries by their idempotency key as a well-behaved receiver would."""
    state = Receiver(url="", statuses=[])
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                status = state.statuses.pop(0) if state.statuses else 200
                # Header names are case-insensitive (urllib sends "X-loopx-signature"): keep them lower-cased.
                headers = {k.lower(): v for k, v in self.headers.items()}
                state.requests.append({"headers": headers, "body": body, "status": status, "path": self.path})
                key = headers.get("idempotency-key", "")
                if 200 <= status < 300 and key not in state.accepted_keys:
                    state.accepted_keys.append(key)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


class LogStream:
    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def lines(self) -> list[str]:
        return [line for line in self.buffer.getvalue().splitlines() if line.strip()]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines()]


@pytest.fixture
def log_stream() -> Iterator[LogStream]:
    """Everything the configured console handler (settings.LOGGING: JSON + redaction) writes."""
    from kernel.logging import JsonFormatter

    handlers = [h for h in logging.getLogger().handlers if isinstance(h.formatter, JsonFormatter)]
    assert handlers, "settings.LOGGING must install the JSON console handler on the root logger"
    stream = LogStream()
    previous = [h.setStream(stream.buffer) for h in handlers]  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        for handler, old in zip(handlers, previous, strict=True):
            handler.setStream(old)  # type: ignore[attr-defined]


def scrape(client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics and return {(sample name, sorted labels): value}."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
