"""The scheduled audits. Each is a service called by a thin task in audits/tasks.py, bounded per
pass (``limit``) so that one pass never outgrows its task's time limit, and idempotent: running one twice
opens nothing twice (findings are unique per unresolved fact) and repairs nothing silently.

- ``audit_assessment_sweep``: committed batches whose assessment was never enqueued or whose task was lost.
- ``audit_stale_turns``: unfinished turns with no record for a while: re-assess, then a ``lost_turn``.
- ``audit_chain_verification``: re-verify stored records from a per-run cursor (audits/chain.py).
- ``audit_engine_change``: runs last assessed by another engine/projection version are re-assessed.
- ``audit_unclaimed_blocked_turns``: blocked turns nobody acted on: ``blocked_turn_unclaimed`` with age.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.utils import timezone

from audits.chain import chain_rewind_oldest, chain_verify_run
from journals.assessment_flag import assessment_request, assessments_lease_expired, assessments_overdue
from journals.models import JournalRecord, PendingAssessment, Run, Turn, TurnEffective, TurnState
from recovery import services as recovery_services
from recovery.background import assessment_enqueue
from recovery.findings.models import UNRESOLVED, Finding
from recovery.findings.services import finding_clear, finding_open_or_touch, repair_covers
from recovery.models import Assessment, TurnAssessment
from recovery.output import assessment_output_digest, output_digest
from recovery.repair.models import repair_in_force
from recovery.selectors import RUN_LEVEL_CODES
from recovery.services import assessment_refresh
from recovery.state import WAITING, picture_rows, projected_assessment
from trail.chain import trail_verify

logger = logging.getLogger(__name__)


@dataclass
class AuditReport:
    """What one pass did, for the task's log line and the tests."""

    audit: str
    checked: int = 0
    counts: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"audit": self.audit, "checked": self.checked, **dict(sorted(self.counts.items()))}


def _seconds(value: timedelta) -> int:
    return int(value.total_seconds())


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# --- the assessment sweep -------------------------------------------------------------------------------


def audit_assessment_sweep(*, grace: timedelta, republish_after: timedelta, limit: int) -> AuditReport:
    """Publish what the queue owes and nobody is doing.

    1. A raised flag whose publish never happened (``enqueued_at`` older than ``requested_at``; a crash
       between commit and publish, or a broker that was down): publish, and an ``assessment_missed``.
    2. A raised flag published long ago and still raised (the broker lost the message): publish again.
    3. A lowered flag whose task's lease ran out before it finished (its worker died, or Redis lost it):
       raise it again, which publishes.
    4. A run whose committed prefix is ahead of its newest assessment while no flag is raised and no task
       is in flight (a task that failed for good, a message lost after the task lowered the flag, runs
       from before the queue existed): raise the flag, which publishes, and an ``assessment_missed``.
    """
    report = AuditReport("assessment_sweep")
    now = timezone.now()
    for run_pk, run_id, never in assessments_overdue(grace=grace, republish_after=republish_after, limit=limit):
        report.checked += 1
        if never:
            run = Run.objects.get(pk=run_pk)
            pending = PendingAssessment.objects.get(run_id=run_pk)
            finding_open_or_touch(
                kind="assessment_missed",
                run=run,
                fact_key=f"seq:{pending.requested_seq}",
                evidence={
                    "cause": "committed but never enqueued",
                    "requested_seq": pending.requested_seq,
                    "requested_at": _iso(pending.requested_at),
                    "waited_seconds": _seconds(now - pending.requested_at) if pending.requested_at else None,
                },
            )
        report.counts["published" if assessment_enqueue(run_pk=run_pk, run_id=run_id) else "publish_failed"] += 1
        report.counts["never_enqueued" if never else "republished"] += 1

    # A lease that ran out: the task that lowered the flag is gone (its worker killed, its message lost with
    # the broker) without finishing. Raised again, which publishes; no finding, as for a lost message. A
    # task that failed for good is asked again at its time limit, and that is an incident.
    expired = dict(assessments_lease_expired(now=now, limit=limit))
    for run in Run.objects.filter(pk__in=list(expired)):
        report.checked += 1
        if expired[run.pk]:
            finding_open_or_touch(
                kind="assessment_missed",
                run=run,
                fact_key=f"seq:{run.last_seq}",
                evidence={
                    "cause": "the assessment failed (see the worker's log); asked again",
                    "committed_seq": run.last_seq,
                    "assessed_seq": run.assessed_seq,
                },
            )
        assessment_request(run=run)  # raises it unless a batch already did (then its own message is out)
        report.counts["assessment_failed" if expired[run.pk] else "lease_expired"] += 1

    behind = list(
        Run.objects.filter(record_count__gt=0, updated_at__lt=now - grace)
        .filter(Q(assessed_seq__isnull=True) | Q(assessed_seq__lt=F("last_seq")))
        .exclude(pending_assessment__pending=True)
        .order_by("updated_at")[:limit]
    )
    flags = {p.run_id: p for p in PendingAssessment.objects.filter(run_id__in=[r.pk for r in behind])}
    for run in behind:
        flag = flags.get(run.pk)
        if flag is not None and _in_flight(flag, now):
            report.counts["in_flight"] += 1
            continue
        report.checked += 1
        finding_open_or_touch(
            kind="assessment_missed",
            run=run,
            fact_key=f"seq:{run.last_seq}",
            evidence={
                "cause": "no assessment of the committed prefix and no task in flight",
                "committed_seq": run.last_seq,
                "assessed_seq": run.assessed_seq,
                "committed_at": _iso(run.updated_at),
            },
        )
        assessment_request(run=run)
        report.counts["requested"] += 1
    return report


