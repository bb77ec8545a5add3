"""kernel.dialect's many-row writes give back, on either database, exactly the values they were given: text
with tabs, newlines and backslashes, JSON, times, bytes and NULLs, whether they travel in a COPY or in
arrays (both in psycopg's binary format on PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from journals.models import Phase, Run, Turn, TurnEffective
from kernel.dialect import rows_insert, rows_update, values_insert
from ops.demo import workload_lines
from recovery.background import assessment_run
from recovery.models import Assessment, OutputEntry, SnapshotPart
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db

AWKWARD = "tab\there, new\nline, back\\slash, quote \" and ' , \\N, é ✓ \U0001f600"


def test_rows_insert_and_rows_update_keep_every_value(published):
    ingest("run-dialect", workload_lines("run-dialect", turns=2))
    assert assessment_run(run_id="run-dialect") == "stored"
    run = Run.objects.get(run_id="run-dialect")
    turn = Turn.objects.filter(run=run).first()
    assert turn is not None
    assessment = Assessment.objects.filter(run=run).latest()
    phases = [
        Phase(turn=turn, position=100, name=AWKWARD, committed=True, record_id=None, committed_at=None),
        Phase(turn=turn, position=101, name="", committed=False, record_id=None, committed_at=AWKWARD),
    ]
    entry = {"turn": AWKWARD, "n": [1, 2.5, None, True], "nested": {"k\tey": "v\\al"}}
    entries = [
        OutputEntry(
            run_id=run.pk, assessment=assessment, ordinal=10**6, turn_digest="d" * 64, entry=entry, digest="e" * 64
        )
    ]
    assert rows_insert(model=Phase, rows=phases) == 2
    assert rows_insert(model=OutputEntry, rows=entries) == 1
    assert rows_insert(model=Phase, rows=[]) == 0
    got = {
        p.position: (p.name, p.committed, p.record_id, p.committed_at)
        for p in Phase.objects.filter(turn=turn, position__gte=100)
    }
    assert got == {100: (AWKWARD, True, None, None), 101: ("", False, None, AWKWARD)}
    assert OutputEntry.objects.get(run_id=run.pk, ordinal=10**6).entry == entry
    stored = list(Phase.objects.filter(turn=turn, position__gte=100).order_by("position"))
    stored[0].name, stored[1].committed_at = "plain", None
    assert rows_update(model=Phase, rows=stored, fields=["name", "committed_at"]) == 2
    assert list(
        Phase.objects.filter(turn=turn, position__gte=100).order_by("position").values_list("name", "committed_at")
    ) == [
        ("plain", None),
        ("", None),
    ]


def test_rows_update_sets_every_kind_of_column_row_by_row(published):
    """One array per column: text, integers, JSON (lists, objects, awkward text), times, and a column that is
    None in every row all come back as each row was given them."""
    ingest("run-dialect-update", workload_lines("run-dialect-update", turns=3))
    assert assessment_run(run_id="run-dialect-update") == "stored"
    turns = list(Turn.objects.filter(run__run_id="run-dialect-update").order_by("pk"))
    assert len(turns) == 3
    when = [timezone.now() - timedelta(days=n, microseconds=n) for n in range(3)]
    values = [
        (AWKWARD, 0, [AWKWARD, "b"], None, {"k\tey": [1, 2.5, None, True]}, when[0]),
        (None, 7, [], None, [], when[1]),
        ("", -3, ["x"], None, ["done", {"n": None}], when[2]),
    ]
    for turn, (lineage, branch, plan, resume_from, completed, at) in zip(turns, values, strict=True):
        turn.lineage, turn.branch, turn.plan, turn.resume_from = lineage, branch, plan, resume_from
        turn.completed_phases, turn.updated_at = completed, at
    fields = ["lineage", "branch", "plan", "resume_from", "completed_phases", "updated_at"]
    assert rows_update(model=Turn, rows=turns, fields=fields) == 3
    got = list(Turn.objects.filter(pk__in=[t.pk for t in turns]).order_by("pk").values_list(*fields))
    assert got == values


def test_rows_insert_can_leave_out_the_rows_whose_key_is_taken(published):
    """``ignore_conflicts``: a new row whose unique key is held already is left out, the rest go in."""
    ingest("run-dialect-conflict", workload_lines("run-dialect-conflict", turns=2))
    assert assessment_run(run_id="run-dialect-conflict") == "stored"
    turn = Turn.objects.filter(run__run_id="run-dialect-conflict").first()
    assert turn is not None
    taken = Phase.objects.get(turn=turn, position=0)
    again = [
        Phase(turn=turn, position=0, name="not this one", committed=False, record_id=None, committed_at=None),
        Phase(turn=turn, position=200, name=AWKWARD, committed=False, record_id=None, committed_at=None),
    ]
    assert rows_insert(model=Phase, rows=again, ignore_conflicts=True) == 2
    assert Phase.objects.get(turn=turn, position=0).name == taken.name
    assert Phase.objects.get(turn=turn, position=200).name == AWKWARD


def test_values_insert_keeps_bytes_times_json_and_nulls(published):
    """A COPY of bytes (every byte value, NUL and backslash among them), and the conflict-ignoring insert of
    a row with JSON, text, times and NULLs, each read back as given."""
    ingest("run-dialect-values", workload_lines("run-dialect-values", turns=2))
    assert assessment_run(run_id="run-dialect-values") == "stored"
    run = Run.objects.get(run_id="run-dialect-values")
    data = bytes(range(256)) + b"\\N\t\x00"
    assert (
        values_insert(
            model=SnapshotPart, fields=("run", "number", "digest", "data"), rows=[(run.pk, 999, "f" * 64, data)]
        )
        == 1
    )
    assert bytes(SnapshotPart.objects.get(run=run, number=999).data) == data
    turn = Turn.objects.filter(run=run).order_by("pk").first()
    assert turn is not None
    TurnEffective.objects.filter(turn=turn).delete()
    when = timezone.now() - timedelta(days=3, microseconds=7)
    fields = ("turn", "run", "state", "gate", "decision", "reason", "resume_from", "actor_name", "decided_at",
              "note", "needs_evidence", "since", "updated_at")  # fmt: skip
    row = (turn.pk, run.pk, "held_review", "hold", "blocked", "effect_unknown", None, "", None, AWKWARD,
           [{"k\tey": AWKWARD, "n": [1, 2.5, None, True]}], when, when)  # fmt: skip
    assert values_insert(model=TurnEffective, fields=fields, rows=[row], ignore_conflicts=True) == 1
    assert TurnEffective.objects.filter(turn=turn).values_list(*fields).get() == row
