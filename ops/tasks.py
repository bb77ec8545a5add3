"""Celery tasks of ops."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from ops import retention


@shared_task(name="ops.retention_sweep", acks_late=True, ignore_result=True)
def retention_sweep() -> dict[str, Any]:
    """Beat task: export and remove old completed runs. Does nothing unless LOOPX_RETENTION_DAYS is set."""
    return retention.sweep().as_dict()