def _in_flight(flag: PendingAssessment, now: datetime) -> bool:
    """A task holds the flag's lease and its deadline has not passed: it is still assessing (not lost)."""
    return flag.lease_expires_at is not None and flag.lease_expires_at > now


# --- stale turns ----------------------------------------------------------------------------------------

# Only a turn the gate lets go on (or not yet assessed) is the runtime's to finish: a held turn waits for a
# person (the escalation audit's business), a done one for nobody.
_HELD_OR_DONE = ("hold", "done")


def _last_record(turn: Turn) -> tuple[int, datetime] | None:
    row = (
        JournalRecord.objects.filter(run_id=turn.run_id, turn=turn.turn_id)
        .order_by("-seq")
        .values_list("seq", "received_at")
        .first()
    )
    return (row[0], row[1]) if row else None


def _lost(turn: Turn, cutoff: datetime) -> tuple[int, datetime] | None:
    """(last seq, its receipt time) when the turn is unfinished and silent since before ``cutoff``."""
    if turn.status != "open":
        return None
    if TurnEffective.objects.filter(turn_id=turn.pk, gate__in=_HELD_OR_DONE).exists():
        return None
    last = _last_record(turn)
    return last if last is not None and last[1] < cutoff else None


def audit_stale_turns(*, idle: timedelta, limit: int) -> AuditReport:
    """Unfinished turns (no terminal record; the gate lets them go on) with no record received for
    ``idle``: the run is re-assessed first (a terminal record may be waiting in an unassessed batch), and
    if the turn is still unfinished, a ``lost_turn`` finding. A lost turn that writes again is cleared."""
    report = AuditReport("stale_turns")
    now = timezone.now()
    cutoff = now - idle

    refreshed: set[int] = set()

    def refresh_once(run: Run) -> None:
        # A terminal record may wait in a batch no task has assessed yet: decide on the committed prefix.
        if run.pk not in refreshed:
            assessment_refresh(run=run)  # idempotent: a no-op when the prefix is already assessed
            refreshed.add(run.pk)

    # Findings already open: cleared when the turn moved on, otherwise touched (idle time grows).
    for finding in Finding.objects.filter(kind="lost_turn", state__in=UNRESOLVED).select_related("turn", "run"):
        turn = finding.turn
        if turn is not None:
            assert finding.run is not None  # a turn's finding names its run
            refresh_once(finding.run)
            turn.refresh_from_db()
        last = _lost(turn, cutoff) if turn is not None else None
        if last is None:
            finding_clear(finding=finding, audit=report.audit, reason="the turn finished, was decided or wrote again")
            report.counts["cleared"] += 1
        else:
            assert turn is not None  # a last record is only found for a turn
            finding_open_or_touch(
                kind="lost_turn", run=finding.run, turn=turn, evidence=_lost_evidence(turn, last, now)
            )
            report.counts["still_lost"] += 1

    latest_record = JournalRecord.objects.filter(run_id=OuterRef("run_id"), turn=OuterRef("turn_id")).order_by("-seq")
    candidates = (
        # updated_at moves whenever an assessment changes the turn's picture, which a new record does; it
        # is only a cheap pre-filter (indexed), the last record's receipt time decides.
        Turn.objects.filter(status="open", updated_at__lt=cutoff)
        .exclude(effective__gate__in=_HELD_OR_DONE)
        .exclude(Exists(Finding.objects.filter(turn=OuterRef("pk"), kind="lost_turn", state__in=UNRESOLVED)))
        .annotate(last_received=Subquery(latest_record.values("received_at")[:1]))
        .filter(last_received__lt=cutoff)
        .select_related("run")
        .order_by("updated_at", "id")[:limit]
    )
    for turn in list(candidates):
        report.checked += 1
        refresh_once(turn.run)
        turn.refresh_from_db()
        last = _lost(turn, cutoff)
        if last is None:
            report.counts["not_lost_after_reassessment"] += 1
            continue
        finding_open_or_touch(kind="lost_turn", run=turn.run, turn=turn, evidence=_lost_evidence(turn, last, now))
        report.counts["opened"] += 1
    return report


