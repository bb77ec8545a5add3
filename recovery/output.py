"""An assessment's stored output, bounded by what the batch changed.

The output a reader gets is the engine's stable JSON of the whole prefix, redacted (``assess_journal
--json``): the run, the live branch, the records, the violations, every turn in the engine's order, and a
repaired run's repair. Stored, it is two parts:

- the run-level part (everything but the turns) in ``Assessment.output``, with how many turns there are
  (``Assessment.turn_entries``);
- each turn's entry at its position in the engine's order, as an ``OutputEntry`` row, written only where
  it differs from the entry in force before the assessment. The entry in force at a position under an
  assessment is the newest at or before it, as for a turn's picture (``recovery.state.picture_rows``).

The engine orders turns by their first planning line, so a growing journal only appends positions; a
whole fold that orders them otherwise (a repair) writes the positions that moved.

The output's digest is made from the two parts: sha256 of the canonical ``{"head": run-level part,
"turns": count, "sum": S}``, where S is the sum modulo 2^256 of every position's entry digest (sha256 of
the canonical ``[position, entry]``). An assessment that changed k entries makes S from the one before in
k steps: minus each old entry's digest, plus the new one's (``Assessment.entries_sum`` keeps it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Subquery

from engine.canonical import canonical_bytes
from engine.types import Assessment as EngineAssessment
from engine.types import TurnDecision
from journals.storable import storable_redacted
from kernel.dialect import fetched, values_insert
from recovery.models import Assessment, OutputEntry

_MODULUS = 2**256

# An output entry a plan stores: its position, its turn's digest, the entry, and the entry's digest.
EntryValues = tuple[int, str, Any, str]


def output_head(*, result: EngineAssessment, repair: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run-level part of the output: the engine's stable JSON without its turns, redacted; a repaired
    run's names its repair."""
    head: dict[str, Any] = {
        "run": result.run,
        "live_branch": result.live_branch,
        "records": result.records,
        "violations": [v.to_dict() for v in result.violations],
    }
    if repair is not None:
        head["repair"] = dict(repair)
    stored: dict[str, Any] = storable_redacted(head)
    return stored


def output_entry(td: TurnDecision) -> Any:
    """One turn's entry of the output, as stored and shown."""
    return storable_redacted(td.to_dict())


def turn_digest(turn: str) -> str:
    """sha256 of the engine's turn id, whatever it holds: what an entry names its turn by."""
    return hashlib.sha256(turn.encode("utf-8", "surrogatepass")).hexdigest()


def entry_digest(ordinal: int, entry: Any) -> str:
    return hashlib.sha256(canonical_bytes([ordinal, entry])).hexdigest()


def _digest_of(head: Mapping[str, Any], count: int, total: int) -> str:
    return hashlib.sha256(canonical_bytes({"head": head, "turns": count, "sum": f"{total:064x}"})).hexdigest()


def output_whole(head: Mapping[str, Any], entries: Sequence[Any]) -> dict[str, Any]:
    """The output in the engine's shape, from its run-level part and its turns' entries in order."""
    whole = {k: v for k, v in head.items() if k != "repair"}
    whole["turns"] = list(entries)
    if "repair" in head:
        whole["repair"] = head["repair"]
    return whole


def output_digest_whole(output: Mapping[str, Any]) -> str:
    """The digest of an output in the engine's shape (see the module's docstring): what an assessment stored
    in parts was stored with, computed from nothing but the output."""
    head = {k: v for k, v in output.items() if k != "turns"}
    turns = list(output.get("turns", []))
    total = sum(int(entry_digest(i, e), 16) for i, e in enumerate(turns)) % _MODULUS
    return _digest_of(head, len(turns), total)


@dataclass(frozen=True)
class OutputPlan:
    """What an assessment stores of its output: the run-level part, the turn count, the digests' sum, the
    output's digest, the entries that differ from those in force before it (unsaved, no assessment), and
    the turns it lists that the assessment before did not have (``output_plan_listed``)."""

    head: dict[str, Any]
    turn_entries: int
    entries_sum: str
    digest: str
    entries: list[EntryValues]
    new_turns: tuple[str, ...] = ()


