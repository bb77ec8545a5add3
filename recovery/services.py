"""Writes of the recovery state: assessments, claims, approvals, blocks and evidence.

Each transition is written once, here, and called from the API (and later the pages, admin and Celery).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

import engine
from engine import assess as _engine_assess
from engine.canonical import canonical_bytes
from engine.types import Assessment as EngineAssessment
from engine.types import SnapshotUnusable, TurnDecision
from journals.actors import Actor, person_of
from journals.changes import turn_change_mark
from journals.models import Branch, Decision, Intent, Run, Turn
from journals.projection import branches_project, intent_values, intents_of, turn_key, turns_project
from journals.storable import storable
from kernel.dialect import fetched, rows_insert, values_insert
from kernel.errors import ServiceError
from kernel.events import crash_loop_parked, emit, instrument_assessment
from kernel.failpoints import failpoint
from recovery.models import (
    COMPACTED_OUTPUT,
    FINDINGS,
    Assessment,
    FoldSnapshot,
    GateDecision,
    OperatorEvidence,
    SnapshotPart,
    TurnAssessment,
    TurnClaim,
)
from recovery.output import (
    OutputPlan,
    output_entries_store,
    output_entry,
    output_head,
    output_plan,
    output_plan_listed,
    output_whole,
)
from recovery.packages.models import JournalCorruption
from recovery.repair.input import repaired_lines, repaired_result, stored_lines
from recovery.repair.models import JournalRepair, repair_in_force, repairs_latest_first
from recovery.selectors import (
    DONE,
    HOLD,
    GateView,
    claim_current,
    evidence_in_force,
    gate_view,
)
from recovery.state import (
    EngineRow,
    approval_refusal,
    engine_row,
    picture_rows,
    picture_values,
    projected_assessment,
    state_seen_check,
    turn_facts,
    turn_states_refresh,
    unknown_intents,
)
from trail.services import actor_display, operator_action_record, reason_clean

# The engine's wall time per assessment feeds the latency histogram (ops/metrics.py).
assess = instrument_assessment(_engine_assess)
assess_kept = instrument_assessment(engine.assess_kept)

ENGINE_VERSION: str = engine.ENGINE_VERSION
# The canonical fold's shape (docs/engine.md "Versions"); part of an assessment's identity, so a new shape
# re-assesses every run (audits/checks.py watches both versions).
PROJECTION_VERSION: str = engine.PROJECTION_VERSION


class GateError(ServiceError):
    """A gate transition refused (409 for state conflicts, 400 for bad arguments)."""


# --- Assessments ------------------------------------------------------------------------------------


def assessment_evidence_digest(
    evidence: Mapping[tuple[str, str], Any],
    corrupt: Iterable[tuple[int, str, bool]] = (),
    repair: list[object] | None = None,
) -> str:
    """The digest of the inputs beside the committed records: operator evidence, and every corrupt line kept
    from imported packages (JournalCorruption: pk, sha256 and whether it is in force). A repaired line stays
    in the digest, marked, so that a repair is a new input with an assessment of its own: were it dropped,
    the identity would fall back to an assessment from before the line arrived, which is not the run's
    latest, and the turns would keep the blocked projection (tests/packages/test_torn_tail.py). Without
    kept lines it is the digest of the evidence alone, as it always was, so stored assessments keep theirs.
    The journal repair in force (recovery/repair/models.py) is an input too: its identity joins the digest,
    so a repaired run has an assessment of its own and never reuses one from before the repair."""
    items = sorted([t, i, f] for (t, i), f in evidence.items())
    kept = [[pk, sha, in_force] for pk, sha, in_force in corrupt]
    body: Any = {"evidence": items, "corrupt_lines": kept} if kept else items
    if repair is not None:
        body = {"inputs": body, "repair": repair}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def corrupt_kept(run: Run) -> list[tuple[int, str, bool]]:
    """(pk, sha256, in force) of every corrupt line kept for the run, in their journal order."""
    if not JournalCorruption.objects.kept(run).exists():
        return []  # nearly every run: a plain probe is cheaper to build than the annotated read
    return _corrupt_listed(run)


def _corrupt_listed(run: Run) -> list[tuple[int, str, bool]]:
    """``corrupt_kept`` without its probe: for a caller whose probe (``InputProbes.kept_any``) found some."""
    kept = JournalCorruption.objects.with_force(run).order_by("after_seq", "ordinal", "id")
    return list(kept.values_list("pk", "sha256", "in_force"))


def _lines_through(run_pk: int, last_seq: int, tail: Iterable[bytes] = ()) -> Iterator[bytes]:
    """The run's lines in seq order up to ``last_seq``, streamed in chunks (memory stays flat), then ``tail``.

    ``tail``: the kept corrupt lines of imported packages (a torn tail). They come after every stored record,
    not at their place between them, so that line N of what the engine reads stays the record with seq N (the
    pages look records up by the reason's line); the engine reports each as ``storage_corruption``, a
    run-level violation that blocks every turn (the reason is the first run-level violation, so a record
    before it that breaks the contract run-wide may be named instead: the run is blocked either way)."""
    yield from stored_lines(run_pk, 0, last_seq)
    yield from tail


class PrefixSuperseded(Exception):
    """A newer batch was committed while the engine ran (``assessment_refresh(newest_only=True)``)."""


@dataclass(frozen=True)
class AssessmentInputs:
    """What an assessment of the run reads besides its records, read once: the evidence in force, the kept
    corrupt lines (and those in force), the repair in force, and the identity they make."""

    run: Run
    evidence: dict[tuple[str, str], Any]
    kept: list[tuple[int, str, bool]]
    repair: JournalRepair | None
    identity: dict[str, Any]

    @property
    def corrupt(self) -> list[int]:
        return [pk for pk, _, in_force in self.kept if in_force]  # the lines the engine reads

    @property
    def repair_summary(self) -> dict[str, Any] | None:
        """What the output says of the repair in force (None: no repair)."""
        return self.repair.summary() if self.repair is not None else None


@dataclass(frozen=True)
class InputProbes:
    """What the run's row read with it says of two inputs (``_run_probed``): whether any corrupt line is kept
    for it, and the pk of its repair in force (None: no repair)."""

    kept_any: bool
    repair_pk: int | None


def assessment_inputs(*, run: Run, probes: InputProbes | None = None) -> AssessmentInputs:
    """The inputs of the assessment of the run's committed prefix as ``run`` holds it. ``probes``: read with
    the run's row (``_run_probed``); the kept lines and the repair are then read only where they say some
    are (None: both are read)."""
    evidence = evidence_in_force(run=run)
    kept = corrupt_kept(run) if probes is None else (_corrupt_listed(run) if probes.kept_any else [])
    repair = repair_in_force(run) if probes is None or probes.repair_pk is not None else None
    identity = {
        "run": run,
        "prefix_key": run.prefix_key,
        "evidence_digest": assessment_evidence_digest(evidence, kept, repair.identity() if repair else None),
        "engine_version": ENGINE_VERSION,
        "projection_version": PROJECTION_VERSION,
    }
    return AssessmentInputs(run=run, evidence=evidence, kept=kept, repair=repair, identity=identity)


@dataclass(frozen=True)
class Fold:
    """The engine's answer for a prefix, the fold after its last line (for the next assessment to start
    from; None when the inputs reach back: a repair, kept corrupt lines), the digest of the snapshot it
    started from (None: it read the whole prefix), and which turns may have changed since."""

    result: EngineAssessment
    snapshot: engine.FoldSnapshot | None = None
    started_from: str | None = None
    # The engine turns whose decisions may differ from those of the assessment ``since`` (its id), the run's
    # newest when the fold began; None: any turn's may (the projections then read every turn).
    changed: frozenset[str] | None = None
    since: int | None = None
    # The result holds the ``changed`` turns only (the engine's ``changed_only``), the rest of it whole.
    partial: bool = False


def assessment_fold(
    inputs: AssessmentInputs, *, whole: bool = False, partial: bool = False, newest: _Newest | None = None
) -> Fold:
    """The engine's answer for the inputs' prefix: a pure computation, nothing stored. It starts from the
    run's fold snapshot and reads only the records after it when the snapshot is usable; otherwise, or when
    the engine refuses the snapshot, it folds the whole prefix (``whole``: always, with the plain engine).
    ``partial``: when it continues the fold of the run's newest assessment, the result decides only the
    turns that may have changed since (``Fold.partial``): the worker's store needs no more. ``newest``: the
    caller's ``_newest_read`` of these inputs, when it read it just before."""
    run, last_seq, repair = inputs.run, inputs.run.last_seq, inputs.repair
    if inputs.corrupt or repair is not None:
        # Kept lines are read after every stored record, and a repair rewrites records anywhere in the
        # journal: what they change reaches back before any snapshot, so the whole prefix is folded.
        data = dict(JournalCorruption.objects.filter(pk__in=inputs.corrupt).values_list("pk", "data"))
        tail = [bytes(data[pk]) for pk in inputs.corrupt]
        if repair is None:
            return Fold(assess(lambda: _lines_through(run.pk, last_seq, tail), evidence=inputs.evidence))
        read = assess(lambda: repaired_lines(run.pk, last_seq, tail, repair), evidence=inputs.evidence)
        return Fold(repaired_result(read, repair))  # the repair's typed blocks (recovery/repair/input.py)
    if whole:
        # The re-fold audit's own fold: the plain engine over every record, owing nothing to any snapshot.
        return Fold(assess(lambda: _lines_through(run.pk, last_seq), evidence=inputs.evidence))
    row = FoldSnapshot.objects.filter(run=run).defer("data").first()
    seal = _snapshot_due(row, last_seq)
    keep = _kept_key(run.pk, last_seq, run.prefix_digest, inputs.identity["evidence_digest"])
    newest_same = (newest if newest is not None else _newest_read(inputs))[0]
    kept = engine.KeptFold(_kept_key(run.pk, *newest_same[1:]), newest_same[1]) if newest_same else None
    for start in (kept, None):
        # The fold this process kept of the run's newest assessment first; else the stored snapshot.
        begin = start if start is not None else _snapshot_usable(inputs)
        if begin is None:
            continue
        # It continues the very prefix of the run's newest assessment: the turns it lists changed since that one.
        continues = newest_same is not None and begin.lines == newest_same[1]
        try:
            done = assess_kept(
                begin,
                _tail_source(run.pk, begin.lines, last_seq),
                keep=keep,
                seal=seal,
                evidence=inputs.evidence,
                rewind_window=settings.LOOPX_REWIND_WINDOW_LINES,
                changed_only=partial and continues,
            )
        except SnapshotUnusable:
            continue  # the engine cannot continue it (a fork reaching before what it kept...): the next start
        if done is not None:
            since = newest_same[0] if newest_same is not None and continues and done.changed is not None else None
            # A warm continuation names the stored snapshot it could equally have started from.
            listed = partial and continues and done.changed is not None
            return Fold(done.result, done.snapshot, _snapshot_named(row, inputs), done.changed, since, listed)
    full = assess_kept(
        None,
        lambda: _lines_through(run.pk, last_seq),
        keep=keep,
        seal=True,
        evidence=inputs.evidence,
        rewind_window=settings.LOOPX_REWIND_WINDOW_LINES,
    )
    if full is None:
        raise RuntimeError("a full fold starts from nothing kept")
    return Fold(full.result, full.snapshot)


