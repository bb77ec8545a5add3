"""Operational events (kernel.events) → webhook deliveries.

Each receiver names the event's subject (what makes two sends of the signal the same event) and the
payload. Payloads carry identifiers, codes and counts; anything that came from a record goes through the
engine's ``redact`` in delivery._body.
"""

from __future__ import annotations

from typing import Any

from kernel import events

from . import delivery, notices


def on_turn_blocked(
    run_id: str = "",
    turn_id: str = "",
    reason: str | None = None,
    reason_line: int | None = None,
    assessment_id: int | None = None,
    state: str | None = None,
    **_: Any,
) -> None:
    data = {"run": run_id, "turn": turn_id, "reason": reason, "reason_line": reason_line, "assessment": assessment_id}
    if state is not None:
        data["state"] = state  # the effective state the turn is now held in (recovery/state.py)
    delivery.enqueue(
        "turn.blocked",
        (run_id, turn_id, assessment_id if assessment_id is not None else reason, state or ""),
        data,
    )


def on_turn_hold_changed(run_id: str = "", turns: list[dict[str, Any]] | None = None, **_: Any) -> None:
    """The team channels' notices of the turns (notifications.notices): opened, escalated or resolved."""
    notices.notices_turns_changed(run_id=run_id, turn_ids=[str(t.get("turn_id", "")) for t in turns or []])


def on_finding_opened(
    finding_id: Any = None,
    kind: str = "",
    run_id: str | None = None,
    turn_id: str | None = None,
    summary: str = "",
    **_: Any,
) -> None:
    delivery.enqueue(
        "finding.opened",
        (finding_id, kind),
        {"finding": finding_id, "kind": kind, "run": run_id, "turn": turn_id, "summary": summary},
    )


def on_crash_loop_parked(
    run_id: str = "",
    turn_id: str = "",
    attempts: int | None = None,
    reason: str = "",
    decision_id: int | None = None,
    **_: Any,
) -> None:
    delivery.enqueue(
        "crash_loop.parked",
        (run_id, turn_id, decision_id if decision_id is not None else attempts),
        {"run": run_id, "turn": turn_id, "attempts": attempts, "reason": reason, "gate_decision": decision_id},
    )


def on_package_rejected(
    code: str = "", package: Any = None, run_id: str | None = None, detail: str = "", **_: Any
) -> None:
    delivery.enqueue(
        "package.rejected",
        (package, code),
        {"package": package, "code": code, "run": run_id, "detail": detail},
    )


def connect() -> None:
    events.turn_blocked.connect(on_turn_blocked, weak=False, dispatch_uid="loopx-webhook-turn-blocked")
    events.turn_hold_changed.connect(on_turn_hold_changed, weak=False, dispatch_uid="loopx-notice-hold-changed")
    events.finding_opened.connect(on_finding_opened, weak=False, dispatch_uid="loopx-webhook-finding")
    events.crash_loop_parked.connect(on_crash_loop_parked, weak=False, dispatch_uid="loopx-webhook-crash-loop")
    events.package_rejected.connect(on_package_rejected, weak=False, dispatch_uid="loopx-webhook-package")
