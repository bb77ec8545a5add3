"""Carry the request id from a web request into the Celery tasks it enqueues, and stamp each message
with its publish time (the queue-age metric reads it back from the broker).

Connected once, from ``notifications.apps.NotificationsConfig.ready`` (Django and the worker both load
installed apps, so the web side that publishes and the worker side that runs are both covered).
"""

from __future__ import annotations

import contextlib
import time
from contextvars import Token
from typing import Any

from celery.signals import before_task_publish, task_postrun, task_prerun

from kernel import context

REQUEST_ID_HEADER = "loopx_request_id"
PUBLISHED_AT_HEADER = "loopx_published_at"

# task id -> the context tokens to reset after the task (a worker process runs one task at a time per
# thread, but keying by id keeps eager nested calls right too).
_tokens: dict[str, list[tuple[Any, Token[str | None]]]] = {}


def on_before_task_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is None:  # protocol 1 messages have no headers dict: nothing to carry
        return
    request_id = context.request_id_var.get()
    if request_id and not headers.get(REQUEST_ID_HEADER):
        headers[REQUEST_ID_HEADER] = request_id
    headers.setdefault(PUBLISHED_AT_HEADER, time.time())


def on_task_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    tokens: list[tuple[Any, Token[str | None]]] = []
    request_id = getattr(getattr(task, "request", None), REQUEST_ID_HEADER, None)
    if isinstance(request_id, str) and request_id:
        tokens.append((context.request_id_var, context.request_id_var.set(context.clean_request_id(request_id))))
    if task_id:
        tokens.append((context.task_id_var, context.task_id_var.set(task_id)))
        _tokens[task_id] = tokens


def on_task_postrun(task_id: str | None = None, **_: Any) -> None:
    for var, token in reversed(_tokens.pop(task_id or "", [])):
        # A var set in another context (a thread pool) raises ValueError: nothing of ours to restore there.
        with contextlib.suppress(ValueError):
            var.reset(token)


def connect() -> None:
    # weak=False: the receivers are module functions, but be explicit that they must live forever.
    before_task_publish.connect(on_before_task_publish, weak=False, dispatch_uid="loopx-ops-publish")
    task_prerun.connect(on_task_prerun, weak=False, dispatch_uid="loopx-ops-prerun")
    task_postrun.connect(on_task_postrun, weak=False, dispatch_uid="loopx-ops-postrun")