# Records after a fold's start that are read from the store once and held for the engine's two passes; a
# longer tail (a worker restarted far behind) is streamed on each pass, so that memory stays flat.
_TAIL_HELD_LINES = 20_000


def _tail_source(run_pk: int, after: int, through: int) -> Callable[[], Iterable[bytes]]:
    """The stored records after ``after`` through ``through``, as the engine's source. The engine reads its
    source twice (once for the points forks and checkpoints name, then to fold): a batch's few records are
    read from the store on the first pass only."""
    if through - after > _TAIL_HELD_LINES:
        return lambda: stored_lines(run_pk, after, through)
    held: list[list[bytes]] = []  # the records once read

    def source() -> Iterable[bytes]:
        if not held:
            held.append(list(stored_lines(run_pk, after, through)))
        return held[0]

    return source


def _kept_key(run_pk: int, through_seq: int, prefix_digest: str, evidence_digest: str) -> str:
    """The name of the fold this process keeps of a run's prefix: the run, its last seq and its running
    digest (which names every record up to it), and the inputs' digest."""
    return f"run:{run_pk}:{through_seq}:{prefix_digest}:{evidence_digest}"


# The run's newest assessment as ``_newest_read`` gives it: (id, last seq, prefix digest, evidence digest),
# or None; and whether an assessment with the inputs' identity exists.
_Newest = tuple[tuple[int, int, str, str] | None, bool]


