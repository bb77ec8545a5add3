"""Operational events: the signals other apps send, and the decorators that send them for a service.

Why signals: the store, the task runner and the package checker must not import the metrics or the
webhook code (nor wait for it). They send an event; ``ops.metrics`` counts it and
``notifications`` turns it into webhook deliveries, enqueued on commit. Receivers run through
:func:`emit`, which uses ``send_robust``: a failing receiver is logged and never breaks ingest or an
assessment.

Events and their keyword arguments (all JSON-safe; payloads are redacted before they leave):

``turn_blocked``       a turn became held (its effective state holds it at the gate and did not before,
                       recovery/state.py): ``run_id``, ``turn_id``, ``reason``, ``state``, optional
                       ``reason_line``, ``assessment_id``.
``turn_hold_changed``  turns of one run entered, changed within or left a hold (a turn's effective state
                       or reason changed and the old or the new one holds it at the gate): ``run_id``,
                       ``turns`` (each ``turn_id``, ``state``, ``gate``, ``previous_state``). Sent once per
                       refresh in the writer's transaction; the notifications open, escalate or resolve
                       their notices from it.
``finding_opened``     a finding was opened: ``finding_id``, ``kind``, optional ``run_id``, ``turn_id``,
                       ``summary``.
``crash_loop_parked``  the gate parked a turn that kept crashing: ``run_id``, ``turn_id``, ``attempts``,
                       optional ``reason``.
``package_rejected``   a recovery package failed verification: ``code``, optional ``package``
                       (an id or file name), ``run_id``, ``detail``.
``ingest_finished``    one ingest batch ended: ``outcome`` (``accepted``, ``conflict``, ``refused``),
                       ``code`` (the refusal code, '' when accepted), ``stored``, ``duplicates``.
``assessment_finished`` an assessment ran: ``seconds``, optional ``run_id``.
``webhook_attempted``  one webhook delivery attempt ended: ``delivered`` (bool).
``prefix_moved``       a batch raised a run's pending-assessment flag, after it committed
                       (journals/assessment_flag.py): ``run_pk``, ``run_id``. Recovery publishes the
                       assessment; a lost send leaves the flag raised for the sweep.

The ``instrument_*`` decorators let a service opt in with one line instead of threading sends through
its body. A sender of many events at once (a refresh that newly holds a hundred turns) sends them inside
:func:`sending_many`, so that a receiver reads what it looks up once for all of them (:func:`looked_up`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from django.dispatch import Signal

logger = logging.getLogger("loopx.events")

turn_blocked = Signal()
turn_hold_changed = Signal()
finding_opened = Signal()
crash_loop_parked = Signal()
package_rejected = Signal()
ingest_finished = Signal()
assessment_finished = Signal()
webhook_attempted = Signal()
prefix_moved = Signal()

P = ParamSpec("P")
R = TypeVar("R")


def emit(signal: Signal, sender: Any = None, **kwargs: Any) -> None:
    """Send ``signal``; a receiver's exception is logged (without its arguments) and swallowed."""
    for receiver, result in signal.send_robust(sender=sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "event receiver failed",
                exc_info=(type(result), result, result.__traceback__),
                extra={"event": "ops.receiver_failed", "receiver": getattr(receiver, "__qualname__", repr(receiver))},
            )


_looked_up: ContextVar[dict[str, Any] | None] = ContextVar("loopx_events_looked_up", default=None)


@contextmanager
def sending_many() -> Iterator[None]:
    """The events sent inside share their receivers' lookups (:func:`looked_up`): a sender of many events in
    one transaction, where what the receivers read cannot change between two of them."""
    token = _looked_up.set({}) if _looked_up.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _looked_up.reset(token)


def looked_up(key: str, read: Callable[[], R]) -> R:
    """``read()``, once per :func:`sending_many` for each ``key``; outside one, every time."""
    memo = _looked_up.get()
    if memo is None:
        return read()
    if key not in memo:
        memo[key] = read()
    value: R = memo[key]
    return value


def instrument_ingest(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap the store's ingest service: one ``ingest_finished`` per batch, whatever its outcome.

    A refusal is any exception with ``status`` and ``code`` (journals.services.IngestError): 409 is a
    conflict, anything else refused. Other exceptions are not outcomes of the batch; they propagate
    uncounted, as the server error they are.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            result = func(*args, **kwargs)
        except Exception as exc:
            code, status = getattr(exc, "code", None), getattr(exc, "status", None)
            if isinstance(code, str) and isinstance(status, int):
                outcome = "conflict" if status == 409 else "refused"
                emit(ingest_finished, sender=func, outcome=outcome, code=code, stored=0, duplicates=0)
            raise
        emit(
            ingest_finished,
            sender=func,
            outcome="accepted",
            code="",
            stored=int(getattr(result, "stored", 0) or 0),
            duplicates=int(getattr(result, "duplicates", 0) or 0),
        )
        return result

    return wrapper


def instrument_assessment(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap an assessment service: its wall time goes to ``assessment_finished`` (the latency histogram).

    Only calls that return are timed: a crash is not a latency.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        result = func(*args, **kwargs)
        emit(assessment_finished, sender=func, seconds=time.perf_counter() - started)
        return result

    return wrapper
