"""kernel.dialect.values_read answers as the ORM's ``filter(...).order_by(...).values_list(...)[:limit]`` does,
on either database (a written statement bound on the server on PostgreSQL), and refuses what it cannot
read the same way on both."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journals.models import Intent, JournalRecord, Phase, Run, Turn
from kernel.dialect import values_read
from ops.demo import workload_lines
from recovery.background import assessment_run
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db


def _orm(model, fields, where, order_by=(), limit=None):
    rows = model.objects.filter(**where).order_by(*order_by).values_list(*fields)
    return [
        tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in (rows[:limit] if limit else rows)
    ]


def _read(**kwargs):
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in values_read(**kwargs)]


@pytest.fixture
def assessed(published) -> Run:
    """A run of six turns, assessed: its records, turns, phases and intents stored."""
    ingest("run-read", workload_lines("run-read", turns=6))
    assert assessment_run(run_id="run-read") == "stored"
    return Run.objects.get(run_id="run-read")


def test_reads_answer_as_the_orm_does(assessed):
    run = assessed
    turn_ids = list(Turn.objects.filter(run=run).order_by("pk").values_list("turn_id", flat=True))
    turn_pks = list(Turn.objects.filter(run=run).order_by("pk").values_list("pk", flat=True))
    last = run.last_seq
    records = ("pk", "branch", "lsn", "turn", "seq", "line")

    @given(
        chosen=st.lists(st.sampled_from(turn_ids), unique=True),
        through=st.integers(0, last + 1),
        after=st.integers(0, last + 1),
        limit=st.none() | st.integers(1, 10),
        descending=st.booleans(),
    )
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    def agree(chosen: list[str], through: int, after: int, limit: int | None, descending: bool) -> None:
        where = {"run": run.pk, "kind": "phase_committed", "turn__in": chosen, "seq__lte": through}
        assert _read(model=JournalRecord, fields=records, where=where, order_by=("seq",)) == _orm(
            JournalRecord, records, where, ("seq",)
        )
        order = ("-seq",) if descending else ("seq",)
        span = {"run": run.pk, "seq__gt": after, "seq__lte": through}
        assert _read(model=JournalRecord, fields=("seq", "line"), where=span, order_by=order, limit=limit) == _orm(
            JournalRecord, ("seq", "line"), span, order, limit
        )
        pks = [pk for pk, turn_id in zip(turn_pks, turn_ids, strict=True) if turn_id in chosen]
        for model, fields in (
            (Phase, ("pk", "turn", "position", "name", "committed", "record", "committed_at")),
            (Intent, ("pk", "turn", "intent_id", "effect_class", "idempotency_key", "live", "dispatches", "outcome")),
        ):
            got = sorted(_read(model=model, fields=fields, where={"turn__in": pks}))
            assert got == sorted(_orm(model, fields, {"turn__in": pks}))
            assert all(row[1] in pks for row in got)
        # JSON decoded as the field decodes it: lists, None, text.
        shown = ("pk", "run", "turn_id", "plan", "completed_phases", "resume_from", "assessed_digest")
        where = {"run": run.pk, "turn_id__in": chosen}
        got = _read(model=Turn, fields=shown, where=where, order_by=("-pk",))
        assert got == _orm(Turn, shown, where, ("-pk",))
        assert all(isinstance(row[3], list) for row in got)

    agree()


def test_the_rows_read_are_the_rows_stored(assessed):
    run = assessed
    turns = list(Turn.objects.filter(run=run).values_list("pk", flat=True))
    phases = values_read(model=Phase, fields=("turn", "name", "committed"), where={"turn__in": turns})
    assert len(phases) == Phase.objects.filter(turn__run=run).count() > 0
    lines = values_read(model=JournalRecord, fields=("seq", "line"), where={"run": run.pk}, order_by=("-seq",), limit=2)
    assert [seq for seq, _ in lines] == [run.last_seq, run.last_seq - 1]
    assert bytes(lines[0][1]) == bytes(JournalRecord.objects.get(run=run, seq=run.last_seq).line)
    assert values_read(model=JournalRecord, fields=("seq",), where={"run": run.pk, "turn__in": []}) == []


def test_a_longer_value_never_matches_a_shorter_key(assessed):
    """A parameter is never cut to its column's length: a turn id of 200 characters and one more is no id
    of 200."""
    run, long_id = assessed, "t" * 200
    Turn.objects.create(run=run, turn_id=long_id, first_seq=1)
    assert values_read(model=Turn, fields=("turn_id",), where={"run": run.pk, "turn_id": long_id}) == [(long_id,)]
    for where in ({"turn_id": long_id + "x"}, {"turn_id__in": [long_id + "x"]}):
        assert values_read(model=Turn, fields=("turn_id",), where={"run": run.pk, **where}) == []


@pytest.mark.parametrize(
    ("model", "fields", "where"),
    [
        (Turn, ("created_at",), {"run": 1}),  # a time
        (Turn, ("turn_id",), {"turn_id": None}),  # None means IS NULL to the ORM
        (Turn, ("turn_id",), {"turn_id__startswith": "t"}),
        (Turn, ("turn_id",), {"plan": "[]"}),  # a condition on a JSON column
        (Turn, ("turn_id",), {"run__run_id": "run-read"}),  # a join
        (Turn, ("turn_id",), {"turn_id__in": ["t1", None]}),
        (Phase, ("name",), {"turn__in": [Turn(pk=1)]}),  # an instance, not its pk
    ],
)
def test_what_it_cannot_read_is_refused_on_either_database(assessed, model, fields, where):
    with pytest.raises(ValueError, match="values_read"):
        values_read(model=model, fields=fields, where=where)
