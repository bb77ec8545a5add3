"""The journal store through the ORM (journals/store.py): ingest and the three hot reads on any database.

It is the store on SQLite, and on PostgreSQL the general path that journals/postgres.py hands every batch
its COPY path does not take (a duplicate, a conflict, a gap to fill, a line not canonical). The list
pages' ORM rows (``turn_rows``) and a turn's lookup (``turn_lookup``) live here as well: journals.selectors
and the views read them on both databases.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import CharField, F, Prefetch, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Cast
from django.utils import timezone

from journals.access import EVERY_RUN, RunScope
from journals.assessment_flag import assessment_request
from journals.intake import (
    IngestResult,
    PlannedTurn,
    Prepared,
    Projected,
    batch_turns,
    check_expect,
    check_fenced,
    check_fencing_required,
    conflict,
    door_check,
    fencing_current,
    finish_checkpoints,
    prepare_all,
    project,
    record_digest,
    run_lock,
)
from journals.models import STATE_ROW_FIELDS, TURN_ROW_FIELDS, ApiToken, Branch, Intent, JournalRecord, Phase, Run, Turn
from journals.serializers import TurnDetailSerializer
from journals.storable import usable_key


class OrmStore:
    """Ingest and the hot reads through the ORM: the same SQL on SQLite and PostgreSQL."""

    def records_ingest(
        self, *, run_id: str, lines: list[bytes], fencing: Mapping[str, int], expect: Mapping[int, int]
    ) -> IngestResult:
        """Store the split batch ``lines`` atomically, or raise IngestError with nothing stored. Every batch
        is parsed whole before the transaction; duplicates are told apart from conflicts by the stored digests."""
        prepared = prepare_all(lines, run_id)

        # Within the batch: a repeat of the same bytes is a duplicate, other bytes at the same place a conflict.
        fresh: dict[tuple[int, int], Prepared] = {}
        batch_duplicates = 0
        for rec in prepared:
            seen = fresh.get((rec.branch, rec.lsn))
            if seen is None:
                fresh[(rec.branch, rec.lsn)] = rec
            elif record_digest(seen) == record_digest(rec):
                batch_duplicates += 1
            else:
                raise conflict(rec, record_digest(seen))

        with transaction.atomic():
            run, branches = run_lock(run_id)
            current = fencing_current(run, batch_turns(prepared), fencing)
            check_fenced(current, fencing)
            check_expect(branches, expect)
            duplicates = batch_duplicates + _drop_stored(run, branches, fresh)
            new = list(fresh.values())  # dicts keep insertion order: file order of the batch
            check_fencing_required(current, batch_turns(new), fencing)
            violations = door_check(run, branches, new, expect, run.last_seq)
            now = timezone.now()
            first_seq = run.last_seq + 1 if new else None
            if new:
                beyond = _stored_beyond_gaps(run, branches, new)
                _insert(run, new, now)
                _finish(run, new, project(run, branches, new, beyond, now))
        return IngestResult(
            run=run,
            stored=len(new),
            duplicates=duplicates,
            first_seq=first_seq,
            last_seq=run.last_seq,
            branches=sorted(branches.values(), key=lambda b: b.number),
            violations=violations,
        )

    def api_token_find(self, *, raw: str) -> ApiToken | None:
        if not raw:
            return None
        # token_hash is unique: no ordering needed (``first()`` would sort by the model's ordering).
        return ApiToken.objects.filter(token_hash=ApiToken.hash(raw), revoked_at__isnull=True).order_by().first()

    def turn_page_rows(
        self, *, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: Mapping[str, str]
    ) -> QuerySet[Turn, Mapping[str, Any]]:
        return turn_rows(scope=scope, run_id=run_id).filter(**{_EXACT_LOOKUPS[k]: v for k, v in exact.items()})

    def turn_detail(self, *, run_id: str, turn_id: str) -> dict[str, Any] | None:
        turn = turn_lookup(run_id=run_id, turn_id=turn_id, timeline=True)
        return None if turn is None else TurnDetailSerializer(turn).data


_EXACT_LOOKUPS = {"decision": "decision", "status": "status", "state": "effective__state"}


def _finish(run: Run, new: list[Prepared], projected: Projected) -> None:
    """After the rows: the projection written, the pending-assessment flag, the checkpoints."""
    # The run's pending-assessment flag is raised in this transaction; the batch that raises it
    # announces `prefix_moved` on commit (journals/assessment_flag.py).
    _write_projection(run, projected.touched, projected.turns)
    assessment_request(run=run)
    finish_checkpoints(run, new)


def _drop_stored(run: Run, branches: dict[int, Branch], fresh: dict[tuple[int, int], Prepared]) -> int:
    """Remove records already stored (same digest: duplicate) from ``fresh``; raise on a conflict."""
    candidates: dict[int, list[int]] = {}
    for branch, lsn in fresh:
        known = branches.get(branch)
        # Only lsns at or below the branch's highest stored lsn can already be there.
        if known is not None and lsn <= known.last_lsn:
            candidates.setdefault(branch, []).append(lsn)
    duplicates = 0
    for branch, lsns in candidates.items():
        for start in range(0, len(lsns), 5000):
            chunk = lsns[start : start + 5000]
            stored = JournalRecord.objects.filter(run=run, branch=branch, lsn__in=chunk).values_list("lsn", "digest")
            for lsn, digest in stored:
                rec = fresh[(branch, lsn)]
                if digest != record_digest(rec):
                    raise conflict(rec, digest)
                del fresh[(branch, lsn)]
                duplicates += 1
    return duplicates


def _insert(run: Run, new: list[Prepared], now: datetime) -> None:
    """Append the batch's records after the run's last seq."""
    first = run.last_seq + 1
    JournalRecord.objects.bulk_create(
        [
            JournalRecord(
                run_id=run.pk,
                seq=seq,
                branch=rec.branch,
                lsn=rec.lsn,
                kind=rec.kind,
                v=rec.v,
                turn=rec.turn,
                digest=record_digest(rec),
                line=rec.raw,
                received_at=now,
            )
            for seq, rec in enumerate(new, start=first)
        ],
        batch_size=500,
    )


def _stored_beyond_gaps(run: Run, branches: dict[int, Branch], new: list[Prepared]) -> dict[int, set[int]]:
    """The lsns stored above the committed cursor of each branch the batch touches that has a gap (records
    stored beyond it earlier): they count once the gap is filled. Read before the batch is written."""
    beyond: dict[int, set[int]] = {}
    for number in {rec.branch for rec in new}:
        branch = branches.get(number)
        if branch is not None and branch.last_lsn > branch.committed_lsn:
            beyond[number] = set(
                JournalRecord.objects.filter(run=run, branch=number, lsn__gt=branch.committed_lsn).values_list(
                    "lsn", flat=True
                )
            )
    return beyond


def _write_projection(run: Run, branches: list[Branch], turns: list[PlannedTurn]) -> None:
    """Branch cursors, newly planned turns, the run's counters."""
    created = [b for b in branches if b._state.adding]
    changed = [b for b in branches if not b._state.adding]
    if created:
        Branch.objects.bulk_create(created)
    if changed:
        Branch.objects.bulk_update(changed, ["committed_lsn", "last_lsn", "record_count"])
    if turns:
        # The first planning wins; a later one (another lineage) is the assessment's business.
        Turn.objects.bulk_create(
            [
                Turn(run=run, turn_id=t.turn_id, lineage=t.lineage, branch=t.branch, plan=t.plan, first_seq=t.first_seq)
                for t in turns
            ],
            ignore_conflicts=True,
        )
    run.save(update_fields=["record_count", "last_seq", "prefix_digest", "updated_at", "changed_at"])