def output_plan(
    *,
    run_pk: int,
    result: EngineAssessment,
    repair: Mapping[str, Any] | None,
    positions: Iterable[int] | None,
    before: Assessment | None,
) -> OutputPlan:
    """The output of ``result`` (whole) as the run's next assessment stores it. ``positions``: the only
    positions whose entries may differ from those of ``before`` (the run's newest assessment), or None for
    any position. Then only those entries are made and compared; otherwise every turn's entry is, and
    compared in memory with the entries in force."""
    head = output_head(result=result, repair=repair)
    count = len(result.turns)
    plan = None
    had = before.turn_entries if before is not None and _in_parts(before) else None
    if positions is not None and before is not None and had is not None and had <= count:
        listed = sorted(set(positions))
        # The positions ``before`` did not have are new turns: the engine lists them all.
        if set(range(had, count)) <= set(listed) and (not listed or listed[-1] < count):
            plan = _plan_changed(run_pk, [(i, result.turns[i]) for i in listed], before)
    if plan is None:
        made = {i: output_entry(td) for i, td in enumerate(result.turns)}
        digests = {i: entry_digest(i, entry) for i, entry in made.items()}
        stored = _digests_in_force(run_pk, None)
        total = sum(int(d, 16) for d in digests.values()) % _MODULUS
        changed = [(i, result.turns[i].turn, made[i], d) for i, d in digests.items() if stored.get(i) != d]
        plan = (total, changed)
    return _planned(head, count, plan)


def output_plan_listed(
    *, run_pk: int, result: EngineAssessment, repair: Mapping[str, Any] | None, before: Assessment
) -> OutputPlan | None:
    """The output as the run's next assessment stores it, from a ``result`` that holds only the turns whose
    decisions may differ from ``before``'s (the engine's ``changed_only``). A listed turn keeps the position
    it has under ``before``; a turn it did not have comes after them all, in the engine's order (the order
    of first planning, so a growing journal only appends). None when ``before`` was not stored in parts."""
    if not _in_parts(before):
        return None
    had = int(before.turn_entries or 0)
    named = {turn_digest(td.turn): td for td in result.turns}
    # Read along the turns' index; the positions are bounded here, not in the query, so that no planner
    # prefers a scan of every position below ``had``, a cost that grows with the run (bench_growth). The
    # same statement reads the entries in force at the positions a new turn may take (a longer assessment
    # of the past may have left some there): with the listed turns' own, every digest the plan compares.
    columns = ("turn_digest", "ordinal", "digest")
    in_force = _in_force(run_pk, None).order_by()
    found = in_force.filter(turn_digest__in=list(named)).values_list(*columns)
    beyond = in_force.filter(ordinal__in=range(had, had + len(named))).values_list(*columns)
    rows = list(found.union(beyond)) if named else []
    position = {key: ordinal for key, ordinal, _ in rows if ordinal < had}
    new = [td for key, td in named.items() if key not in position]
    placed = [(position[key], td) for key, td in named.items() if key in position]
    placed += [(had + k, td) for k, td in enumerate(new)]
    plan = _plan_changed(run_pk, placed, before, {ordinal: digest for _, ordinal, digest in rows})
    if plan is None:
        return None
    head = output_head(result=result, repair=repair)
    planned = _planned(head, had + len(new), plan)
    return dataclasses.replace(planned, new_turns=tuple(td.turn for td in new))


def _in_parts(before: Assessment) -> bool:
    return before.turn_entries is not None and before.entries_sum is not None


def _planned(head: dict[str, Any], count: int, plan: tuple[int, list[tuple[int, str, Any, str]]]) -> OutputPlan:
    total, changed = plan
    entries = [(i, turn_digest(turn), entry, d) for i, turn, entry, d in changed]
    return OutputPlan(head, count, f"{total:064x}", _digest_of(head, count, total), entries)