def _newest_read(inputs: AssessmentInputs) -> _Newest:
    """In one statement: the run's newest assessment (whose picture the stored rows show) when it read these
    inputs over a shorter prefix (the fold this process may keep of it; else None), and whether an
    assessment with the inputs' identity is stored (then nothing is owed)."""
    run = inputs.run
    newest = (
        Assessment.objects.filter(run=run)
        .order_by("-id")
        .annotate(same=Exists(Assessment.objects.filter(**inputs.identity)))
        .values_list(
            "id", "prefix_last_seq", "prefix_digest", "evidence_digest", "engine_version", "projection_version", "same"
        )
        .first()
    )
    if newest is None:
        return None, False  # no assessment of the run at all
    same = (inputs.identity["evidence_digest"], ENGINE_VERSION, PROJECTION_VERSION)
    if newest[1] >= run.last_seq or newest[3:6] != same:
        return None, bool(newest[6])
    return (newest[0], newest[1], newest[2], newest[3]), bool(newest[6])


def _snapshot_named(row: FoldSnapshot | None, inputs: AssessmentInputs) -> str | None:
    """The digest of the run's stored snapshot when it was folded under these inputs (its bytes and the
    records after it give the same fold), else None."""
    if row is None or row.through_seq > inputs.run.last_seq:
        return None
    versions = (row.engine_version, row.projection_version, row.evidence_digest)
    return row.digest if versions == (ENGINE_VERSION, PROJECTION_VERSION, inputs.identity["evidence_digest"]) else None


def _snapshot_due(row: FoldSnapshot | None, last_seq: int) -> bool:
    """Whether this assessment writes the run's fold snapshot: none stored yet, or the stored one is
    ``LOOPX_SNAPSHOT_EVERY_RECORDS`` records or ``LOOPX_SNAPSHOT_EVERY_SECONDS`` behind."""
    if row is None:
        return True
    behind = last_seq - row.through_seq >= settings.LOOPX_SNAPSHOT_EVERY_RECORDS
    age = timezone.now() - row.updated_at >= timedelta(seconds=settings.LOOPX_SNAPSHOT_EVERY_SECONDS)
    return behind or age


def _snapshot_usable(inputs: AssessmentInputs) -> engine.FoldSnapshot | None:
    """The run's stored fold snapshot when the next assessment may start from it: same engine, projection and
    evidence, a prefix that grew past it, and a manifest and parts that load and match what was stored. Line N
    of a run's journal is its record of seq N, so the snapshot's line count is the seq it was folded through."""
    row = FoldSnapshot.objects.filter(run=inputs.run).first()
    if row is None or row.through_seq >= inputs.run.last_seq or row.lines != row.through_seq:
        return None
    versions = (row.engine_version, row.projection_version, row.evidence_digest)
    if versions != (ENGINE_VERSION, PROJECTION_VERSION, inputs.identity["evidence_digest"]):
        return None
    # In number order: a part missing, left over or of another snapshot fails the manifest's digests.
    parts = SnapshotPart.objects.filter(run=inputs.run).order_by("number").values_list("data", flat=True)
    try:
        loaded = engine.snapshot_load(bytes(row.data), [bytes(part) for part in parts])
    except SnapshotUnusable:
        return None
    return loaded if (loaded.digest, loaded.lines) == (row.digest, row.lines) else None


def _snapshot_store(run: Run, fold: Fold, inputs: AssessmentInputs) -> None:
    """Replace the run's fold snapshot with the one after this assessment's prefix (under the run's lock;
    never with an older one): its manifest, and of its parts only those whose digest changed, the parts it
    no longer names deleted. A fold from the start writes every part (it may follow stored parts that did
    not load)."""
    after = fold.snapshot
    if after is None:
        return
    fields = {
        "through_seq": inputs.run.last_seq,
        "lines": after.lines,
        "digest": after.digest,
        "data": after.data,
        "engine_version": ENGINE_VERSION,
        "projection_version": PROJECTION_VERSION,
        "evidence_digest": inputs.identity["evidence_digest"],
        "updated_at": timezone.now(),
    }
    stored = FoldSnapshot.objects.filter(run=run)
    if not stored.filter(through_seq__lte=inputs.run.last_seq).update(**fields):
        if stored.exists():
            return  # a newer one is stored: its parts stay
        FoldSnapshot.objects.create(run=run, **fields)
    parts = SnapshotPart.objects.filter(run=run)
    held = dict(parts.values_list("number", "digest")) if fold.started_from is not None else {}
    changed = [n for n, digest in enumerate(after.part_digests) if held.get(n) != digest]
    parts.filter(Q(number__in=changed) | Q(number__gte=len(after.parts))).delete()
    rows_insert(
        model=SnapshotPart,
        rows=[SnapshotPart(run=run, number=n, digest=after.part_digests[n], data=after.parts[n]) for n in changed],
    )


def assessment_output(inputs: AssessmentInputs, result: EngineAssessment) -> Any:
    """The output in the shape readers get (recovery/output.py): the engine's stable JSON, redacted; a
    repaired run's names its repair."""
    head = output_head(result=result, repair=inputs.repair_summary)
    return output_whole(head, [output_entry(td) for td in result.turns])