def _lost_evidence(turn: Turn, last: tuple[int, datetime], now: datetime) -> dict[str, Any]:
    return {
        "last_seq": last[0],
        "last_record_at": _iso(last[1]),
        "idle_seconds": _seconds(now - last[1]),
        "decision": turn.decision,
        "resume_from": turn.resume_from,
        "completed_phases": list(turn.completed_phases),
    }


# --- chain verification ---------------------------------------------------------------------------------


def audit_chain_verification(
    *, record_budget: int, full_passes: int, full_pass_every: timedelta, limit: int
) -> AuditReport:
    """Re-verify the records stored since each run's cursor (at most ``record_budget`` records per pass),
    then rewind the cursors of up to ``full_passes`` fully verified runs not read in full for
    ``full_pass_every``, so that over successive passes every stored record is read again, not only the
    new ones."""
    report = AuditReport("chain_verification")
    runs = (
        Run.objects.filter(last_seq__gt=0)
        # The isnull branch makes the join an outer one: runs never verified have no cursor yet.
        .filter(Q(chain_cursor__isnull=True) | Q(last_seq__gt=F("chain_cursor__verified_seq")))
        .order_by(F("chain_cursor__verified_at").asc(nulls_first=True), "id")[:limit]
    )
    budget = record_budget
    for run in runs:
        if budget <= 0:
            break
        result = chain_verify_run(run=run, max_records=budget)
        budget -= result.records
        report.checked += 1
        report.counts["records"] += result.records
        repair = repair_in_force(run)
        for problem in result.problems:
            covered = repair is not None and repair_covers(repair, problem.evidence.get("seq"))
            if problem.kind == "chain_broken" and covered:
                # The break is among the records a journal repair set aside: the operator decided it.
                report.counts["chain_broken_repaired"] += 1
                continue
            _, opened = finding_open_or_touch(
                kind=problem.kind, run=run, fact_key=problem.fact_key, evidence=problem.evidence
            )
            report.counts[f"{problem.kind}_{'opened' if opened else 'seen'}"] += 1
    report.counts["rewound"] = chain_rewind_oldest(count=full_passes, min_age=full_pass_every)
    return report


# --- the operator trail ----------------------------------------------------------------------------------


def audit_trail_verification() -> AuditReport:
    """Re-verify the operator trail's chain (trail/chain.py) from its first row: each break is a
    ``trail_broken`` finding of no run, which only a person resolves."""
    report = AuditReport("trail_verification")
    result = trail_verify()
    report.checked = result.rows
    for problem in result.problems:
        _, opened = finding_open_or_touch(
            kind="trail_broken", run=None, fact_key=problem.fact_key, evidence=problem.evidence
        )
        report.counts["trail_broken_opened" if opened else "trail_broken_seen"] += 1
    return report


