"""Plain words for the engine's codes, so that a page says what went wrong and what it means for the turn."""

from __future__ import annotations

REASONS: dict[str, str] = {
    "storage_corruption": "A line of the journal is not one complete JSON record (a torn or damaged write). "
    "Nothing after it can be trusted until the journal is repaired.",
    "record_invalid": "A record lacks a field its kind requires, has a field of the wrong type, or holds a "
    "float, a duplicate key or a lone surrogate.",
    "run_mismatch": "A record names another run than the rest of the journal.",
    "lsn_gap": "The sequence numbers of a branch skip or repeat: a record is missing or duplicated.",
    "chain_broken": "A record's hash of its predecessor does not match: the chain of records was altered.",
    "schema_unsupported": "A record uses a schema version this engine does not know.",
    "schema_regression": "A version 1 record follows a version 2 record on the same timeline.",
    "kind_unknown": "A record has a kind this engine does not know.",
    "fork_invalid": "A rewind (fork) is malformed, or a record sits on a branch no fork created.",
    "checkpoint_mismatch": "A checkpoint's digest does not match the state folded from the records it covers.",
    "offset_mismatch": "The writer's expected last record differs from what the journal holds.",
    "unknown_turn": "A record names a turn before it was planned.",
    "lineage_missing": "The turn was planned without saying where it comes from (no lineage).",
    "lineage_conflict": "The turn was planned again with another lineage.",
    "phase_prefix_violation": "A phase was committed out of order, twice, skipped ahead, or is not in the plan.",
    "intent_unknown": "A readback names an intent that was never dispatched.",
    "intent_conflict": "An intent was dispatched again with another effect class or idempotency key.",
    "unsafe_redispatch": "An unsafe effect was sent again while its previous dispatch may have happened: "
    "a possible double effect.",
    "idempotency_key_missing": "An idempotent intent was dispatched without its idempotency key.",
    "status_phase_mismatch": "The turn was closed as completed with phases missing, or a record names it "
    "after its terminal record.",
    "effect_indeterminate": "An unsafe effect was sent out and no readback says whether it happened. "
    "Resuming could do it twice: a person must say whether it happened.",
    "repair_quarantined": "A journal repair set aside records of this turn (after the accepted prefix): it stays "
    "blocked, and no approval lifts it.",
    "operator_blocked": "An operator blocked it: nothing resumes it until an operator approves it.",
    "recovery_attempts_exceeded": "Recovery was attempted again and again without progress: parked until an "
    "operator approves it.",
    "recovery_diverged": "A recovery did otherwise than the gate planned (an action not planned, done twice, or "
    "planned and not done): held until an operator looks at its recovery audit and approves it.",
}

# A glyph beside every decision so that colour is never the only signal.
DECISION_ICONS: dict[str, str] = {
    "complete": "✓",
    "finalize": "◐",
    "resume": "↻",
    "blocked": "✖",
    "discarded": "⌀",
}

RESOLUTIONS: dict[str, str] = {
    "settled": "a readback (or your evidence) says what happened",
    "replay": "safe to run again",
    "reissue": "re-send with the same idempotency key",
    "indeterminate": "unknown whether it happened",
}


def reason_words(code: str | None) -> str:
    if not code:
        return ""
    return REASONS.get(code, code.replace("_", " "))

# The effective states (journals.models.TurnState): a glyph and what it means for the turn.
STATE_ICONS: dict[str, str] = {
    "resuming": "↻",
    "finalizing": "◐",
    "approved": "✓",
    "complete": "✓",
    "discarded": "⌀",
    "held_effect": "?",
    "held_review": "✖",
    "held_journal": "✖",
    "held_integrity": "✖",
    "blocked_operator": "✖",
    "parked": "⏸",
    "unassessed": "…",
}

