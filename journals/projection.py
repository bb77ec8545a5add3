"""The assessed picture of a run written back to the store: Turn, Phase, Intent and Branch rows from the
engine's answer. Ingest writes a planned turn's first row and a branch's cursor (journals/store.py);
everything an assessment decides is written here, and nowhere else. Recovery calls these inside its
assessment's transaction, under the run's lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from django.utils import timezone

from engine.canonical import canonical_bytes_no_float, parse_line
from engine.types import Assessment as EngineAssessment
from engine.types import BranchView, TurnDecision
from journals.models import TURN_ASSESSED_FIELDS, Branch, Intent, JournalRecord, Phase, Run, Turn
from journals.storable import storable
from kernel.dialect import rows_update, values_insert, values_read, values_update

_MAX_BRANCH = 2**31 - 1


def turn_key(td: TurnDecision) -> str | None:
    """The Turn's ``turn_id`` for an engine turn, or None when no Turn row can hold it."""
    return storable(td.turn) if isinstance(td.turn, str) and 0 < len(td.turn) <= 200 else None


def turns_project(*, run: Run, result: EngineAssessment, last_seq: int) -> dict[str, Turn]:
    """Turn, Phase and Intent rows from the engine's decisions; only turns whose picture changed are
    rewritten. Returns engine turn id -> Turn."""
    keys = {td.turn: key for td in result.turns if (key := turn_key(td)) is not None}
    # Only what is compared or handed on is read: every field the picture sets is set below before it is
    # written, and a turn left unchanged is handed on for its pk, id and plan.
    existing = _turns_read(run, list(keys.values()))
    missing = [Turn(run=run, turn_id=key, first_seq=0) for key in dict.fromkeys(keys.values()) if key not in existing]
    if missing:
        Turn.objects.bulk_create(missing, ignore_conflicts=True)
        existing.update(_turns_read(run, [t.turn_id for t in missing]))
    now = timezone.now()
    cutoffs = _live_cutoffs(result.branches, result.live_branch)
    named = list(dict.fromkeys(keys.values()))
    # A batch's few turns: their live commits are read once, for the signatures and for the timelines.
    records = list(_live_records(run, named, last_seq, cutoffs)) if len(named) <= _TURNS_NAMED_AT_MOST else None
    commits = _live_commits(run, cutoffs, last_seq, records)
    changed: list[tuple[Turn, TurnDecision]] = []
    # A turn never assessed before has no Phase or Intent rows yet (they are written only below, with its
    # digest): there is nothing of its to read back. Most of a batch's changed turns are new ones.
    assessed_before: set[int] = set()
    for td in result.turns:
        key = keys.get(td.turn)
        if key is None:
            continue
        turn = existing[key]
        fields = {
            "lineage": storable(td.lineage),
            "branch": td.branch,
            "plan": storable(list(td.phases)),
            "status": td.terminal if td.terminal in ("completed", "failed", "cancelled") else "open",
            "decision": td.decision.value,
            "reason": td.reason,
            "resume_from": storable(td.resume_from),
            "completed_phases": storable(list(td.completed_phases)),
        }
        intents = [
            [i.intent, i.effect_class, i.idempotency_key, i.resolution, i.branch, i.live, i.dispatches, i.outcome]
            for i in td.intents
        ]
        # One digest of everything the turn's rows show, its committing records included, so that unchanged
        # turns cost nothing on a refresh, and a fork rewrites only the turns whose live commits it moved.
        # A change detector compared with itself only, so any deterministic bytes do: orjson's, where they
        # can be, over values made storable once (``fields`` already are).
        shown = [fields, storable(intents), storable(td.terminal), list(commits.get(key, (0, 0)))]
        signature = hashlib.sha256(canonical_bytes_no_float(shown)).hexdigest()
        if turn.assessed_digest != signature:
            if turn.assessed_digest:
                assessed_before.add(turn.pk)
            for k, v in fields.items():
                setattr(turn, k, v)
            turn.assessed_digest = signature
            turn.updated_at = now
            changed.append((turn, td))
    if changed:
        written = [*TURN_ASSESSED_FIELDS, "updated_at", "assessed_digest"]
        rows_update(model=Turn, rows=[t for t, _ in changed], fields=written)
        ids = [t.turn_id for t, _ in changed]
        live = records if records is not None else _live_records(run, ids, last_seq, cutoffs)
        _rewrite_timelines(changed, live, assessed_before)
    return {engine_id: existing[key] for engine_id, key in keys.items()}


# The Turn fields ``turns_project`` reads, in the model's order of fields (``Turn.from_db`` takes them so).
_TURN_READ = tuple(
    f.attname for f in Turn._meta.concrete_fields if f.attname in ("id", "run_id", "turn_id", "plan", "assessed_digest")
)


