"""Operator evidence tied to the dispatch it was about (status recovery layer).

Found by the composition gate (seed 76 over HTTP): an operator says the first send of an unsafe intent did
not happen; the runtime records that as a `failed` readback and sends again; it crashes before the second
send's readback. Bare evidence binds to the first dispatch without a definitive readback, which is now the
second send, so the old finding would let the new send resolve `replay` although the world may have seen
it. Evidence given with its dispatch number never outlives the dispatch it was about.
"""

from __future__ import annotations

from engine import Decision, Evidence, assess
from engine.writer import JournalWriter


def _journal(*, readback_of_first: str | None) -> list[bytes]:
    w = JournalWriter("run-evidence")
    w.plan("t", "job")
    w.commit("t", "plan")
    w.dispatch("t", "charge", "unsafe")
    if readback_of_first is not None:
        w.observe("t", "charge", readback_of_first)
    w.dispatch("t", "charge", "unsafe")  # the retry the operator's finding allowed
    return w.lines


def _turn(lines: list[bytes], evidence: dict) -> tuple[str, str | None, str]:
    turn = assess(lines, evidence=evidence).turns[0]
    return turn.decision.value, turn.reason, turn.intents[0].resolution


def test_evidence_about_the_first_send_does_not_settle_the_second() -> None:
    lines = _journal(readback_of_first="failed")
    exact = {("t", "charge"): (Evidence.NOT_HAPPENED, 1)}
    assert _turn(lines, exact) == (Decision.BLOCKED.value, "effect_indeterminate", "indeterminate")


def test_exact_evidence_still_makes_the_one_retry_legal_without_a_readback() -> None:
    # A runtime that never journals the operator's finding: the retry is legal because of it, and only it.
    lines = _journal(readback_of_first=None)
    exact = {("t", "charge"): (Evidence.NOT_HAPPENED, 1)}
    decision, reason, resolution = _turn(lines, exact)
    assert (decision, reason, resolution) == (Decision.BLOCKED.value, "effect_indeterminate", "indeterminate")
    # Without any evidence the same retry is the double effect.
    assert _turn(lines, {})[1] == "unsafe_redispatch"


def test_evidence_about_the_second_send_resolves_it() -> None:
    lines = _journal(readback_of_first="failed")
    both = {("t", "charge"): [(Evidence.NOT_HAPPENED, 1), (Evidence.HAPPENED, 2)]}
    assert _turn(lines, both) == (Decision.RESUME.value, None, "settled")


def test_exact_evidence_never_overrides_an_observed_outcome() -> None:
    lines = _journal(readback_of_first="succeeded")
    exact = {("t", "charge"): (Evidence.NOT_HAPPENED, 1)}
    assert _turn(lines, exact)[1] == "unsafe_redispatch"


def test_bare_evidence_keeps_the_command_line_meaning() -> None:
    # `--evidence charge=not_happened` on a journal with one unanswered send: one retry allowed.
    w = JournalWriter("run-bare")
    w.plan("t", "job")
    w.dispatch("t", "charge", "unsafe")
    assert _turn(w.lines, {"charge": "not_happened"})[2] == "replay"
