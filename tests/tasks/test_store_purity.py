"""Purity through the store. A random valid journal (the engine's model generator) is cut into random
batches; each is ingested through the store's service and assessed by the worker's task body, with the
kept fold sometimes lost between batches and the fold snapshot written at random intervals. After every
batch the store holds exactly what an assessment of the same prefix from nothing gives:

- the output and every turn's row in force (the re-fold audit, which folds the prefix whole, agrees);
- the turns' picture (Turn, Phase and Intent rows), the branches, the turns' effective states and the run's
  status and live branch, as every turn projected again from a whole fold writes them.

Each example runs in a savepoint rolled back at its end, so that the examples share nothing but the
process's kept folds, which are dropped at each start.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from django.db import models, transaction
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.parts as engine_parts
from audits.checks import audit_refold
from engine import forget_warm_folds
from engine.writer import JournalWriter
from journals.intake import IngestError
from journals.models import Branch, Intent, JournalRecord, Phase, Run, Turn, TurnEffective
from journals.services import records_ingest
from recovery import services as recovery_services
from recovery.background import assessment_run
from recovery.state import projected_assessment
from tests.engine.model import JournalModel
from tests.engine.strategies import ACTIONS, FORK_HEAVY, damaged_lines, stored_ids, valid_journals
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db

RUN = "run-purity"

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    # The broker's recorder is the same for every example by design.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class _Undo(Exception):
    """Leaves an example's savepoint: nothing it stored outlives it."""


def _columns(model: type[models.Model], *, leave_out: tuple[str, ...] = ()) -> list[str]:
    """Every column of ``model``'s row for a turn (or of the Turn row) but its pk, its run, its turn (named
    by id instead) and ``leave_out``, so that a column added later is compared too."""
    skip = {"id", "turn", "run", *leave_out}
    named = [f.attname for f in model._meta.concrete_fields if f.name not in skip]
    return named if model is Turn else ["turn__turn_id", *named]


def _picture(run: Run) -> dict[str, Any]:
    """Everything an assessment projects for the run, as comparable values (no pks, no times of writing)."""
    run = Run.objects.get(pk=run.pk)

    def rows(model: type[models.Model], *, leave_out: tuple[str, ...] = (), **where: Any) -> list[str]:
        found = model._default_manager.filter(**where).values_list(*_columns(model, leave_out=leave_out))
        return sorted(repr(row) for row in found)

    return {
        "run": (run.live_branch, run.blocked_reason, run.status),
        "turns": rows(Turn, leave_out=("created_at", "updated_at"), run=run),
        "phases": rows(Phase, turn__run=run),
        "intents": rows(Intent, turn__run=run),
        "branches": sorted(
            Branch.objects.filter(run=run).values_list(
                "number", "parent", "from_lsn", "fork_lsn", "discarded_from", "live"
            )
        ),
        "states": rows(TurnEffective, leave_out=("since", "updated_at"), run=run),
    }


def _from_nothing(run: Run) -> dict[str, Any]:
    """The picture a whole fold of the prefix projects for every turn, as the assessment projects one: each
    turn's stored picture is marked stale first, so that every turn the engine knows is written again (its
    timeline rows where they differ), and the effective states are computed again for every turn. Rolled
    back: nothing of it stays. (A turn the engine does not know, its planning line not a valid record, has
    no picture digest: it is blocked with the run's reason on every assessment.)"""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        Turn.objects.filter(run=run).exclude(assessed_digest="").update(assessed_digest="stale")
        fold = recovery_services.assessment_fold(recovery_services.assessment_inputs(run=run), whole=True)
        shown = projected_assessment(run)
        assert shown is not None
        recovery_services._assessment_project(run, shown, fold, run.last_seq, None, None)
        picture = _picture(run)
        transaction.set_rollback(True)
    return picture


def _grown_and_compared(lines: list[bytes], data: st.DataObject, *, every: int, valid: bool) -> None:
    """Send ``lines`` in drawn batches, each assessed by the worker's task body, and compare the store with
    an assessment from nothing after each batch the door takes. ``valid``: the journal breaks no rule, so
    the door takes every batch; else a batch it refuses must store nothing. ``every``: records between
    fold snapshots. Everything happens in a savepoint rolled back at the end."""
    cuts = data.draw(st.lists(st.integers(1, max(1, len(lines))), max_size=5), label="cuts")
    forget_warm_folds()
    try:
        with (
            override_settings(LOOPX_SNAPSHOT_EVERY_RECORDS=every, LOOPX_SNAPSHOT_EVERY_SECONDS=10**6),
            mock.patch.object(engine_parts, "GROUP", 2),  # snapshot parts of two turns: a short run has several
            transaction.atomic(),
        ):
            start = 0
            for end in sorted({*cuts, len(lines)}):
                if end <= start:
                    continue
                body, start = b"".join(line + b"\n" for line in lines[start:end]), end
                before = Run.objects.filter(run_id=RUN).values_list("last_seq", flat=True).first()
                try:
                    with transaction.atomic():
                        records_ingest(run_id=RUN, body=body, content_type="application/x-ndjson", token=None)
                except IngestError:
                    if valid:
                        raise
                    assert Run.objects.filter(run_id=RUN).values_list("last_seq", flat=True).first() == before
                    continue  # refused whole: nothing of the batch stored, the next one comes
                if data.draw(st.booleans(), label="kept fold lost"):
                    forget_warm_folds()  # another worker, or this one restarted: the snapshot's bytes serve
                # Every batch of a valid journal adds records: a new prefix, a new assessment. A damaged one may
                # send only records already stored (a repeated line), which moves nothing.
                assert assessment_run(run_id=RUN) in (("stored",) if valid else ("stored", "unchanged"))
                run = Run.objects.get(run_id=RUN)
                assert run.assessed_seq == run.last_seq
                assert not valid or run.last_seq == end  # a valid journal's line N is the record with seq N
                refold = audit_refold(sample=1)
                assert (refold.checked, dict(refold.counts)) == (1, {"agreed": 1}), f"batch ending at line {end}"
                assert _picture(run) == _from_nothing(run), f"batch ending at line {end}"
            raise _Undo
    except _Undo:
        pass
    finally:
        forget_warm_folds()


