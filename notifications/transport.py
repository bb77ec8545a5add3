"""One HTTP POST to a checked destination (notifications.destinations), and what of its answer is kept.

Shared by webhooks and the chat and paging channels: each connects to the address the destination check
allowed, never resolving the name a second time, and names the host in the Host header and the TLS server
name. Redirects are never followed. Of the answer, at most ``EXCERPT_CHARS`` characters of a failure's
body are kept, redacted.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import socket
import ssl
import time
from dataclasses import dataclass

from kernel.logging import scrub

from .destinations import Destination, DestinationRefused, destination_check

SIGNATURE_HEADER = "X-LoopX-Signature"


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the exact body bytes with the secret>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class SendResult:
    ok: bool
    status_code: int | None
    error: str
    duration_ms: float


# What a failed attempt keeps of the answer's body: enough to tell a receiver's error page, no more.
EXCERPT_CHARS = 200
READ_BYTES = 1024


class PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to the address the destination check allowed, naming the host in the Host header."""

    def __init__(self, destination: Destination, address: str, timeout: float) -> None:
        super().__init__(destination.host, destination.port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to the checked address; the certificate is checked against the host's name (SNI too)."""

    def __init__(self, destination: Destination, address: str, timeout: float) -> None:
        super().__init__(destination.host, destination.port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(destination: Destination, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """One POST to the first checked address that takes the connection; (status, the body's start)."""
    last: OSError | None = None
    for address in destination.addresses:
        kind = PinnedHTTPSConnection if destination.scheme == "https" else PinnedHTTPConnection
        connection = kind(destination, str(address), timeout)
        try:
            connection.request("POST", destination.path, body=body, headers=headers)
            response = connection.getresponse()
            return int(response.status), response.read(READ_BYTES)  # never more is read, nor kept
        except OSError as exc:  # refused or unreachable: the next address, if any
            last = exc
        finally:
            connection.close()
    raise last or OSError("no address to connect to")


def excerpt(data: bytes) -> str:
    """A short, redacted excerpt of an answer's body for the delivery log."""
    text = " ".join(data.decode("utf-8", "replace").split())
    return scrub(text[: EXCERPT_CHARS * 2])[:EXCERPT_CHARS]


def error_text(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = f"{type(exc).__name__}: {reason if reason is not None else exc}"
    return scrub(text)[:500]


def delivery_headers(
    *, event: str, delivery_id: int, attempt: int, key: str, request_id: str, user_agent: str
) -> dict[str, str]:
    """The headers every delivery carries: what it is, which attempt, its idempotency key."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        "X-LoopX-Event": event,
        "X-LoopX-Delivery": str(delivery_id),
        "X-LoopX-Attempt": str(attempt),
        "Idempotency-Key": key,
        "X-LoopX-Idempotency-Key": key,
    }
    if request_id:
        headers["X-Request-ID"] = request_id
    return headers


def post_checked(url: str, body: bytes, headers: dict[str, str], timeout: float) -> SendResult:
    """One POST to ``url``, its destination checked again first (the name may resolve elsewhere now)."""
    started = time.perf_counter()
    try:
        destination = destination_check(url)
    except DestinationRefused as refused:
        return SendResult(False, None, f"{refused.code}: {scrub(refused.detail)}"[:500], 0.0)
    try:
        status, answer = post(destination, body, headers, timeout)
    except Exception as exc:  # refused, reset, timed out, bad TLS: the receiver is down for us
        return SendResult(False, None, error_text(exc), (time.perf_counter() - started) * 1000)
    elapsed = (time.perf_counter() - started) * 1000
    if 200 <= status < 300:
        return SendResult(True, status, "", elapsed)
    kept = excerpt(answer)
    return SendResult(False, status, f"HTTP {status}: {kept}" if kept else f"HTTP {status}", elapsed)