def turn_lookup(*, run_id: str, turn_id: str, timeline: bool = False) -> Turn | None:
    """A turn by its run's id and its own, in one query (joined), with its timeline prefetched when asked."""
    if not (usable_key(run_id) and usable_key(turn_id)):
        return None
    turns = Turn.objects.select_related("run").filter(run__run_id=run_id, turn_id=turn_id)
    if timeline:
        turns = turns.select_related("effective").prefetch_related(*TIMELINE)
    return turns.first()


def _turn_rows_base(run_key: F | Value) -> QuerySet[Turn, Mapping[str, Any]]:
    rows: QuerySet[Turn, Mapping[str, Any]] = Turn.objects.order_by("-updated_at", "-id").values(
        *TURN_ROW_FIELDS,
        run_key=run_key,
        plan_json=Cast("plan", TextField()),
        completed_json=Cast("completed_phases", TextField()),
        **{f"effective_{f}": F(f"effective__{f}") for f in STATE_ROW_FIELDS},
    )
    return rows


def turn_rows(*, scope: RunScope = EVERY_RUN, run_id: str | None = None) -> QuerySet[Turn, Mapping[str, Any]]:
    """Turns as plain rows (dicts, the run's id joined in) for list pages: building 50 model instances
    (and 50 runs) per page would cost more than the page's query (benchmarks/bench_reads.py). Only runs in
    ``scope``; a run's turns are tested against it by the run's id, without a join."""
    if run_id is None:
        return _turn_rows_base(F("run__run_id")).filter(scope.q("run__run_id"))
    if not usable_key(run_id) or not scope.allows(run_id):
        return Turn.objects.none().values()  # an id no column can hold (a NUL) names no run
    else:
        # By the run's key, looked up in a subquery: the planner then knows it is one run and walks the
        # (run, -updated_at, -id) index for the page, where a join would sort every turn of the run. The
        # run's key is the one asked for: no join for it either.
        return _turn_rows_base(Value(run_id, output_field=CharField())).filter(
            run_id=Subquery(Run.objects.filter(run_id=run_id).order_by().values("pk")[:1])
        )


TIMELINE = (
    # The committing record's place, not its bytes: a timeline never shows raw lines.
    Prefetch("phases", queryset=Phase.objects.select_related("record").defer("record__line").order_by("position")),
    # By position alone: the model's ordering would join the turn and its run only to sort by them.
    Prefetch("intents", queryset=Intent.objects.order_by("position", "id")),
)