@PROPERTY
@pytest.mark.parametrize("actions", [ACTIONS, FORK_HEAVY], ids=["every kind", "many forks"])
@given(data=st.data())
def test_every_batch_leaves_the_store_as_an_assessment_from_nothing_would(
    published, actions: list[str], data: st.DataObject
) -> None:
    """Journals of every kind, and journals that mostly fork back and commit the same phases again: the turns
    whose committing records a fork moves while their decisions stay must have their rows moved too."""
    model = data.draw(valid_journals(max_steps=40, evidence=False, run=RUN, names=stored_ids, actions=actions))
    lines = list(model.w.lines)  # every line a record the door takes
    every = data.draw(st.sampled_from([0, 3, 10**6]), label="snapshot every")
    _grown_and_compared(lines, data, every=every, valid=True)


@PROPERTY
@given(model=valid_journals(max_steps=30, evidence=False, run=RUN, names=stored_ids), data=st.data())
def test_a_damaged_journal_leaves_the_store_as_an_assessment_from_nothing_would(
    published, model: JournalModel, data: st.DataObject
) -> None:
    """The same with lines repeated, dropped, swapped, torn or rewritten: a batch the door refuses stores
    nothing and the next one comes; every batch it takes is assessed as a whole fold would."""
    lines = damaged_lines(list(model.w.lines), data)
    every = data.draw(st.sampled_from([0, 3, 10**6]), label="snapshot every")
    _grown_and_compared(lines, data, every=every, valid=False)


def test_conflicting_readbacks_are_stored_as_the_engine_merges_them(published):
    """Found by the property above: `succeeded` and `failed` read back for the same dispatch merge to
    `conflicting` (not settled), a value the Intent row's column must hold; the assessment stores it and an
    unsafe intent with it holds the turn."""
    w = JournalWriter(RUN)
    w.plan("t1")
    w.commit("t1", "plan")
    w.commit("t1", "envelope")
    w.dispatch("t1", "charge", "unsafe")
    w.observe("t1", "charge", "succeeded")
    w.observe("t1", "charge", "failed")
    ingest(RUN, w.lines)
    assert assessment_run(run_id=RUN) == "stored"
    intent = Intent.objects.get(turn__run__run_id=RUN, intent_id="charge")
    assert (intent.outcome, intent.resolution) == ("conflicting", "indeterminate")
    turn = Turn.objects.get(run__run_id=RUN, turn_id="t1")
    assert turn.decision == "blocked"
    assert TurnEffective.objects.get(turn=turn).gate == "hold"


def test_a_fork_that_moves_a_commit_moves_its_phase_row(published):
    """A fork leaves a turn's committed phase behind and the turn commits it again on the new branch: its
    decision and completed phases are the same as before, but the Phase row must name the new committing
    record (and its time), as a projection from nothing does. The property above meets this case only now
    and then."""
    w = JournalWriter(RUN)
    planned = w.next_lsn[w.branch]
    w.plan("t1")
    w.commit("t1", "plan")
    cut = len(w.lines)
    w.fork(planned)  # back to the planning record: the commit of `plan` is left behind
    w.commit("t1", "plan")
    forget_warm_folds()
    ingest(RUN, w.lines[:cut])
    assert assessment_run(run_id=RUN) == "stored"
    run = Run.objects.get(run_id=RUN)
    first = Phase.objects.get(turn__run=run, name="plan")
    ingest(RUN, w.lines[cut:])
    assert assessment_run(run_id=RUN) == "stored"
    again = Phase.objects.get(turn__run=run, name="plan")
    run = Run.objects.get(pk=run.pk)
    assert again.committed and again.record_id != first.record_id
    assert again.record_id == JournalRecord.objects.get(run=run, seq=run.last_seq).pk
    assert again.committed_at == orjson.loads(w.lines[-1])["at"] != first.committed_at
    assert _picture(run) == _from_nothing(run)
