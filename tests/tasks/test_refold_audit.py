"""The re-fold audit folds a sample of runs again, whole, and compares with the assessment each run shows: an
honest store raises nothing, a stored row or output that differs is an `assessment_diverged` finding naming
the run."""

from __future__ import annotations

import pytest
from django_celery_beat.models import PeriodicTask

from audits.checks import audit_refold
from journals.models import Run
from ops.demo import workload_lines
from recovery.background import assessment_run
from recovery.findings.models import Finding
from recovery.models import Assessment, OutputEntry
from recovery.state import picture_rows
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db


def _grown(run_id: str, turns: int = 6, size: int = 7) -> Run:
    lines = workload_lines(run_id, turns=turns)
    for start in range(0, len(lines), size):
        ingest(run_id, lines[start : start + size])
        assert assessment_run(run_id=run_id) == "stored"
    return Run.objects.get(run_id=run_id)


def test_an_honest_store_raises_nothing(published):
    _grown("run-honest")
    _grown("run-other")
    report = audit_refold(sample=10).as_dict()
    assert report["checked"] == 2 and report["agreed"] == 2
    assert not Finding.objects.filter(kind="assessment_diverged").exists()
    assert PeriodicTask.objects.get(name="audit: re-fold").task == "audits.tasks.audit_refold"


def test_a_tampered_row_is_a_finding_naming_the_run(published):
    run = _grown("run-row")
    _grown("run-fine")
    shown = Assessment.objects.filter(run=run).latest()
    row = picture_rows(run_id=run.pk, through=shown.pk).select_related("turn").get(turn__turn_id="t1")
    assert row.assessment_id < shown.pk  # a turn the last batch did not change: its row is an older one
    row.decision, row.reason = "resume", None
    row.save(update_fields=["decision", "reason"])
    report = audit_refold(sample=10).as_dict()
    assert report["diverged"] == 1 and report["agreed"] == 1
    finding = Finding.objects.get(kind="assessment_diverged")
    assert finding.run == run and finding.fact_key == f"assessment:{shown.pk}"
    assert finding.evidence["turns"] == ["t1"] and finding.evidence["output_differs"] is False
    audit_refold(sample=10)  # seen again: the same finding, touched
    assert Finding.objects.filter(kind="assessment_diverged").count() == 1


def _output_tampered(run: Run) -> dict[str, object]:
    report = audit_refold(sample=5).as_dict()
    assert report["diverged"] == 1
    finding = Finding.objects.get(kind="assessment_diverged")
    assert finding.run == run and finding.evidence["output_differs"] is True
    return report


def test_a_tampered_output_entry_is_a_finding(published):
    run = _grown("run-output")
    shown = Assessment.objects.filter(run=run).latest()
    # The first turn's entry in force was written by an older assessment: the last batch did not change it.
    entry = OutputEntry.objects.filter(run=run, ordinal=0).order_by("-assessment_id").first()
    assert entry is not None and entry.assessment_id < shown.pk
    assert audit_refold(sample=5).as_dict()["agreed"] == 1
    entry.entry = {**entry.entry, "decision": "resume" if entry.entry["decision"] == "complete" else "complete"}
    entry.save(update_fields=["entry"])
    _output_tampered(run)


def test_a_tampered_run_level_output_is_a_finding(published):
    run = _grown("run-head")
    shown = Assessment.objects.filter(run=run).latest()
    Assessment.objects.filter(pk=shown.pk).update(output={**shown.output, "records": shown.output["records"] + 1})
    _output_tampered(run)


def test_a_dropped_output_entry_is_a_finding(published):
    run = _grown("run-dropped")
    shown = Assessment.objects.filter(run=run).latest()
    newest = OutputEntry.objects.filter(run=run, assessment=shown).order_by("ordinal").first()
    assert newest is not None
    newest.delete()  # the entry before it (or none) is in force again
    _output_tampered(run)


def test_a_run_whose_prefix_moved_is_left_for_later(published):
    lines = workload_lines("run-moved", turns=4)
    ingest("run-moved", lines[:6])
    assessment_run(run_id="run-moved")
    ingest("run-moved", lines[6:])  # not assessed yet
    assert audit_refold(sample=5).as_dict()["moved"] == 1
    assert not Finding.objects.exists()