def _turns_read(run: Run, turn_ids: list[str]) -> dict[str, Turn]:
    """turn id -> the run's Turn of that id, with only ``_TURN_READ`` loaded (as ``only`` loads them)."""
    rows = values_read(model=Turn, fields=_TURN_READ, where={"run": run.pk, "turn_id__in": turn_ids})
    at = _TURN_READ.index("turn_id")
    return {values[at]: Turn.from_db("default", _TURN_READ, values) for values in rows}


_TURNS_NAMED_AT_MOST = 1000  # beyond this many turns, the run's live commits are counted whole

# A live phase_committed record: (pk, turn, seq, line).
_LiveRecord = tuple[int, str, int, bytes]


def _live_records(run: Run, turn_ids: list[str], last_seq: int, cutoffs: dict[int, float]) -> Iterator[_LiveRecord]:
    """The turns' `phase_committed` records on the live timeline through ``last_seq``, a thousand turns a
    query, each query's in seq order (so a turn's are in order). They are read along the run's turn index
    and the live ones picked here: a filter on the branches would have the database read every record of
    the live branch, a cost that grows with the run (benchmarks/bench_growth.py)."""
    for start in range(0, len(turn_ids), 1000):
        rows = values_read(
            model=JournalRecord,
            fields=("pk", "branch", "lsn", "turn", "seq", "line"),
            where={
                "run": run.pk,
                "kind": "phase_committed",
                "turn__in": turn_ids[start : start + 1000],
                "seq__lte": last_seq,
            },
            order_by=("seq",),
        )
        for pk, branch, lsn, turn, seq, line in rows:
            if turn is not None and _live(cutoffs, branch, lsn):
                yield pk, turn, seq, bytes(line)


def _live_commits(
    run: Run, cutoffs: dict[int, float], last_seq: int, records: list[_LiveRecord] | None
) -> dict[str, tuple[int, int]]:
    """turn id -> (how many, sum of seqs) of its `phase_committed` records on the live timeline through
    ``last_seq``: the records its Phase rows take their committing record from (``_rewrite_timelines``).
    On a branch the live records are those up to its cutoff, so a fork or a late record changes the set
    exactly when it changes its count, and the sum tells a set that lost one record and gained another.
    From ``records`` (the named turns'), or, when None, from every such record of the run, streamed."""
    if records is not None:
        pairs: Iterable[tuple[str, int]] = ((turn, seq) for _, turn, seq, _ in records)
    else:
        rows = JournalRecord.objects.filter(run=run, kind="phase_committed", seq__lte=last_seq)
        pairs = (
            (turn, seq)
            for turn, branch, lsn, seq in rows.values_list("turn", "branch", "lsn", "seq").iterator(chunk_size=5000)
            if turn is not None and _live(cutoffs, branch, lsn)
        )
    counted: dict[str, tuple[int, int]] = {}
    for turn, seq in pairs:
        count, total = counted.get(turn, (0, 0))
        counted[turn] = (count + 1, total + seq)
    return counted


def _live_cutoffs(branches: Iterable[BranchView], live_branch: int) -> dict[int, float]:
    """branch -> the last lsn of it on the live timeline (inf for the live branch itself)."""
    views = {b.branch: b for b in branches}
    cutoffs: dict[int, float] = {live_branch: float("inf")}
    current = views.get(live_branch)
    while current is not None and current.parent is not None:
        keep = current.from_lsn if current.from_lsn is not None else -1
        cutoffs[current.parent] = min(cutoffs.get(current.parent, float("inf")), keep)
        current = views.get(current.parent)
    return cutoffs


def _live(cutoffs: dict[int, float], branch: int, lsn: int) -> bool:
    """Whether the record at (branch, lsn) is on the live timeline (``_live_cutoffs``)."""
    return lsn <= cutoffs.get(branch, -1)


def _rewrite_timelines(
    changed: list[tuple[Turn, TurnDecision]], records: Iterable[_LiveRecord], assessed_before: set[int]
) -> None:
    """The changed turns' Phase and Intent rows; ``records``: at least their live commits, each turn's in seq
    order (``_live_records``); ``assessed_before``: the pks of the turns that may have rows already."""
    wanted = {t.turn_id for t, _ in changed}
    # The first live phase_committed record of each (turn, phase): the committing record.
    committing: dict[tuple[str | None, str], tuple[int, str | None]] = {}
    for pk, turn_id, _, line in records:
        if turn_id not in wanted:
            continue
        obj = parse_line(line).obj or {}
        phase, at = obj.get("phase"), obj.get("at")
        if isinstance(phase, str):
            committing.setdefault((turn_id, storable(phase)), (pk, storable(at) if isinstance(at, str) else None))
    turns = [t for t, _ in changed if t.pk in assessed_before]
    phases: list[tuple[Any, ...]] = []
    intents: list[tuple[Any, ...]] = []
    for turn, td in changed:
        done = set(turn.completed_phases)
        for position, name in enumerate(turn.plan):
            record = committing.get((turn.turn_id, name)) if name in done else None
            if record is None:
                phases.append((turn.pk, position, name, name in done, None, None))
            else:
                phases.append((turn.pk, position, name, True, record[0], record[1]))
        intents.extend((turn.pk, *values) for values in intent_values(td))
    _rows_sync(Phase, turns, phases, _PHASE_FIELDS)
    _rows_sync(Intent, turns, intents, _INTENT_FIELDS)


