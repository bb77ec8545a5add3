"""The turn page reads a turn's row in force under the assessment the run shows, even when that row was
written by an older assessment (rows are stored only for the turns that changed)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from engine.writer import JournalWriter
from journals.models import JournalRecord, Run
from journals.services import records_ingest
from recovery.services import assessment_refresh
from recovery.state import picture_row

pytestmark = pytest.mark.django_db


def _send(w: JournalWriter, start: int) -> Run:
    body = b"\n".join(w.lines[start:]) + b"\n"
    return records_ingest(run_id=w.run, body=body, content_type="application/x-ndjson", token=None).run


def test_a_turn_the_newest_assessment_left_alone_shows_its_block_and_its_fact(op_pages):
    w = JournalWriter("pic-run", keep_lines=True)
    w.plan("t", lineage="job")
    w.commit("t", "plan")
    w.commit("t", "dispatch")  # skips envelope: phase_prefix_violation at lsn 2
    first = assessment_refresh(run=_send(w, 0))
    sent = len(w.lines)
    w.plan("other", lineage="job-2")
    run = _send(w, sent)
    second = assessment_refresh(run=run)
    turn = run.turns.get(turn_id="t")
    row = picture_row(turn=turn, through=None)
    assert row is not None and row.assessment_id == first.pk < second.pk
    seq = JournalRecord.objects.get(run=run, branch=0, lsn=2).seq
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert "no phase prefix" in html or "phase_prefix_violation" in html
    assert f"journal line {seq}, branch 0, lsn 2" in html
