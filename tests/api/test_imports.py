"""The import API: POST /api/v1/imports reads the history at the door (a refusal or conflict stores
nothing), answers 202, and the convert_history task stores the run; the same bytes again answer 200 with
the same import; GET /api/v1/imports/{id}, /runs/{run}/import and the turn's intent classes follow it."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from journals.models import JournalRecord, Run, Turn
from recovery.imports.models import HistoryImport, HistorySource, ImportedIntent, ImportedRun
from recovery.imports.services import effect_map_create
from tests.imports.charge_history import RUN, SECRET, history_bytes
from tests.personas import make_runtime

pytestmark = pytest.mark.django_db

MAP = {"SendReceipt": "idempotent", "LookupOrder": "safe"}


def upload(client, data: bytes, name: str = "charge.json", **fields: str):
    form = {"file": SimpleUploadedFile(name, data, content_type="application/json"), "source": "temporal", **fields}
    return client.post("/api/v1/imports", form, format="multipart")


def counts() -> tuple[int, int, int, int, int]:
    return (
        HistorySource.objects.count(),
        HistoryImport.objects.count(),
        ImportedRun.objects.count(),
        Run.objects.count(),
        JournalRecord.objects.count(),
    )


def test_an_operator_uploads_and_the_task_stores_the_run_naming_its_source(
    operator, operator_client, eager_tasks, django_capture_on_commit_callbacks
):
    effect_map_create(name="orders", entries=MAP, actor=operator, reason="our activities")
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(operator_client, history_bytes(), effect_map="orders")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["state"] == "received"  # the answer does not wait for the task
    assert response["Location"] == body["status_url"]
    status = operator_client.get(body["status_url"]).json()
    assert status["state"] == "imported", status
    assert status["source"]["system"] == "temporal"
    assert status["source"]["name"] == "charge.json"
    assert status["source"]["events"] == 14
    assert status["source"]["skipped"]["WorkflowTaskStarted"] == 1
    assert status["effect_map"] == {"name": "orders", "version": 1, "entries": MAP, "default": "unsafe"}
    assert [r["run"] for r in status["runs"]] == [RUN]
    assert status["progress"]["percent"] == 100
    run = Run.objects.get(run_id=RUN)
    assert run.record_count == status["result"]["records"] > 0
    assert SECRET.encode() not in b"".join(bytes(x) for x in JournalRecord.objects.values_list("line", flat=True))
    # The run's own page in the API names where it came from.
    source = operator_client.get(f"/api/v1/runs/{RUN}/import").json()
    assert source["id"] == body["id"] and source["source"]["sha256"] == body["source"]["sha256"]
    # The turn's intents say which entry decided each class.
    classes = operator_client.get(f"/api/v1/runs/{RUN}/turns/workflow/intent-classes").json()
    by_intent = {c["intent"]: c for c in classes}
    assert by_intent["activity:1"]["decided"] == "default" and by_intent["activity:1"]["effect_class"] == "unsafe"
    assert by_intent["activity:1"]["map_key"] is None and by_intent["activity:1"]["name"] == "ChargeCard"
    assert by_intent["activity:2"] == {
        "intent": "activity:2",
        "effect_class": "idempotent",
        "decided": "entry",
        "map_key": "SendReceipt",
        "name": "SendReceipt",
        "effect_map": "orders",
        "effect_map_version": 1,
    }
    assert by_intent["activity:3"]["effect_class"] == "safe"
    # The run is assessed like any other: the timed-out charge, unsafe, blocks its turn.
    turn = Turn.objects.get(run=run, turn_id="workflow")
    assert turn.decision == "blocked"


def test_a_runtime_token_uploads_and_sees_only_its_own_imports(
    eager_tasks, django_capture_on_commit_callbacks, viewer_client
):
    runtime = make_runtime("temporal-importer", run_prefix="temporal-")
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(runtime.client, history_bytes())
    assert response.status_code == 202, response.content
    url = response.json()["status_url"]
    assert runtime.client.get(url).json()["state"] == "imported"
    assert viewer_client.get(url).status_code == 200  # viewers read every import
    other = make_runtime("someone-else")
    assert other.client.get(url).status_code == 404


def test_a_token_whose_prefix_does_not_cover_the_run_stores_nothing():
    runtime = make_runtime("other-runs", run_prefix="payments-")
    before = counts()
    response = upload(runtime.client, history_bytes())
    assert response.status_code == 403 and response.json()["error"] == "run_forbidden"
    assert counts() == before


def test_a_viewer_and_an_outsider_are_refused_and_nothing_is_stored(viewer_client, outsider_client, client):
    before = counts()
    assert upload(viewer_client, history_bytes()).status_code == 403
    assert upload(outsider_client, history_bytes()).status_code == 403
    assert upload(client, history_bytes()).status_code in (401, 403)
    assert counts() == before


def test_the_same_file_twice_is_the_same_import_and_changes_nothing(
    operator_client, eager_tasks, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = upload(operator_client, history_bytes())
    assert first.status_code == 202
    before = counts()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        again = upload(operator_client, history_bytes(), name="renamed.json")
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"] and again.json()["state"] == "imported"
    assert again.json()["source"]["name"] == "charge.json"  # the first upload's name: nothing changed
    assert callbacks == [] and counts() == before


def test_a_different_file_for_the_same_run_is_a_typed_conflict_that_stores_nothing(
    operator_client, eager_tasks, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        assert upload(operator_client, history_bytes()).status_code == 202
    before = counts()
    response = upload(operator_client, history_bytes(close=True))  # the same execution, later on
    assert response.status_code == 409, response.content
    assert response.json()["error"] == "import_conflict" and response.json()["run"] == RUN
    assert counts() == before


def test_a_history_for_a_run_a_runtime_wrote_itself_is_a_conflict(operator_client):
    from journals.services import records_ingest
    from tests.journal_builder import JournalBuilder

    b = JournalBuilder(RUN)
    b.full_turn("t1")
    records_ingest(run_id=RUN, body=b.body(), content_type="application/x-ndjson", token=None)
    before = counts()
    response = upload(operator_client, history_bytes())
    assert response.status_code == 409 and response.json()["error"] == "import_conflict"
    assert counts() == before


@pytest.mark.parametrize(
    "data",
    [
        b"not json at all",
        b"{}",
        json.dumps({"events": []}).encode(),
        # ids that do not run 1..n
        json.dumps({"events": [{"eventId": 2, "eventType": "WorkflowExecutionStarted"}]}).encode(),
    ],
    ids=["not-json", "no-events", "empty-events", "ids-skip"],
)
def test_a_malformed_history_is_a_typed_refusal_that_stores_nothing(operator_client, data, no_broker):
    before = counts()
    response = upload(operator_client, data)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] and body["error"] not in ("invalid_request", "import_missing")  # the importer's code
    assert counts() == before and ImportedIntent.objects.count() == 0


def test_a_missing_file_or_unknown_source_or_map_is_refused(operator_client):
    before = counts()
    assert operator_client.post("/api/v1/imports", {"source": "temporal"}, format="multipart").json()["error"] == (
        "import_missing"
    )
    bad = upload(operator_client, history_bytes(), effect_map="no-such-map")
    assert bad.status_code == 400 and bad.json()["error"] == "effect_map_unknown"
    form = {"file": SimpleUploadedFile("h.json", history_bytes()), "source": "cadence"}
    assert operator_client.post("/api/v1/imports", form, format="multipart").status_code == 400
    assert counts() == before


def test_a_file_over_the_limit_is_refused_before_it_is_read(operator_client, settings):
    settings.LOOPX_IMPORT_MAX_BYTES = 100
    before = counts()
    response = upload(operator_client, history_bytes())
    assert response.status_code == 413 and response.json()["error"] == "history_too_large"
    assert counts() == before


def test_the_schema_documents_the_import_endpoints(operator_client):
    schema = operator_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    post = schema["paths"]["/api/v1/imports"]["post"]
    assert post["operationId"] == "imports_upload"
    assert {"200", "202", "400", "409", "413"} <= set(post["responses"])
    assert "multipart/form-data" in post["requestBody"]["content"]
    assert "/api/v1/imports/{import_id}" in schema["paths"]
    assert "/api/v1/runs/{run_id}/turns/{turn_id}/intent-classes" in schema["paths"]


def test_a_step_functions_history_is_imported_the_same_way(
    operator, operator_client, eager_tasks, django_capture_on_commit_callbacks
):
    from tests.imports.helpers import SECRET as SF_SECRET
    from tests.imports.test_stepfunctions import Execution

    x = Execution()
    entered = x.enter("Charge", 1)
    scheduled = x.task(entered)
    x.add("TaskTimedOut", scheduled, resourceType="lambda", resource="invoke")
    effect_map_create(name="lambdas", entries={"invoke": "idempotent"}, actor=operator, reason="keyed lambdas")
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(operator_client, x.data(), name="exec.json", source="stepfunctions", effect_map="lambdas")
    assert response.status_code == 202, response.content
    status = operator_client.get(response.json()["status_url"]).json()
    assert status["state"] == "imported" and status["source"]["system"] == "stepfunctions"
    (row,) = ImportedRun.objects.all()
    (intent,) = ImportedIntent.objects.filter(imported_run=row)
    assert (intent.decided, intent.map_key, intent.name, intent.effect_class) == (
        "entry",
        "invoke",
        "invoke",
        "idempotent",
    )
    lines = b"".join(bytes(x) for x in JournalRecord.objects.values_list("line", flat=True))
    assert SF_SECRET.encode() not in lines and Run.objects.filter(run_id=row.run_ident).exists()
