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
import json
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from engine.secrets import redact
from journals.access import RunScope
from journals.actors import Actor
from kernel import context, events
from trail.services import operator_action_record

from . import channels
from .models import EVENTS, Webhook, WebhookAttempt, WebhookDelivery
from .transport import EXCERPT_CHARS as EXCERPT_CHARS
from .transport import SIGNATURE_HEADER as SIGNATURE_HEADER
from .transport import SendResult, delivery_headers, post_checked, sign

logger = logging.getLogger("loopx.notifications")

DELIVER_TASK = "notifications.deliver_webhook"

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
    active = events.looked_up("notifications.webhooks_active", _webhooks_active)
    hooks = [hook for hook in active if hook.subscribes(event) and _destined(hook, run)]
    if not hooks:
        return []
    key = idempotency_key(event, subject)
    body = _body(event, key, data)
    return deliveries_create(targets=[("webhook", hook, body) for hook in hooks], event=event, key=key, run=run)


def _webhooks_active() -> list[Webhook]:
    return list(Webhook.objects.filter(active=True).prefetch_related("team__prefixes"))


def deliveries_create(*, targets: Iterable[tuple[str, Any, str]], event: str, key: str, run: str | None) -> list[int]:
    """One delivery row per (``webhook`` or ``channel``, its row, the body), under a savepoint of the
    caller's transaction; published after commit. A key already used for a destination makes nothing
    again: the same event is never sent twice to one place."""
    created: list[int] = []
    with transaction.atomic():
        for field, owner, body in targets:
            delivery, made = WebhookDelivery.objects.get_or_create(
                **{field: owner},
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
    # By the task's registered name: the tasks module calls this one (notifications/apps.py registers it).
    deliver_webhook = current_app.tasks[DELIVER_TASK]
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


def send(delivery: WebhookDelivery, attempt_number: int) -> SendResult:
    hook = delivery.webhook
    if hook is None:  # a channel's delivery goes through notifications.channels
        return SendResult(False, None, "no webhook", 0.0)
    body = delivery.body.encode()
    headers = delivery_headers(
        event=delivery.event,
        delivery_id=delivery.pk,
        attempt=attempt_number,
        key=delivery.idempotency_key,
        request_id=delivery.request_id,
        user_agent=USER_AGENT,
    )
    headers[SIGNATURE_HEADER] = sign(hook.secret, body)
    return post_checked(hook.url, body, headers, float(_setting("LOOPX_WEBHOOK_TIMEOUT_SECONDS", 5)))


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
    delivery = WebhookDelivery.objects.select_related("webhook", "channel").get(pk=delivery_id)
    number = delivery.attempts
    active = delivery.webhook.active if delivery.webhook is not None else channels.channel_live(delivery.channel)
    with context.bind(request_id=delivery.request_id or context.request_id_var.get()):
        if not active:
            result = SendResult(False, None, "webhook is inactive" if delivery.webhook else "channel is inactive", 0.0)
        elif delivery.webhook is not None:
            result = send(delivery, number)
        else:
            result = channels.channel_send(delivery, number)
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
                status="delivered",
                delivered_at=done,
                last_status_code=result.status_code,
                last_error="",
                lease_until=None,
                updated_at=done,
            )
            logger.info(
                "webhook delivered",
                extra={
                    "event": "webhook.delivered",
                    "delivery": delivery_id,
                    "attempt": number,
                    "webhook": delivery.webhook_id,
                    "channel": delivery.channel_id,
                },
            )
            return "delivered"
        if number >= delivery.attempt_limit or not active:
            mine.update(
                status="failed",
                last_status_code=result.status_code,
                last_error=result.error,
                lease_until=None,
                updated_at=done,
            )
            logger.warning(
                "webhook delivery failed for good",
                extra={"event": "webhook.failed", "delivery": delivery_id, "attempt": number, "error": result.error},
            )
            return "failed"
        wait = backoff_seconds(number)
        updated = mine.update(
            status="pending",
            next_attempt_at=done + timedelta(seconds=wait),
            last_status_code=result.status_code,
            last_error=result.error,
            lease_until=None,
            updated_at=done,
        )
        logger.info(
            "webhook attempt failed; retrying",
            extra={
                "event": "webhook.retry",
                "delivery": delivery_id,
                "attempt": number,
                "error": result.error,
                "retry_in": wait,
            },
        )
    if updated:
        publish([delivery_id], countdown=wait)
    return "retry"


def due_deliveries(limit: int = 200) -> list[int]:
    """Pending deliveries that are due, and claims whose lease expired (a worker died mid-attempt)."""
    now = timezone.now()
    return list(
        WebhookDelivery.objects.filter(_claimable(now)).order_by("next_attempt_at").values_list("pk", flat=True)[:limit]
    )


def resend(delivery_ids: list[int]) -> int:
    """An operator's resend: due now, with a fresh allowance of attempts, same body and idempotency key."""
    now = timezone.now()
    ids = list(
        WebhookDelivery.objects.filter(pk__in=delivery_ids).exclude(status="delivering").values_list("pk", flat=True)
    )
    count = (
        WebhookDelivery.objects.filter(pk__in=ids)
        .exclude(status="delivering")
        .update(
            status="pending",
            next_attempt_at=now,
            attempt_limit=F("attempts") + max_attempts(),
            lease_until=None,
            updated_at=now,
        )
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
                actor=actor,
                kind="delivery_resend",
                reason=f"{count} webhook deliveries queued to resend",
                after={"deliveries": sorted(ids), "queued": count},
            )
    return count
