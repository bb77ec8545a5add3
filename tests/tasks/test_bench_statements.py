"""The growth benchmark's statement listing (``--statements``) lists every statement of an assessment,
those Django's cursor sends and, on PostgreSQL, the COPY and unnest writes sent on psycopg's own cursor;
and it leaves psycopg's cursor as it found it."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from benchmarks.bench_growth import Statements
from kernel.dialect import on_postgresql
from ops.demo import workload_lines
from recovery.background import assessment_run
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db


def test_an_assessment_s_statements_are_listed_and_psycopg_restored(published):
    execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy
    ingest("run-listed", workload_lines("run-listed", turns=3))
    with Statements() as traced:
        assert assessment_run(run_id="run-listed") == "stored"
    assert psycopg.Cursor.execute is execute and psycopg.Cursor.copy is copy
    listed = [sql for _, sql in traced.timed]
    assert all(seconds >= 0 for seconds, _ in traced.timed)
    assert any(sql.startswith("INSERT INTO") and "recovery_assessment" in sql for sql in listed)
    own = [sql for sql in listed if sql.startswith("(psycopg) ")]
    if on_postgresql(connection):
        assert any('COPY "journals_phase"' in sql for sql in own)
        assert any('COPY "recovery_turnassessment"' in sql for sql in own)
    else:
        assert own == []
    # Nothing is listed once the listing has ended.
    count = len(traced.timed)
    ingest("run-listed", workload_lines("run-listed", turns=5)[len(workload_lines("run-listed", turns=3)) :])
    assert assessment_run(run_id="run-listed") == "stored"
    assert len(traced.timed) == count