# --- engine change --------------------------------------------------------------------------------------


def audit_engine_change(*, limit: int) -> AuditReport:
    """Runs whose newest assessment was made by another engine or projection version get a new one; the
    old one stays beside it. A turn the new version decides differently for the same prefix and evidence
    is a ``decision_changed`` finding (what the operator approved may no longer be what the engine says)."""
    report = AuditReport("engine_change")
    latest = Assessment.objects.filter(run=OuterRef("pk")).order_by("-id")
    runs = (
        Run.objects.annotate(
            latest_engine=Subquery(latest.values("engine_version")[:1]),
            latest_projection=Subquery(latest.values("projection_version")[:1]),
        )
        .filter(latest_engine__isnull=False)
        # Read at call time: the versions of the code this worker runs.
        .exclude(latest_engine=recovery_services.ENGINE_VERSION, latest_projection=recovery_services.PROJECTION_VERSION)
        .order_by("id")[:limit]
    )
    for run in runs:
        report.checked += 1
        old = Assessment.objects.filter(run=run).order_by("-id").first()
        new = assessment_refresh(run=run)
        report.counts["reassessed"] += 1
        if old is None or old.prefix_key != new.prefix_key or old.evidence_digest != new.evidence_digest:
            continue  # the journal or the evidence moved too: a difference would not be the engine's
        # Each turn's row in force under each (rows are written only where a turn changed).
        before = {r.turn_id: r for r in picture_rows(run_id=run.pk, through=old.pk)}
        for row in picture_rows(run_id=run.pk, through=new.pk).select_related("turn"):
            was = before.get(row.turn_id)
            if was is None or _picture(was) == _picture(row):
                continue
            finding_open_or_touch(
                kind="decision_changed",
                run=run,
                turn=row.turn,
                fact_key=f"{old.engine_version}/{old.projection_version}->{new.engine_version}/{new.projection_version}",
                evidence={
                    "prefix_key": new.prefix_key,
                    "old": {
                        "assessment": old.pk,
                        "engine_version": old.engine_version,
                        "decision": was.decision,
                        "reason": was.reason,
                        "resume_from": was.resume_from,
                    },
                    "new": {
                        "assessment": new.pk,
                        "engine_version": new.engine_version,
                        "decision": row.decision,
                        "reason": row.reason,
                        "resume_from": row.resume_from,
                    },
                },
            )
            report.counts["decision_changed"] += 1
    return report


def _picture(row: TurnAssessment) -> tuple[str, str | None, str | None]:
    return row.decision, row.reason, row.resume_from


# --- re-fold ---------------------------------------------------------------------------------------------

REFOLD_SHOWN = 20  # differing turns a finding names; the count says how many there were


def audit_refold(*, sample: int) -> AuditReport:
    """Fold a sample of runs again, whole and from nothing, and compare with the assessment the run shows:
    its output (against the digest it was stored with) and every turn's row in force under it. An
    assessment reads only the records after its fold snapshot and writes rows only for the turns that
    changed; this checks that both still add up to what the engine says of the whole prefix. Any difference
    is an ``assessment_diverged`` finding naming the run. A run whose inputs moved since (a batch not yet
    assessed, new evidence) is left for a later pass: its stored assessment is not of the current inputs.
    The sample is a window of runs from a random start, so that every run comes round."""
    report = AuditReport("refold")
    runs = Run.objects.filter(assessed_seq__isnull=False).order_by("pk")
    top = runs.order_by("-pk").values_list("pk", flat=True).first()
    if top is None or sample <= 0:
        return report
    start = random.randint(1, top)  # noqa: S311 - a sample's start, not a secret
    window = list(runs.filter(pk__gte=start)[:sample])
    window += list(runs.filter(pk__lt=start)[: sample - len(window)])
    for run in window:
        report.checked += 1
        report.counts[_refold_one(run)] += 1
    return report


