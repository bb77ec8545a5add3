"""Making, sending and retrying webhook deliveries.

- :func:`enqueue` runs inside the caller's transaction (ingest, an assessment) under its own savepoint:
  the delivery rows commit with the event that caused them, and an error here rolls back only the
  savepoint, never the caller's work. The Celery task is published ``on_commit``; a broker that is down
  only delays it (the beat sweep :func:`due_deliveries` publishes anything pending and due).
- :func:`attempt` is the task's body: claim by compare-and-set (``pending`` and due, or ``delivering``
  with an expired lease → ``delivering``), one POST with a short timeout, then compare-and-set to
  ``delivered``, back to ``pending`` with an exponential backoff, or ``failed`` once the attempts are
  spent. Every attempt is a WebhookAttempt row.

Signature: ``X-LoopX-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes with the hook's secret>``.

Each attempt checks the URL's destination again (notifications.destinations: DNS can change) and connects
to the address it checked. Redirects are never followed: a 3xx is a failed attempt. Of the answer, the
attempt keeps its status and, for a failure, at most ``EXCERPT_CHARS`` characters of its body, redacted.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from engine.secrets import redact
from journals.access import RunScope
from journals.actors import Actor
from kernel import context, events
from kernel.logging import scrub
from trail.services import operator_action_record

from .destinations import Destination, DestinationRefused, destination_check
from .models import EVENTS, Webhook, WebhookAttempt, WebhookDelivery

logger = logging.getLogger("loopx.notifications")

SIGNATURE_HEADER = "X-LoopX-Signature"
USER_AGENT = "LoopX-Webhook/1"


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def max_attempts() -> int:
    return max(1, int(_setting("LOOPX_WEBHOOK_MAX_ATTEMPTS", 8)))


def backoff_seconds(attempts_made: int) -> float:
    """Seconds to wait after the ``attempts_made``-th failed attempt: base * 2^(n-1), capped."""
    base = float(_setting("LOOPX_WEBHOOK_BACKOFF_SECONDS", 10))
    cap = float(_setting("LOOPX_WEBHOOK_BACKOFF_MAX_SECONDS", 1800))
    factor: int = 2 ** max(0, attempts_made - 1)
    return min(cap, base * factor)


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def idempotency_key(event: str, subject: tuple[Any, ...]) -> str:
    """Stable for one event about one subject (a turn's blocking by one assessment, one finding...)."""
    raw = json.dumps([event, *subject], sort_keys=True, separators=(",", ":"), default=str)
    return f"{event}:{hashlib.sha256(raw.encode()).hexdigest()[:40]}"


def _body(event: str, key: str, data: dict[str, Any]) -> str:
    # The engine's redaction (docs/contract.md section 8) on everything that came from a record.
    return json.dumps(
        {"id": key, "event": event, "created_at": timezone.now().isoformat(), "data": redact(data)},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )


def enqueue(event: str, subject: tuple[Any, ...], data: dict[str, Any]) -> list[int]:
    """Create one delivery per active webhook subscribed to ``event``; publish them after commit.

    Returns the ids of the deliveries created (an event already recorded creates nothing again).
    """
    if event not in EVENTS:
        raise ValueError(f"unknown webhook event {event!r}")
    run = data.get("run") if isinstance(data.get("run"), str) else None
    hooks = [
        hook
        for hook in Webhook.objects.filter(active=True).prefetch_related("team__prefixes")
        if hook.subscribes(event) and _destined(hook, run)
    ]
    if not hooks:
        return []
    key = idempotency_key(event, subject)
    body = _body(event, key, data)
    created: list[int] = []
    with transaction.atomic():  # a savepoint inside the caller's transaction
        for hook in hooks:
            delivery, made = WebhookDelivery.objects.get_or_create(
                webhook=hook,
                idempotency_key=key,
                defaults={
                    "event": event,
                    "body": body,
                    "run_ident": run,
                    "attempt_limit": max_attempts(),
                    "request_id": context.request_id_var.get() or "",
                },
            )
            if made:
                created.append(delivery.pk)
    if created:
        transaction.on_commit(lambda: publish(created))
    return created


def _destined(hook: Webhook, run: str | None) -> bool:
    """A team's webhook is told about its team's runs only (the access rule: journals.access.RunScope)."""
    if hook.team is None:
        return True
    return run is not None and RunScope.of(p.prefix for p in hook.team.prefixes.all()).allows(run)


def publish(ids: list[int], countdown: float = 0) -> None:
    """Hand deliveries to Celery. A broker error is logged, not raised: the rows stay pending and due,
    and the beat sweep publishes them again."""
    from .tasks import deliver_webhook

    for pk in ids:
        try:
            # retry=False: with the broker down, fail at once (the sweep publishes it later) rather than
            # hold the committing request in kombu's publish retries.
            # Celery takes a list of args and a None countdown; celery-types wants a tuple and a float.
            deliver_webhook.apply_async(args=[pk], countdown=countdown or None, retry=False)  # type: ignore[arg-type]
        except Exception as exc:
            logger.warning(
                "webhook delivery not published; the sweep will retry",
                extra={"event": "webhook.publish_failed", "delivery": pk, "error": type(exc).__name__},
            )


@dataclass(frozen=True)
class SendResult:
    ok: bool
    status_code: int | None
    error: str
    duration_ms: float


# What a failed attempt keeps of the answer's body: enough to tell a receiver's error page, no more.
EXCERPT_CHARS = 200
_READ_BYTES = 1024


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to the address the destination check allowed, naming the host in the Host header."""

    def __init__(self, destination: Destination, address: str, timeout: float) -> None:
        super().__init__(destination.host, destination.port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to the checked address; the certificate is checked against the host's name (SNI too)."""

    def __init__(self, destination: Destination, address: str, timeout: float) -> None:
        super().__init__(destination.host, destination.port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _post(destination: Destination, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """One POST to the first checked address that takes the connection; (status, the body's start)."""
    last: OSError | None = None
    for address in destination.addresses:
        kind = _PinnedHTTPSConnection if destination.scheme == "https" else _PinnedHTTPConnection
        connection = kind(destination, str(address), timeout)
        try:
            connection.request("POST", destination.path, body=body, headers=headers)
            response = connection.getresponse()
            return int(response.status), response.read(_READ_BYTES)  # never more is read, nor kept
        except OSError as exc:  # refused or unreachable: the next address, if any
            last = exc
        finally:
            connection.close()
    raise last or OSError("no address to connect to")


def _excerpt(data: bytes) -> str:
    """A short, redacted excerpt of an answer's body for the delivery log."""
    text = " ".join(data.decode("utf-8", "replace").split())
    return scrub(text[: EXCERPT_CHARS * 2])[:EXCERPT_CHARS]


def send(delivery: WebhookDelivery, attempt_number: int) -> SendResult:
    hook = delivery.webhook
    body = delivery.body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-LoopX-Event": delivery.event,
        "X-LoopX-Delivery": str(delivery.pk),
        "X-LoopX-Attempt": str(attempt_number),
        "Idempotency-Key": delivery.idempotency_key,
        "X-LoopX-Idempotency-Key": delivery.idempotency_key,
        SIGNATURE_HEADER: sign(hook.secret, body),
    }
    if delivery.request_id:
        headers["X-Request-ID"] = delivery.request_id
    timeout = float(_setting("LOOPX_WEBHOOK_TIMEOUT_SECONDS", 5))
    started = time.perf_counter()
    try:
        destination = destination_check(hook.url)  # again at every attempt: the name may resolve elsewhere now
    except DestinationRefused as refused:
        return SendResult(False, None, f"{refused.code}: {scrub(refused.detail)}"[:500], 0.0)
    try:
        status, answer = _post(destination, body, headers, timeout)
    except Exception as exc:  # refused, reset, timed out, bad TLS: the receiver is down for us
        return SendResult(False, None, _error_text(exc), (time.perf_counter() - started) * 1000)
    elapsed = (time.perf_counter() - started) * 1000
    if 200 <= status < 300:
        return SendResult(True, status, "", elapsed)
    excerpt = _excerpt(answer)
    return SendResult(False, status, f"HTTP {status}: {excerpt}" if excerpt else f"HTTP {status}", elapsed)


def _error_text(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    text = f"{type(exc).__name__}: {reason if reason is not None else exc}"
    return scrub(text)[:500]


def _claimable(now: Any) -> Q:
    return Q(status="pending", next_attempt_at__lte=now) | Q(status="delivering", lease_until__lt=now)


def attempt(delivery_id: int) -> str:
    """One attempt of one delivery. Returns what happened: delivered, retry, failed, skipped."""
    now = timezone.now()
    lease = timedelta(seconds=float(_setting("LOOPX_WEBHOOK_TIMEOUT_SECONDS", 5)) * 3 + 30)
    claimed = (
        WebhookDelivery.objects.filter(pk=delivery_id)
        .filter(_claimable(now))
        .update(status="delivering", attempts=F("attempts") + 1, lease_until=now + lease, updated_at=now)
    )
    if not claimed:
        return "skipped"  # delivered, failed, not yet due, or another worker holds it
    delivery = WebhookDelivery.objects.select_related("webhook").get(pk=delivery_id)
    number = delivery.attempts
    with context.bind(request_id=delivery.request_id or context.request_id_var.get()):
        if not delivery.webhook.active:
            result = SendResult(False, None, "webhook is inactive", 0.0)
        else:
            result = send(delivery, number)
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            started_at=now,
            duration_ms=round(result.duration_ms, 1),
            status_code=result.status_code,
            ok=result.ok,
            error=result.error,
        )
        # Compare-and-set on (status, attempts): if our lease expired and another worker took over, its
        # outcome wins and ours is only the attempt row above.
        mine = WebhookDelivery.objects.filter(pk=delivery_id, status="delivering", attempts=number)
        done = timezone.now()
        events.emit(events.webhook_attempted, delivered=result.ok)
        if result.ok:
            mine.update(
                status="delivered", delivered_at=done, last_status_code=result.status_code, last_error="",
                lease_until=None, updated_at=done,
            )
            logger.info(
                "webhook delivered",
                extra={"event": "webhook.delivered", "delivery": delivery_id, "attempt": number,
                       "webhook": delivery.webhook_id},
            )
            return "delivered"
        if number >= delivery.attempt_limit or not delivery.webhook.active:
            mine.update(
                status="failed", last_status_code=result.status_code, last_error=result.error, lease_until=None,
                updated_at=done,
            )
            logger.warning(
                "webhook delivery failed for good",
                extra={"event": "webhook.failed", "delivery": delivery_id, "attempt": number, "error": result.error},
            )
            return "failed"
        wait = backoff_seconds(number)
        updated = mine.update(
            status="pending", next_attempt_at=done + timedelta(seconds=wait), last_status_code=result.status_code,
            last_error=result.error, lease_until=None, updated_at=done,
        )
        logger.info(
            "webhook attempt failed; retrying",
            extra={"event": "webhook.retry", "delivery": delivery_id, "attempt": number, "error": result.error,
                   "retry_in": wait},
        )
    if updated:
        publish([delivery_id], countdown=wait)
    return "retry"


def due_deliveries(limit: int = 200) -> list[int]:
    """Pending deliveries that are due, and claims whose lease expired (a worker died mid-attempt)."""
    now = timezone.now()
    return list(
        WebhookDelivery.objects.filter(_claimable(now)).order_by("next_attempt_at").values_list("pk", flat=True)[
            :limit
        ]
    )


def resend(delivery_ids: list[int]) -> int:
    """An operator's resend: due now, with a fresh allowance of attempts, same body and idempotency key."""
    now = timezone.now()
    ids = list(
        WebhookDelivery.objects.filter(pk__in=delivery_ids).exclude(status="delivering").values_list("pk", flat=True)
    )
    count = WebhookDelivery.objects.filter(pk__in=ids).exclude(status="delivering").update(
        status="pending", next_attempt_at=now, attempt_limit=F("attempts") + max_attempts(), lease_until=None,
        updated_at=now,
    )
    transaction.on_commit(lambda: publish(ids))
    return count


def delivery_resend(*, ids: list[int], actor: Actor) -> int:
    """An operator's resend (admin or API), audited: one ``delivery_resend`` row for the deliveries it
    queued, in the same transaction. Nothing queued (each one is being attempted) records nothing."""

    with transaction.atomic():
        count = resend(ids)
        if count:
            operator_action_record(
                actor=actor, kind="delivery_resend", reason=f"{count} webhook deliveries queued to resend",
                after={"deliveries": sorted(ids), "queued": count},
            )
    return count