def _plan_changed(
    run_pk: int,
    placed: Sequence[tuple[int, TurnDecision]],
    before: Assessment,
    in_force: Mapping[int, str] | None = None,
) -> tuple[int, list[tuple[int, str, Any, str]]] | None:
    """The digests' sum and the changed entries, made from ``before``'s sum and the placed turns only (the
    positions ``before`` did not have are all among them); None when a position ``before`` had has no
    entry in force (then every entry is compared). ``in_force``: the digests in force at (at least) the
    placed positions, when the caller read them."""
    had = int(before.turn_entries or 0)
    stored = in_force if in_force is not None else _digests_in_force(run_pk, [i for i, _ in placed])
    total = int(str(before.entries_sum), 16)
    changed: list[tuple[int, str, Any, str]] = []
    for i, td in placed:
        old = stored.get(i) if i < had else None
        if i < had and old is None:
            return None
        entry = output_entry(td)
        new = entry_digest(i, entry)
        if new == old:
            continue
        total += int(new, 16) - (int(old, 16) if old is not None else 0)
        if new != stored.get(i):
            changed.append((i, td.turn, entry, new))
    return total % _MODULUS, changed


def _in_force(run_pk: int, through: int | None) -> Any:
    """The run's entries in force under the assessment ``through`` (None: the newest): the newest at or
    before it at each position, one indexed read each (``outputentry_latest``)."""
    newest = OutputEntry.objects.filter(run_id=run_pk, ordinal=OuterRef("ordinal"))
    rows = OutputEntry.objects.filter(run_id=run_pk)
    if through is not None:
        newest = newest.filter(assessment_id__lte=through)
        rows = rows.filter(assessment_id__lte=through)
    latest = newest.order_by("-assessment_id").values("assessment_id")[:1]
    return rows.filter(assessment_id=Subquery(latest))


def _digests_in_force(run_pk: int, positions: Sequence[int] | None) -> dict[int, str]:
    rows = _in_force(run_pk, None)
    if positions is not None:
        rows = rows.filter(ordinal__in=list(positions))
    return dict(fetched(rows.values_list("ordinal", "digest"), stream=positions is None))


def output_entries_store(*, assessment: Assessment, plan: OutputPlan) -> int:
    """Write the plan's entries under ``assessment``; returns how many. Values, not model instances:
    building an instance for each of a batch's entries cost as much as writing it."""
    run_pk, assessment_pk = assessment.run_id, assessment.pk
    rows = [(run_pk, assessment_pk, *values) for values in plan.entries]
    values_insert(model=OutputEntry, fields=_ENTRY_ROW, rows=rows)
    return len(rows)


# An OutputEntry row as values: the run's and the assessment's pks, then ``EntryValues``.
_ENTRY_ROW = ("run", "assessment", "ordinal", "turn_digest", "entry", "digest")


def assessment_output_read(*, assessment: Assessment) -> Any:
    """The assessment's output in the engine's shape, whichever way it was stored: whole (or compacted:
    ``{"compacted": true}``), or in parts, its turns then read from the entries in force under it, in the
    engine's order."""
    head = assessment.output  # read now if the instance deferred it
    if assessment.turn_entries is None or not isinstance(head, dict) or head.get("compacted"):
        return head
    rows = _in_force(assessment.run_id, assessment.pk).filter(ordinal__lt=assessment.turn_entries)
    entries = list(rows.order_by("ordinal").values_list("entry", flat=True).iterator(chunk_size=5000))
    return output_whole(head, entries)


def output_digest(*, assessment: Assessment, output: Any) -> str:
    """The digest of ``output`` (in the engine's shape) made the way ``assessment`` was stored: from its
    run-level part and its turns' entries when it was stored in parts, else sha256 of the whole."""
    if assessment.turn_entries is None or not isinstance(output, Mapping):
        return hashlib.sha256(canonical_bytes(output)).hexdigest()
    return output_digest_whole(output)


def assessment_output_digest(*, assessment: Assessment) -> str:
    """The digest of the output as read back now from what is stored (see ``assessment_output_read``):
    compared with ``Assessment.output_digest`` it tells whether a stored part changed since."""
    return output_digest(assessment=assessment, output=assessment_output_read(assessment=assessment))