def assessment_refresh(*, run: Run, newest_only: bool = False) -> Assessment:
    """The assessment of the run's committed prefix with the evidence in force; computed only when no
    assessment with the same identity exists (same prefix, evidence, engine and projection version).

    It stores TurnAssessment rows only for the turns whose picture changed, under the run's lock, so that
    assessments are numbered in the order their rows were written and every assessment's picture stays
    exact (``recovery.state.picture_rows``); then it compacts the run's superseded assessments.

    ``newest_only`` (the background task, recovery/background.py): store nothing and raise
    PrefixSuperseded when the run's prefix moved while the engine ran; the newer batch's task assesses it."""
    return assessment_refresh_stored(run=run, newest_only=newest_only)[0]


def _run_probed(pk: int, *, lock: bool = False) -> tuple[Run, InputProbes]:
    """The run's row and the two probes the assessment's inputs depend on, read in the same statement
    (``InputProbes``). Nearly every run has neither a kept line nor a repair, and each probe as a statement
    of its own cost a round trip on every batch (benchmarks/bench_growth.py). Each probe is its own
    module's rule (``JournalCorruption.objects.kept``, ``repairs_latest_first``) on the outer row. ``lock``:
    the row locked until the transaction ends."""
    rows = Run.objects.select_for_update() if lock else Run.objects.all()
    outer = OuterRef("pk")
    run = rows.annotate(
        kept_any=Exists(JournalCorruption.objects.kept(outer)),
        repair_pk=Subquery(repairs_latest_first(outer).values("pk")[:1]),
    ).get(pk=pk)
    return run, InputProbes(kept_any=bool(run.kept_any), repair_pk=run.repair_pk)


def assessment_refresh_stored(*, run: Run, newest_only: bool = False) -> tuple[Assessment, bool]:
    """``assessment_refresh``, and whether this call stored the assessment it returns (False: one with the
    same identity existed, or another worker stored it first)."""
    run, probes = _run_probed(run.pk)  # the prefix as committed now
    inputs = assessment_inputs(run=run, probes=probes)
    read = _newest_read(inputs)
    existing = Assessment.objects.filter(**inputs.identity).first() if read[1] else None
    if existing is not None:
        return existing, False
    fold = assessment_fold(inputs, partial=True, newest=read)
    # The fault tests park (and kill) a worker here, before it stores.
    failpoint("assessment.before_store", key=run.run_id)
    with transaction.atomic():
        locked, locked_probes = _run_probed(run.pk, lock=True)
        if newest_only and (
            locked.prefix_key != run.prefix_key
            or (_corrupt_listed(run) if locked_probes.kept_any else []) != inputs.kept
            or locked_probes.repair_pk != (inputs.repair.pk if inputs.repair is not None else None)
        ):
            # Compared under the run's row lock, which ingest holds until it commits. A package
            # import that only kept a torn tail (its records were all stored before) or a repair moves the
            # corrupt lines in force without moving the prefix: that newer input has its own task too.
            raise PrefixSuperseded(run.run_id)
        newest = Assessment.objects.filter(run=locked).order_by("-id").first()
        listed = _turns_listed(newest, fold)
        plan = _output_planned(inputs, fold, newest, listed)
        if plan is None:
            # The fold listed its turns against an assessment that is no longer the run's newest (another
            # one was stored meanwhile), or one stored whole: this store needs every turn's decision.
            fold = assessment_fold(inputs)
            listed = _turns_listed(newest, fold)
            plan = _output_planned(inputs, fold, newest, listed)
        if plan is None:
            raise RuntimeError("an assessment of every turn has an output to store")
        try:
            stored = _assessment_create(inputs, fold, plan)
        except IntegrityError:
            # Another worker assessed the same identity first: theirs is the same answer.
            return Assessment.objects.get(**inputs.identity), False
        counted = None
        if fold.partial and newest is not None:
            # The turns it decides: those of the newest assessment, and the new ones a Turn row can hold.
            new = set(plan.new_turns)
            counted = newest.turn_count + sum(1 for td in fold.result.turns if td.turn in new and turn_key(td))
        _assessment_project(locked, stored, fold, run.last_seq, listed, counted)
        _snapshot_store(locked, fold, inputs)
    return stored, True


def _output_planned(
    inputs: AssessmentInputs, fold: Fold, newest: Assessment | None, listed: frozenset[str] | None
) -> OutputPlan | None:
    """The output the assessment stores: only the listed turns' entries are made and compared when the fold
    lists them; None when the fold decided only some turns and that cannot be stored as it is (its list no
    longer holds, the newest assessment was stored whole, or the run is blocked: a blocked run's turns
    that the engine does not know are counted from every turn)."""
    result = fold.result
    repair = inputs.repair_summary
    if fold.partial:
        if listed is None or newest is None or result.run_blocked is not None:
            return None
        return output_plan_listed(run_pk=inputs.run.pk, result=result, repair=repair, before=newest)
    positions = None if listed is None else [i for i, td in enumerate(result.turns) if td.turn in listed]
    return output_plan(run_pk=inputs.run.pk, result=result, repair=repair, positions=positions, before=newest)


def _assessment_create(inputs: AssessmentInputs, fold: Fold, plan: OutputPlan) -> Assessment:
    """Store the assessment and its output: the run-level part on it, and the turns' entries that differ
    from those in force."""
    result = fold.result
    blocked = result.run_blocked
    with transaction.atomic():
        stored = Assessment.objects.create(
            **inputs.identity,
            prefix_records=inputs.run.record_count,
            prefix_last_seq=inputs.run.last_seq,
            prefix_digest=inputs.run.prefix_digest,
            output=plan.head,
            output_digest=plan.digest,
            turn_entries=plan.turn_entries,
            entries_sum=plan.entries_sum,
            live_branch=result.live_branch,
            blocked_reason=blocked.code if blocked else None,
            turn_count=plan.turn_entries,
            from_snapshot=fold.started_from,
        )
        output_entries_store(assessment=stored, plan=plan)
    return stored