STATES: dict[str, str] = {
    "resuming": "The gate lets it resume from its first uncommitted phase; only missing phases run.",
    "finalizing": "Every phase is committed; the gate lets it write its terminal record.",
    "approved": "An operator approved it: the gate lets it go on after its committed phases.",
    "complete": "The turn ended; nothing to do.",
    "discarded": "Planned only on a discarded branch: it is evidence, nothing may resume it.",
    "held_effect": "An effect may or may not have happened and nobody confirmed it. Nothing resumes the turn "
    "until an operator says, for each such intent, whether it happened.",
    "held_review": "The engine found something a person must look at; an operator may approve it.",
    "held_journal": "The journal itself is at fault: every turn of the run is held until the journal is "
    "repaired. No approval lifts it.",
    "held_integrity": "Stored records no longer match what was received: the run is held until an operator "
    "resolves the finding.",
    "blocked_operator": "An operator blocked it: nothing resumes it until an operator approves it.",
    "parked": "Recovery was attempted again and again without progress: parked until an operator approves it.",
    "unassessed": "Not yet assessed.",
}

# A held state whose reason changes what it means: (state, reason) -> words. "{repair}" is the repair's
# number when the page knows it.
REASON_STATES: dict[tuple[str, str], str] = {
    ("held_journal", "repair_quarantined"): "Set aside by repair #{repair}: the repair kept this turn's records "
    "out of the accepted journal, so the turn is held until the runtime re-sends them (a supersede repair). "
    "No approval lifts it.",
    ("held_review", "recovery_diverged"): "A recovery did otherwise than the gate planned: held until an "
    "operator looks at its recovery audit and approves it.",
}

# The next step a list shows beside a state the gate lets go on. A held state shows its whole remedy instead
# (journals/remedies.py, the one table of what lifts each hold).
NEXT_STEPS: dict[str, str] = {
    "resuming": "resume",
    "finalizing": "write terminal",
    "approved": "goes on",
}


def state_words(state: str | None, reason: str | None = None, repair: int | None = None) -> str:
    """What a turn's state means; its reason's own words where the reason changes the meaning."""
    special = REASON_STATES.get((state or "", reason or ""))
    if special is not None:
        if repair is None:
            return special.replace("repair #{repair}", "a journal repair")
        return special.replace("{repair}", str(repair))
    return STATES.get(state or "unassessed", state or "")


# A run's status (journals.models.RunStatus): a glyph, and what it means for the run (docs/state.md).
RUN_STATUS_ICONS: dict[str, str] = {"blocked": "✖", "needs_attention": "!", "running": "↻", "done": "✓"}
RUN_STATUSES: dict[str, str] = {
    "blocked": "The journal itself is at fault: no turn goes on until it is repaired or its finding resolved.",
    "needs_attention": "A turn is held: the run goes no further until a person acts.",
    "running": "Turns go on, or records wait for their assessment.",
    "done": "Every turn is complete or discarded, and every record is assessed.",
}

# Short words for every code a page shows, so that a label reads as words with the code beside it.
KINDS: dict[str, str] = {
    "turn_planned": "turn planned",
    "phase_committed": "phase committed",
    "intent_dispatched": "intent dispatched",
    "effect_observed": "readback",
    "turn_terminal": "turn ended",
    "fork": "fork (rewind)",
    "checkpoint": "checkpoint",
}

SHORT_REASONS: dict[str, str] = {
    "storage_corruption": "damaged journal line",
    "record_invalid": "malformed record",
    "run_mismatch": "record of another run",
    "lsn_gap": "missing or repeated record",
    "chain_broken": "hash chain broken",
    "schema_unsupported": "unknown schema version",
    "schema_regression": "schema version went back",
    "kind_unknown": "unknown record kind",
    "fork_invalid": "malformed fork",
    "checkpoint_mismatch": "checkpoint does not match",
    "offset_mismatch": "writer and store disagree on the last record",
    "unknown_turn": "record of an unplanned turn",
    "lineage_missing": "no lineage",
    "lineage_conflict": "conflicting lineage",
    "phase_prefix_violation": "phase out of order",
    "intent_unknown": "readback of an unknown intent",
    "intent_conflict": "intent re-sent differently",
    "unsafe_redispatch": "unsafe effect re-sent",
    "idempotency_key_missing": "no idempotency key",
    "status_phase_mismatch": "ended with phases missing",
    "effect_indeterminate": "unknown whether an effect happened",
    "operator_blocked": "held by an operator",
    "recovery_attempts_exceeded": "too many recovery attempts",
    "repair_quarantined": "set aside by a journal repair",
    "recovery_diverged": "recovery did otherwise than planned",
}

