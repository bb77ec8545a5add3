"""Celery tasks of the notifications app."""

from __future__ import annotations

from celery import shared_task

from . import delivery, notices


@shared_task(name="notifications.deliver_webhook", acks_late=True, ignore_result=True)
def deliver_webhook(delivery_id: int) -> str:
    """One attempt. Idempotent: the compare-and-set claim makes a redelivered message a no-op."""
    return delivery.attempt(delivery_id)


@shared_task(name="notifications.deliver_due", acks_late=True, ignore_result=True)
def deliver_due() -> int:
    """Beat sweep: publish every due delivery (those whose publish failed, or whose retry message was lost)."""
    ids = delivery.due_deliveries()
    delivery.publish(ids)
    return len(ids)


@shared_task(name="notifications.sweep_notices", acks_late=True, ignore_result=True)
def sweep_notices() -> dict[str, int]:
    """Beat sweep of the team channels' notices: escalations, resolves, daily digests. Idempotent: each
    message's key is unique per channel, so a second run sends nothing again."""
    return notices.notices_sweep()