def _assessment_project(
    locked: Run, stored: Assessment, fold: Fold, last_seq: int, listed: frozenset[str] | None, counted: int | None
) -> None:
    """Store the assessment's changed rows and move the run's projections (under the run's lock). Only the
    turns ``listed`` are read and written (see ``_turns_listed``; None: every turn is). ``counted``: the
    turns the assessment decides, when its result lists only some of them."""
    result, blocked = fold.result, fold.result.run_blocked
    keyed = {td.turn for td in result.turns if turn_key(td) is not None}
    shown = result
    if listed is not None:
        shown = dataclasses.replace(result, turns=tuple(td for td in result.turns if td.turn in listed))
    turns = turns_project(run=locked, result=shown, last_seq=last_seq)
    orphans = _orphan_turns(run=locked, known=keyed, blocked=blocked)
    rows = _turn_assessments(stored, shown, turns, orphans)
    changed = _rows_changed(locked, rows, None if listed is None else [row[1] for row in rows])
    values_insert(model=TurnAssessment, fields=_TURN_ROW, rows=changed)
    stored.turn_count = counted if counted is not None else len(keyed) + len(orphans)
    stored.rows_written = len(changed)
    stored.save(update_fields=["turn_count", "rows_written"])
    # Projections follow the newest prefix only: an older assessment finishing late never rewinds them.
    if locked.assessed_seq is None or locked.assessed_seq <= last_seq:
        branches_project(run=locked, views=result.branches)
        locked.live_branch = result.live_branch
        locked.blocked_reason = stored.blocked_reason
        locked.assessed_seq = last_seq
        locked.save(update_fields=["live_branch", "blocked_reason", "assessed_seq"])
        engine_rows = _engine_rows(shown, turns, orphans)
        turn_pks = None if listed is None else list(engine_rows)
        # The turns' ids and plans as just written; a turn the engine does not know (an orphan) is read.
        plans = None if orphans else {t.pk: (t.turn_id, t.plan) for t in turns.values()}
        # Their live intents whose outcome nobody knows, as just written (an orphan's are read).
        unknown = None if orphans else _unknown_intents(shown, turns)
        turn_states_refresh(
            run=locked,
            assessment=stored,
            engine_rows=engine_rows,
            turn_pks=turn_pks,
            turn_plans=plans,
            unknown_of=unknown,
        )
    assessments_compact(run=locked)


def _turns_listed(newest: Assessment | None, fold: Fold) -> frozenset[str] | None:
    """The engine turns whose rows and output entries this assessment may change, or None for every turn:
    the fold's list holds while the run's newest assessment (``newest``, read under the run's lock before
    this one is stored) is the one the fold began from."""
    if fold.changed is None or fold.since is None or newest is None:
        return None
    return fold.changed if newest.pk == fold.since else None


_PICTURE = ("decision", "reason", "resume_from", "completed_phases", "reason_line", "terminal")


# A TurnAssessment row as values: the assessment's and the turn's pks, then the picture.
_TURN_ROW = ("assessment", "turn", *_PICTURE)
_TurnRow = tuple[int, int, str, str | None, Any, Any, int | None, str | None]


def _rows_changed(run: Run, rows: list[_TurnRow], turn_pks: list[int] | None = None) -> list[_TurnRow]:
    """The rows whose turn is new or whose picture differs from the turn's newest stored row (of the turns
    ``turn_pks`` only, when given: the rows are theirs)."""
    if turn_pks is None:
        stored = fetched(picture_rows(run_id=run.pk).values_list("turn_id", *_PICTURE), stream=True)
    else:
        stored = picture_values(run_id=run.pk, turn_pks=turn_pks, fields=("turn", *_PICTURE))
    before = {values[0]: tuple(values[1:]) for values in stored}
    return [row for row in rows if before.get(row[1]) != row[2:]]


def assessment_picture(*, run: Run, result: EngineAssessment) -> dict[str, tuple[Any, ...]]:
    """turn id -> the row (decision, reason, resume_from, completed phases, reason line, terminal) an
    assessment of ``result`` stores for each of the run's turns, read from nothing but the result and the
    run's turn ids: what the re-fold audit compares a stored picture with."""
    blocked = result.run_blocked
    listed = set(Turn.objects.filter(run=run).values_list("turn_id", flat=True))
    picture: dict[str, tuple[Any, ...]] = {}
    for td in result.turns:
        key = turn_key(td)
        if key in listed:
            picture[key] = _picture_of(td)
    if blocked is not None:
        for turn_id in listed - picture.keys():
            picture[turn_id] = (Decision.BLOCKED, str(blocked.code), None, [], blocked.line, None)
    return picture


def assessment_picture_stored(*, assessment: Assessment) -> dict[str, tuple[Any, ...]]:
    """turn id -> the row in force under a stored assessment (see ``assessment_picture``)."""
    rows = picture_rows(run_id=assessment.run_id, through=assessment.pk)
    return {values[0]: tuple(values[1:]) for values in rows.values_list("turn__turn_id", *_PICTURE)}