# A timeline row's fields: the turn, its key within the turn, then the values a refresh may change.
_PHASE_FIELDS = ("turn", "position", "name", "committed", "record", "committed_at")
_INTENT_FIELDS = (
    "turn",
    "intent_id",
    "effect_class",
    "idempotency_key",
    "resolution",
    "branch",
    "live",
    "dispatches",
    "outcome",
    "position",
)


def _rows_sync(
    model: type[Phase | Intent], turns: list[Turn], wanted: list[tuple[Any, ...]], fields: tuple[str, ...]
) -> None:
    """Make the changed turns' rows of ``model`` exactly ``wanted`` (each the values of ``fields``: the turn's
    pk, the row's key within its turn, then the rest), writing only the rows that differ (``turns``: those of
    the changed turns that may have rows already; the others' are all new): a turn that committed one
    more phase changes one Phase row, not its whole timeline. Rows go as tuples, not model instances:
    building an instance for each of a batch's new rows cost as much as writing them."""
    key, rest = fields[1], fields[2:]
    have: dict[tuple[int, Any], tuple[int, tuple[Any, ...]]] = {}
    turn_pks = [turn.pk for turn in turns]
    for start in range(0, len(turn_pks), 1000):  # a whole fold changes every turn: its list goes in parts
        rows = values_read(
            model=model, fields=("pk", "turn", key, *rest), where={"turn__in": turn_pks[start : start + 1000]}
        )
        have.update({(turn_pk, found): (pk, tuple(values)) for pk, turn_pk, found, *values in rows})
    create: list[tuple[Any, ...]] = []
    update: list[tuple[Any, tuple[Any, ...]]] = []
    for row in wanted:
        found = have.pop((row[0], row[1]), None)
        if found is None:
            create.append(row)
        elif found[1] != row[2:]:
            update.append((found[0], row[2:]))
    gone = [pk for pk, _ in have.values()]
    for start in range(0, len(gone), 1000):
        model.objects.filter(pk__in=gone[start : start + 1000]).delete()
    values_update(model=model, fields=rest, rows=update)
    values_insert(model=model, fields=fields, rows=create)


def intent_values(td: TurnDecision) -> list[tuple[Any, ...]]:
    """The values of the turn's Intent rows from the engine's decision, in its order (``_INTENT_FIELDS``
    after the turn): one row per storable intent id, the first of each."""
    rows: list[tuple[Any, ...]] = []
    seen: set[str] = set()
    for position, iv in enumerate(td.intents):
        intent_id = storable(iv.intent) if isinstance(iv.intent, str) else None
        if intent_id is None or intent_id in seen or len(intent_id) > 200:
            continue
        seen.add(intent_id)
        key = storable(iv.idempotency_key) if isinstance(iv.idempotency_key, str) else None
        rows.append(
            (intent_id, iv.effect_class, key, iv.resolution, iv.branch, iv.live, iv.dispatches, iv.outcome, position)
        )
    return rows


def intents_of(turn: Turn, td: TurnDecision) -> list[Intent]:
    """The turn's Intent rows from the engine's decision, in its order (unsaved): what the gate reads when it
    answers from a fold made in memory."""
    names = _INTENT_FIELDS[1:]
    return [Intent(turn=turn, **dict(zip(names, values, strict=True))) for values in intent_values(td)]


def branches_project(*, run: Run, views: Iterable[BranchView]) -> None:
    existing = {b.number: b for b in Branch.objects.filter(run=run)}
    create: list[Branch] = []
    update: list[Branch] = []
    for view in views:
        if not 0 <= view.branch <= _MAX_BRANCH:
            continue
        branch = existing.get(view.branch)
        shown = (view.parent, view.from_lsn, view.fork_lsn, view.discarded_from, view.live)
        if branch is None:
            branch = Branch(run=run, number=view.branch)  # a fork whose new branch has no record yet
            create.append(branch)
        elif shown == tuple(getattr(branch, name) for name in _BRANCH_SHOWN):
            continue  # most batches move no fork: the run's branches are read, not written
        else:
            update.append(branch)
        for name, value in zip(_BRANCH_SHOWN, shown, strict=True):
            setattr(branch, name, value)
    if create:
        Branch.objects.bulk_create(create)
    rows_update(model=Branch, rows=update, fields=_BRANCH_SHOWN)


_BRANCH_SHOWN = ("parent", "from_lsn", "fork_lsn", "discarded_from", "live")


# --- The gate ---------------------------------------------------------------------------------------
