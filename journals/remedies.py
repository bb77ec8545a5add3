"""What a held turn needs, step by step: the one table of remedies every page, queue and API answer reads.

A held state (journals.models.TurnState) names why the gate holds a turn; its remedy names everything a
person does, in order, before the turn may go on. A reason that needs another remedy than its state's has
its own row. The table lives beside the states (below the recovery app) so that the API's state row, the
gate's answer (recovery.state.StateValue), the console and the notices all say the same steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from journals.models import TurnState

# Every held state's remedy, each an ordered list of steps. "{intent}" steps repeat for each intent whose
# outcome nobody confirmed (the state's ``needs_evidence``).
REMEDIES: dict[str, tuple[str, ...]] = {
    TurnState.HELD_EFFECT: (
        "record what happened to intent {intent} (evidence: happened or not happened)",
        "approve the turn",
    ),
    TurnState.HELD_REVIEW: ("review what the engine found", "approve the turn or block it"),
    TurnState.HELD_JOURNAL: ("repair the journal", "review the turn's state once the run is assessed again"),
    TurnState.HELD_INTEGRITY: ("resolve the run's integrity finding", "repair the journal"),
    TurnState.BLOCKED_OPERATOR: ("ask the operator who blocked it why", "approve the turn when it may go on"),
    TurnState.PARKED: ("look at why recovery keeps failing (its recovery audits)", "approve the turn"),
}

# Reasons whose remedy is not their state's (the reasons' own codes: recovery/state.py).
REASON_REMEDIES: dict[str, tuple[str, ...]] = {
    # A repair set the turn's records aside: only the records themselves, re-sent, let it be decided again.
    "repair_quarantined": (
        "have the runtime re-send the journal with this turn's records",
        "apply it as a supersede repair",
        "review the turn's state once the run is assessed again",
    ),
    "recovery_diverged": (
        "look at what the recovery did otherwise than planned (its recovery audit)",
        "approve the turn or block it",
    ),
}

# With no intent named (an older stored state), the evidence step says so in general.
_ANY_INTENT = "each unconfirmed intent"


def remedy_steps(*, state: str | None, reason: str | None, needs_evidence: Sequence[str] = ()) -> list[str]:
    """The steps that lift the hold of a turn in ``state`` for ``reason``, in order (empty: not held)."""
    steps = REASON_REMEDIES.get(reason or "") or REMEDIES.get(str(state or ""), ())
    out: list[str] = []
    for step in steps:
        if "{intent}" not in step:
            out.append(step)
            continue
        if not needs_evidence:
            out.append(step.replace("intent {intent}", _ANY_INTENT))
        out.extend(step.replace("{intent}", intent) for intent in needs_evidence)
    return out


def remedy_text(steps: Sequence[str]) -> str:
    """The steps as one sentence: "resolve the run's integrity finding, then repair the journal"."""
    return ", then ".join(steps)
