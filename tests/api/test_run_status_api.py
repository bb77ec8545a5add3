"""The runs list of the API carries each run's status, filters by it and sorts by it (docs/api.md); the run's
own answer carries it too. The status is the one the console shows (journals.models.run_status_shown)."""

from __future__ import annotations

import pytest

from engine.writer import JournalWriter
from journals.models import Run, RunStatus
from journals.services import records_ingest
from tests.console.scenarios import runs_of_each_status

pytestmark = pytest.mark.django_db


@pytest.fixture
def four_runs(db) -> dict[str, Run]:
    return runs_of_each_status()


def _ids(answer) -> list[str]:
    assert answer.status_code == 200, answer.content
    return [row["run_id"] for row in answer.json()["results"]]


def test_each_run_says_its_status_and_the_list_filters_by_it(viewer_client, four_runs):
    rows = viewer_client.get("/api/v1/runs").json()["results"]
    assert {row["run_id"]: row["status"] for row in rows} == {r.run_id: s for s, r in four_runs.items()}
    for status, run in four_runs.items():
        assert _ids(viewer_client.get("/api/v1/runs", {"status": status})) == [run.run_id]
        assert viewer_client.get(f"/api/v1/runs/{run.run_id}").json()["status"] == status
    refused = viewer_client.get("/api/v1/runs", {"status": "probably_fine"})
    assert refused.status_code == 400 and "status" in refused.content.decode()


def test_the_list_sorts_by_status_blocked_first(viewer_client, four_runs):
    by_status = [four_runs[str(s)].run_id for s in RunStatus]
    assert _ids(viewer_client.get("/api/v1/runs", {"ordering": "status"})) == by_status
    assert _ids(viewer_client.get("/api/v1/runs", {"ordering": "-status"})) == by_status[::-1]
    # The other names sort too: most records first (the payments run), the never-assessed run's one last.
    answer = viewer_client.get("/api/v1/runs", {"ordering": "-records"}).json()["results"]
    assert [row["run_id"] for row in answer][0] == "pay-run-1" and answer[-1]["run_id"] == "new-run"
    counts = [row["record_count"] for row in answer]
    assert counts == sorted(counts, reverse=True) and len(set(counts)) > 1


def test_a_done_run_with_records_not_yet_assessed_runs(viewer_client, four_runs):
    w = JournalWriter("done-run")
    w.complete_turn("t-1")
    w.plan("t-2")
    records_ingest(run_id="done-run", body=w.data(), content_type="application/x-ndjson", token=None)
    assert Run.objects.get(run_id="done-run").status == RunStatus.DONE  # the assessed prefix's
    assert viewer_client.get("/api/v1/runs/done-run").json()["status"] == "running"
    assert "done-run" in _ids(viewer_client.get("/api/v1/runs", {"status": "running"}))
    assert _ids(viewer_client.get("/api/v1/runs", {"status": "done"})) == []