def assessments_compact(*, run: Run) -> int:
    """Compact the run's superseded assessments: their identity, digests and counts stay (a GateDecision or a
    recovery audit may name them), their output is dropped. An assessment is superseded once a newer one
    of the run is ``LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS`` old (a reader that began on it meanwhile still
    finds its output); the assessment the run's projections show is never compacted. Their TurnAssessment
    rows stay: each is a change of a turn's decision, the history the pages and audits read. Returns how
    many it compacted."""
    now = timezone.now()
    grace = timedelta(seconds=settings.LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS)
    settled = (
        Assessment.objects.filter(run=run, created_at__lte=now - grace)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    if settled is None:
        return 0
    superseded = Assessment.objects.filter(run=run, id__lt=settled, compacted_at__isnull=True)
    shown = projected_assessment(run)
    if shown is not None:
        superseded = superseded.exclude(pk=shown.pk)
    return superseded.update(output=COMPACTED_OUTPUT, compacted_at=now)


def _turn_assessments(
    stored: Assessment,
    result: EngineAssessment,
    turns: Mapping[str, Turn],
    orphans: Mapping[int, tuple[str, int | None]],
) -> list[_TurnRow]:
    """The assessment's row for each of the run's turns, as values (``_TURN_ROW``): the engine's decision, or
    blocked for a turn the journal no longer plans (an orphan). Values, not model instances: building an
    instance for each of a batch's rows cost more than comparing and writing them."""
    rows = [_turn_values(stored.pk, turns[td.turn].pk, td) for td in result.turns if td.turn in turns]
    rows.extend(
        (stored.pk, pk, Decision.BLOCKED.value, reason, None, [], line, None) for pk, (reason, line) in orphans.items()
    )
    return rows


def _turn_values(assessment_pk: int, turn_pk: int, td: TurnDecision) -> _TurnRow:
    return (assessment_pk, turn_pk, *_picture_of(td))


def _picture_of(td: TurnDecision) -> tuple[str, str | None, Any, Any, int | None, str | None]:
    """The values of ``_PICTURE`` a row stores for the engine's decision."""
    return (
        td.decision.value,
        td.reason,
        storable(td.resume_from),
        storable(list(td.completed_phases)),
        td.reason_line,
        td.terminal,
    )


def _turn_row(assessment: Assessment, turn: Turn, td: TurnDecision) -> TurnAssessment:
    """The row ``_turn_values`` gives, as an unsaved instance (the gate's answer from a fold in memory)."""
    values = dict(zip(_PICTURE, _picture_of(td), strict=True))
    return TurnAssessment(assessment=assessment, turn=turn, **values)


def _engine_rows(
    result: EngineAssessment, turns: Mapping[str, Turn], orphans: Mapping[int, tuple[str, int | None]]
) -> dict[int, EngineRow]:
    """The same rows as the state writer reads them, handed over so that they are not read back."""
    return {
        turns[td.turn].pk: EngineRow(
            td.decision.value, td.reason, storable(td.resume_from), len(td.completed_phases), td.reason_line
        )
        for td in result.turns
        if td.turn in turns
    } | {pk: EngineRow(Decision.BLOCKED, reason, None, 0, line) for pk, (reason, line) in orphans.items()}


def _unknown_intents(result: EngineAssessment, turns: Mapping[str, Turn]) -> dict[int, list[str]]:
    """turn pk -> its live intents whose outcome nobody knows, from the Intent rows just written
    (``intent_values``): what the state writer would read back."""
    return unknown_intents(
        (turns[td.turn].pk, row[0], row[5], row[3])
        for td in result.turns
        if td.turn in turns
        for row in intent_values(td)
    )


def _orphan_turns(
    *, run: Run, known: Iterable[str], blocked: engine.Violation | None
) -> dict[int, tuple[str, int | None]]:
    """Turns ingest listed (their `turn_planned` line was stored) that the engine does not know: the line
    is not a valid record (a float, an `at` that is no time, empty phases...), so no turn was planned by
    it. That fault is run-level: every such turn is blocked with the run's reason, so that the gate, the
    pages and the counts answer for it like any other turn, never "not assessed" for ever.
    turn pk -> (reason, its line)."""
    if blocked is None:
        return {}
    known_ids = {storable(turn) for turn in known}
    listed = Turn.objects.filter(run=run).values_list("pk", "turn_id")
    orphans = [pk for pk, turn_id in listed.iterator(chunk_size=5000) if turn_id not in known_ids]
    if orphans:
        Turn.objects.filter(pk__in=orphans).update(decision=Decision.BLOCKED, reason=blocked.code)
    return {pk: (str(blocked.code), blocked.line) for pk in orphans}


def turn_decision(*, turn: Turn, expect: Mapping[int, int] | None = None) -> GateView:
    """The gate for a turn under the current committed prefix: a read, which never writes.

    The stored assessment of the current inputs answers when there is one. When the prefix (or the evidence,
    a repair, a kept line) moved since, the worker's task owes its assessment; meanwhile the answer is
    folded here in memory from the same inputs, with the same rule, and stored nowhere: ``pending`` says so.
    It is never an older assessment's answer (a turn the new records hold must not proceed).

    ``expect`` (branch -> the last lsn the runtime believes committed, -1 for none; ``?expect``): a stored
    prefix that differs holds the turn, blocked with `offset_mismatch`, as ``assess_journal --expect``
    blocks it (the engine's comparison, against the branches' ack cursors). It is never reconciled by
    trusting either side, and nothing is recorded: the answer is for this caller's belief alone."""
    fresh = Turn.objects.select_related("run").get(pk=turn.pk)
    inputs = assessment_inputs(run=fresh.run)
    stored = Assessment.objects.filter(**inputs.identity, compacted_at__isnull=True).defer("output").first()
    view = gate_view(turn=fresh, assessment=stored) if stored is not None else _gate_in_memory(fresh, inputs)
    if expect:
        held = dict(Branch.objects.filter(run_id=turn.run_id).values_list("number", "committed_lsn"))
        mismatches = engine.offset_mismatches(held, expect)
        if mismatches:
            view = dataclasses.replace(
                view,
                gate=HOLD,
                decision=Decision.BLOCKED,
                reason=str(engine.Code.OFFSET_MISMATCH),
                resume_from=None,
                approved=False,
                offset_mismatch=mismatches[0],
            )
    return view


def _gate_in_memory(turn: Turn, inputs: AssessmentInputs) -> GateView:
    """The gate from a fold of the current inputs made for this answer alone: the assessment, the turn's row,
    plan and intents as the worker will store them, none of them saved."""
    fold = assessment_fold(inputs)
    result, blocked, run = fold.result, fold.result.run_blocked, inputs.run
    assessment = Assessment(
        **inputs.identity,
        prefix_records=run.record_count,
        prefix_last_seq=run.last_seq,
        prefix_digest=run.prefix_digest,
        output=output_head(result=result, repair=inputs.repair_summary),
        live_branch=result.live_branch,
        blocked_reason=blocked.code if blocked else None,
        turn_count=len(result.turns),
        from_snapshot=fold.started_from,
    )
    td = next((td for td in result.turns if turn_key(td) == turn.turn_id), None)
    if td is not None:
        row = _turn_row(assessment, turn, td)
        turn.plan = storable(list(td.phases))  # in memory only: the page's turn is not this object
        intents = intents_of(turn, td)
    elif blocked is not None:
        # Listed by ingest, unknown to the engine (its planning line is not a valid record): the run's block.
        row = TurnAssessment(assessment=assessment, turn=turn, decision=Decision.BLOCKED, reason=str(blocked.code))
        row.reason_line = blocked.line
        intents = []
    else:
        raise TurnAssessment.DoesNotExist(f"turn {turn.pk} is not in the assessment of its run's prefix")
    view = gate_view(turn=turn, assessment=assessment, row=row, intents=intents)
    return dataclasses.replace(view, pending=True)


def _worker(worker_id: Any) -> str:
    if not isinstance(worker_id, str) or not worker_id.strip() or len(worker_id) > 200 or "\x00" in worker_id:
        raise GateError(400, "worker_invalid", "worker_id must be a non-empty string of at most 200 characters")
    return storable(worker_id)


def _lock_turn(turn: Turn) -> Turn:
    """One owner at a time: every gate transition of a turn serialises on its row.

    Lock order: a transition refreshes the assessment (which may lock the run's row to store it) before
    it locks the turn, never after; the background assessment locks the run, then writes turn rows. The
    same order everywhere, so the two never deadlock.
    """
    return Turn.objects.select_for_update().select_related("run").get(pk=turn.pk)


def gate_locked(*, turn: Turn) -> tuple[Turn, GateView]:
    """Refresh the assessment, then lock the turn and read the gate under the lock (see _lock_turn)."""
    assessment = assessment_refresh(run=turn.run)
    locked = _lock_turn(turn)
    return locked, gate_view(turn=locked, assessment=assessment)


def turn_claim(*, turn: Turn, worker_id: str) -> TurnClaim:
    """Claim the turn for a worker: a lease and a fencing token that only grows. A claim by the holder
    renews the lease and keeps its token; anyone else gets 409 while the lease holds."""
    worker = _worker(worker_id)
    run = turn.run
    if turn.decision in (Decision.COMPLETE, Decision.DISCARDED) or (run.assessed_seq or 0) < run.last_seq:
        # Stored as done, or records arrived that no assessment has read (they may end the turn): the current
        # prefix decides (refreshed before the turn is locked, as every gate transition does). A finished
        # turn has nothing to run: no lease, no token handed out.
        view = gate_view(turn=turn, assessment=assessment_refresh(run=turn.run))
        if view.gate == DONE:
            raise GateError(409, "nothing_to_recover", "the turn needs no recovery", decision=view.decision)
    now = timezone.now()
    lease = timedelta(seconds=settings.LOOPX_CLAIM_LEASE_SECONDS)
    with transaction.atomic():
        locked = _lock_turn(turn)
        current = claim_current(turn=locked)
        if current is not None:
            if current.worker_id != worker:
                raise GateError(
                    409,
                    "claim_held",
                    "another worker holds the lease on this turn",
                    holder=current.worker_id,
                    expires_at=current.expires_at.isoformat(),
                )
            current.expires_at = now + lease
            current.save(update_fields=["expires_at"])
            return current
        locked.fencing_counter += 1
        locked.save(update_fields=["fencing_counter"])
        return TurnClaim.objects.create(
            turn=locked, worker_id=worker, fencing_token=locked.fencing_counter, acquired_at=now, expires_at=now + lease
        )


def claim_require(*, turn: Turn, fencing_token: Any) -> TurnClaim:
    """The current claim, if ``fencing_token`` is its token; otherwise 409 `stale_token`."""
    if not isinstance(fencing_token, int) or isinstance(fencing_token, bool):
        raise GateError(400, "fencing_token_invalid", "fencing_token must be an integer")
    current = claim_current(turn=turn)
    if current is None or current.fencing_token != fencing_token:
        raise GateError(
            409,
            "stale_token",
            "the fencing token is not the current claim's token (lease lost, released or taken over)",
            holder=current.worker_id if current else None,
        )
    return current


def turn_release(*, turn: Turn, fencing_token: int) -> TurnClaim:
    with transaction.atomic():
        locked = _lock_turn(turn)
        claim = claim_require(turn=locked, fencing_token=fencing_token)
        claim.released_at = timezone.now()
        claim.save(update_fields=["released_at"])
        return claim


def _refuse_while_claimed(turn: Turn) -> None:
    """An operator's "it did not happen" lets the effect be sent once more. While a worker's lease on the
    turn still holds, that worker may be sending it right now: the finding would make a double send. Refused until
    the lease runs out or the worker releases the turn (409 `claim_live`)."""
    live = claim_current(turn=turn)
    if live is not None:
        raise GateError(
            409,
            "claim_live",
            "a worker's lease on this turn still holds: it may be sending the effect now; "
            "wait for the lease to run out or the worker to release the turn",
            holder=live.worker_id,
            expires_at=live.expires_at.isoformat(),
        )


def turn_approve(
    *,
    turn: Turn,
    actor: Actor,
    reason: str,
    evidence: Mapping[str, str] | None = None,
    seen: str | None = None,
) -> GateView:
    """An operator lets a held turn proceed. For an indeterminate effect the operator's evidence
    (intent id -> happened / not_happened) is recorded and read by the engine. Refused, whatever the path
    (page, bulk, API, admin, task), for: a turn that is not held; a discarded turn; a run-level violation
    (those need a repaired journal, not a decision); an integrity hold (resolved through its finding); and
    any live intent whose outcome is still unknown once the evidence given is read, whatever the engine's
    reason (nothing resumes over an effect nobody confirmed).

    ``seen``: the version of the turn's state the person decided on (recovery.state.state_version). When
    the turn has moved since (someone blocked it, new records came), 409 `state_changed` and nothing is
    written: an approval never overrides what its author did not see."""

    reason = reason_clean(reason=reason)
    findings = dict(evidence or {})
    with transaction.atomic():
        first = assessment_refresh(run=turn.run)
        # The intents as the person saw them: the evidence's own assessment settles them below, and the
        # state the decision was made on is the one before the evidence.
        intents_seen = list(Intent.objects.filter(turn=turn).order_by("position")) if findings else None
        if findings:
            # Evidence goes in, and the engine reads it, before the turn is locked (lock order: _lock_turn).
            known = dict(Intent.objects.filter(turn=turn).values_list("intent_id", "dispatches"))
            for intent_id, finding in findings.items():
                if intent_id not in known:
                    raise GateError(400, "evidence_invalid", "evidence names an intent this turn does not have")
                if finding not in FINDINGS:
                    raise GateError(400, "evidence_invalid", "evidence must be `happened` or `not_happened`")
            if "not_happened" in findings.values():
                _refuse_while_claimed(turn)
            for intent_id, finding in sorted(findings.items()):
                OperatorEvidence.objects.create(
                    run=turn.run,
                    turn=turn,
                    intent_id=intent_id,
                    finding=finding,
                    dispatch=known[intent_id],  # the latest dispatch, as the operator saw it
                    actor=person_of(actor),
                    actor_name=actor_display(actor),
                    reason=reason,
                )
        latest = assessment_refresh(run=turn.run) if findings else first
        locked = _lock_turn(turn)
        before = gate_view(turn=locked, assessment=first, intents=intents_seen)
        state_seen_check(value=before.value, seen=seen)
        if before.gate != HOLD:
            raise GateError(409, "nothing_to_approve", "the turn is not held: there is nothing to approve")
        current = gate_view(turn=locked, assessment=latest) if findings else before
        refusal = approval_refusal(row=engine_row(current.row), value=current.value)
        if refusal is not None:
            raise GateError(409, refusal.code, refusal.detail, **refusal.extra)
        row = current.row
        GateDecision.objects.create(
            run=locked.run,
            turn=locked,
            kind="approve",
            actor=person_of(actor),
            actor_name=actor_display(actor),
            reason=reason,
            assessment=current.assessment,
            engine_decision=row.decision,
            engine_reason=row.reason,
            engine_reason_line=row.reason_line,
            engine_facts=turn_facts(current.assessment, locked.turn_id),
        )
        turn_change_mark(turn_pk=locked.pk, run_pk=locked.run_id)
        turn_states_refresh(run=locked.run, turn_pks=[locked.pk], assessment=current.assessment)
        after = gate_view(turn=locked, assessment=current.assessment)
        operator_action_record(
            actor=actor,
            kind="turn_approve",
            run=locked.run,
            turn=locked,
            reason=reason,
            before=before.summary(),
            after={**after.summary(), "evidence": dict(sorted(findings.items()))},
        )
    return after


def turn_block(*, turn: Turn, actor: Actor, reason: str, seen: str | None = None) -> GateView:
    """An operator holds a turn until someone approves it. ``seen``: as for ``turn_approve`` (a block made
    on a state the turn has left is refused with 409 `state_changed`, nothing written)."""

    reason = reason_clean(reason=reason)
    with transaction.atomic():
        locked, before = gate_locked(turn=turn)
        state_seen_check(value=before.value, seen=seen)
        GateDecision.objects.create(
            run=locked.run,
            turn=locked,
            kind="block",
            actor=person_of(actor),
            actor_name=actor_display(actor),
            reason=reason,
            assessment=before.assessment,
            engine_decision=before.row.decision,
            engine_reason=before.row.reason,
            engine_reason_line=before.row.reason_line,
        )
        turn_change_mark(turn_pk=locked.pk, run_pk=locked.run_id)
        turn_states_refresh(run=locked.run, turn_pks=[locked.pk], assessment=before.assessment)
        after = gate_view(turn=locked, assessment=before.assessment)
        operator_action_record(
            actor=actor,
            kind="turn_block",
            run=locked.run,
            turn=locked,
            reason=reason,
            before=before.summary(),
            after=after.summary(),
        )
    return after


BULK_ACTIONS = ("approve", "block")
BULK_MAX = 1000


@dataclass
class BulkOutcome:
    """What a bulk decision did: the turns decided, and those it left alone with the service's refusal."""

    action: str
    done: list[Turn] = field(default_factory=list)
    left: list[tuple[Turn, GateError]] = field(default_factory=list)


def turns_bulk_decide(*, turns: Iterable[Turn], action: str, actor: Actor, reason: str) -> BulkOutcome:
    """Approve or block each turn through the same service a single decision uses, each in its own
    transaction: one turn refusing (it needs evidence, it changed meanwhile) never undoes the others, and
    is listed with the refusal so that the operator can open it. At most BULK_MAX turns."""
    if action not in BULK_ACTIONS:
        raise GateError(400, "action_invalid", "the action is `approve` or `block`")
    reason = reason_clean(reason=reason)
    outcome = BulkOutcome(action=action)
    for turn in islice(turns, BULK_MAX + 1):
        if len(outcome.done) + len(outcome.left) >= BULK_MAX:
            raise GateError(400, "too_many", f"a bulk decision covers at most {BULK_MAX} turns: narrow the filter")
        try:
            if action == "approve":
                turn_approve(turn=turn, actor=actor, reason=reason)
            else:
                turn_block(turn=turn, actor=actor, reason=reason)
        except GateError as err:
            outcome.left.append((turn, err))
        else:
            outcome.done.append(turn)
    return outcome


def turn_park(*, turn: Turn, view: GateView) -> GateDecision:
    """The gate parks a crash loop (too many recoveries without progress) until an operator approves."""

    reason = (
        f"{view.attempts} recovery attempts without the turn's committed progress advancing (limit {view.max_attempts})"
    )
    decision = GateDecision.objects.create(
        run=turn.run,
        turn=turn,
        kind="park",
        actor=None,
        actor_name="recovery-gate",
        reason=reason,
        assessment=view.assessment,
        engine_decision=view.row.decision,
        engine_reason=view.row.reason,
        engine_reason_line=view.row.reason_line,
    )
    turn_change_mark(turn_pk=turn.pk, run_pk=turn.run_id)
    turn_states_refresh(run=turn.run, turn_pks=[turn.pk], assessment=view.assessment)
    operator_action_record(
        actor=None,
        kind="turn_park",
        run=turn.run,
        turn=turn,
        reason=reason,
        before=view.summary(),
        after={**view.summary(), "state": HOLD, "operator": "park"},
    )
    # A parked crash loop is an operational event (webhooks, metrics).
    emit(
        crash_loop_parked,
        run_id=turn.run.run_id,
        turn_id=turn.turn_id,
        attempts=view.attempts,
        reason=reason,
        decision_id=decision.pk,
    )
    return decision
