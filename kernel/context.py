"""Per-request / per-task context that every log line carries (request id, task id, run, turn).

Context variables rather than thread locals: they are right under threads, gevent-free workers and
asyncio alike, and a Celery task gets a fresh copy from ``task_prerun``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

request_id_var: ContextVar[str | None] = ContextVar("loopx_request_id", default=None)
task_id_var: ContextVar[str | None] = ContextVar("loopx_task_id", default=None)
run_var: ContextVar[str | None] = ContextVar("loopx_run", default=None)
turn_var: ContextVar[str | None] = ContextVar("loopx_turn", default=None)

# An incoming X-Request-ID is accepted only when it looks like an id: anything else (too long, spaces,
# control characters) could forge log lines or smuggle data, so a fresh id replaces it.
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def new_request_id() -> str:
    return uuid.uuid4().hex


def clean_request_id(value: str | None) -> str:
    if value and _REQUEST_ID_RE.match(value):
        return value
    return new_request_id()


def current() -> dict[str, str | None]:
    return {
        "request_id": request_id_var.get(),
        "task_id": task_id_var.get(),
        "run": run_var.get(),
        "turn": turn_var.get(),
    }


@contextmanager
def bind(**values: Any) -> Iterator[None]:
    """Bind run/turn (or request_id/task_id) for the duration of a block: ``with bind(run=r, turn=t): ...``"""
    variables = {"request_id": request_id_var, "task_id": task_id_var, "run": run_var, "turn": turn_var}
    tokens: list[tuple[ContextVar[str | None], Token[str | None]]] = []
    for name, value in values.items():
        var = variables[name]
        tokens.append((var, var.set(None if value is None else str(value))))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)