def _refold_one(run: Run) -> str:
    stored = projected_assessment(run)
    inputs = recovery_services.assessment_inputs(run=run)
    if stored is None or any(getattr(stored, k) != v for k, v in inputs.identity.items() if k != "run"):
        return "moved"
    result = recovery_services.assessment_fold(inputs, whole=True).result
    output = recovery_services.assessment_output(inputs, result)
    fresh = output_digest(assessment=stored, output=output)
    kept = assessment_output_digest(assessment=stored)
    output_differs = fresh != stored.output_digest or kept != fresh
    want = recovery_services.assessment_picture(run=run, result=result)
    have = recovery_services.assessment_picture_stored(assessment=stored)
    turns = sorted(t for t in want.keys() | have.keys() if want.get(t) != have.get(t))
    if not output_differs and not turns:
        return "agreed"
    finding_open_or_touch(
        kind="assessment_diverged",
        run=run,
        fact_key=f"assessment:{stored.pk}",
        evidence={
            "assessment": stored.pk,
            "prefix_key": stored.prefix_key,
            "output_differs": output_differs,
            "turns_differing": len(turns),
            "turns": turns[:REFOLD_SHOWN],
        },
    )
    return "diverged"


# --- unclaimed held turns ------------------------------------------------------------------------------


def audit_unclaimed_blocked_turns(*, older_than: timedelta, limit: int) -> AuditReport:
    """Turns that have waited for a person for longer than ``older_than`` (their effective state is a
    waiting one: recovery.state.WAITING; an operator's own block is owned by that operator): an escalation
    finding carrying the age. A run-level reason holds every turn of the run with one fact, so it is one
    finding for the run; a turn-level reason is one per turn. Acknowledging the finding is how an operator
    claims it; the audit clears it only once the turn is really no longer waiting for that reason."""
    report = AuditReport("unclaimed_blocked_turns")
    now = timezone.now()
    cutoff = now - older_than

    for finding in Finding.objects.filter(kind="blocked_turn_unclaimed", state__in=UNRESOLVED).select_related(
        "turn", "run"
    ):
        still = _still_waiting(finding, cutoff)
        if still is not None:
            finding_clear(finding=finding, audit=report.audit, reason=still)
            report.counts["cleared"] += 1

    waiting = (
        TurnEffective.objects.filter(state__in=sorted(WAITING), since__lt=cutoff)
        .select_related("turn", "run")
        .order_by("since", "turn_id")
    )
    run_level_seen: set[tuple[int, str]] = set()
    for effective in waiting.iterator(chunk_size=500):
        if report.checked >= limit:
            break
        turn, reason = effective.turn, effective.reason or "blocked"
        report.checked += 1
        age = _seconds(now - effective.since)
        since = _iso(effective.since)
        common = {"reason": reason, "state": effective.state, "blocked_since": since, "age_seconds": age}
        if reason in RUN_LEVEL_CODES or effective.state == "held_integrity":
            if (effective.run_id, reason) in run_level_seen:
                continue
            run_level_seen.add((effective.run_id, reason))
            held = TurnEffective.objects.filter(run_id=effective.run_id, gate="hold").count()
            finding_open_or_touch(
                kind="blocked_turn_unclaimed",
                run=effective.run,
                fact_key=reason,
                evidence={**common, "level": "run", "turns_blocked": held},
            )
        else:
            finding_open_or_touch(
                kind="blocked_turn_unclaimed",
                run=effective.run,
                turn=turn,
                fact_key=reason,
                evidence={**common, "level": "turn"},
            )
        report.counts["escalated"] += 1
    return report


def _still_waiting(finding: Finding, cutoff: datetime) -> str | None:
    """None while the finding's fact still keeps a turn waiting; otherwise why it cleared, in words."""
    # The plugin refuses None for an exact lookup, which Django reads as IS NULL.
    states = TurnEffective.objects.filter(run_id=finding.run_id, reason=finding.fact_key)  # type: ignore[misc]
    if finding.turn_id is not None:
        states = states.filter(turn_id=finding.turn_id)
    if states.filter(state__in=sorted(WAITING), since__lt=cutoff).exists():
        return None
    if finding.turn_id is None:
        return "no turn of the run waits for a person for this reason any more"
    now = TurnEffective.objects.filter(turn_id=finding.turn_id).first()
    if now is None:
        return "the turn is no longer assessed"
    return f"the turn no longer waits for a person for this reason: it is {TurnState(now.state).label}"