# Every kind of the operator trail (trail.models.OPERATOR_ACTION_KINDS): what the person or token did.
ACTIONS: dict[str, str] = {
    "turn_approve": "approved the turn",
    "turn_block": "blocked the turn",
    "turn_park": "parked the turn",
    "turn_edit": "edited the turn's notes",
    "evidence_record": "gave evidence",
    "turn_assign": "assigned the turn",
    "turn_unassign": "released the turn",
    "notification_channel_change": "changed a team's notification channel",
    "notification_rule_change": "changed a team's notification rule",
    "api_token_create": "created a runtime token",
    "api_token_revoke": "revoked a runtime token",
    "finding_acknowledge": "acknowledged a finding",
    "finding_resolve": "resolved a finding",
    "retention_remove": "removed a run after exporting it",
    "run_export": "exported a run",
    "package_upload": "uploaded a package",
    "package_requeue": "queued a package again",
    "webhook_create": "added a webhook",
    "webhook_change": "changed a webhook",
    "webhook_delete": "removed a webhook",
    "delivery_resend": "resent a webhook delivery",
    "schedule_create": "added a schedule",
    "schedule_change": "changed a schedule",
    "schedule_delete": "removed a schedule",
    "user_create": "added a user",
    "user_change": "changed a user",
    "user_delete": "removed a user",
    "role_create": "added a role",
    "role_change": "changed a role",
    "role_delete": "removed a role",
    "journal_repair": "repaired a journal",
    "trail_export": "exported the trail",
    "effect_map_create": "saved a new effect map",
    "effect_map_update": "saved an effect map's new version",
    "effect_map_attach": "attached an effect map",
    "history_upload": "uploaded another runtime's history",
    "history_requeue": "queued a history's import again",
    "team_create": "added a team",
    "team_change": "changed a team",
    "team_delete": "removed a team",
}

# What the scheduled audits find (recovery.findings.models.KINDS).
FINDINGS: dict[str, str] = {
    "lost_turn": "turn gone quiet",
    "chain_broken": "hash chain broken",
    "storage_corruption": "damaged journal line",
    "decision_changed": "engine now decides otherwise",
    "assessment_diverged": "stored assessment differs from a fresh fold",
    "blocked_turn_unclaimed": "held turn nobody took",
    "assessment_missed": "assessment never ran",
    "trail_broken": "audit trail altered",
}

# How a recovery did otherwise than it planned (recovery.recovery_audits.models.DIVERGENCE_CODES).
DIVERGENCES: dict[str, str] = {
    "unplanned_action": "done but not planned",
    "repeated_action": "done more than once",
    "planned_action_missing": "planned but not done",
}

# How an operator repaired a journal (recovery.repair.models.REPAIR_KINDS).
REPAIRS: dict[str, str] = {
    "accept_prefix": "accepted the records up to a point",
    "supersede": "replaced by a corrected journal",
}

OTHER: dict[str, str] = {
    "unassessed": "not assessed",
    "lsn": "position on the branch",
}


def words_for(code: str | None) -> str:
    """A code in plain words (the code itself, spaced, when it has none yet)."""
    if not code:
        return ""
    for table in (KINDS, SHORT_REASONS, ACTIONS, FINDINGS, DIVERGENCES, REPAIRS, OTHER):
        if code in table:
            return table[code]
    return code.replace("_", " ")
