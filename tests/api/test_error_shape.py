"""One error shape everywhere: every 4xx of the API, the framework's own refusals included, is
`{error, detail, line}` with a stable code, so that a runtime reads one field whatever refused it. Also the
limits a runtime keeps to, and the claim's lease as the runtime needs it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from recovery.models import TurnClaim
from tests.journal_builder import JournalBuilder
from tests.personas import make_runtime

pytestmark = pytest.mark.django_db
RECORDS = "/api/v1/runs/run-1/records"


def shape(answer, status: int, code: str) -> dict:
    assert answer.status_code == status, answer.content
    body = answer.json()
    assert set(body) >= {"error", "detail", "line"}, body
    assert body["error"] == code and isinstance(body["detail"], str) and body["detail"], body
    return body


def test_no_credentials_is_401_unauthenticated():
    shape(APIClient().get("/api/v1/runs"), 401, "unauthenticated")


def test_a_wrong_token_is_401_token_invalid():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer lxr_not-a-token")
    body = shape(client.get("/api/v1/runs"), 401, "token_invalid")
    assert "lxr_not-a-token" not in str(body)


def test_a_token_outside_its_prefix_is_403_run_forbidden_on_every_door():
    scoped = make_runtime("scoped", run_prefix="team-a-")
    b = JournalBuilder("run-1")
    b.plan("t1")
    shape(scoped.client.post(RECORDS, b.body(), content_type="application/x-ndjson"), 403, "run_forbidden")
    shape(scoped.client.get("/api/v1/runs/run-1"), 403, "run_forbidden")
    shape(scoped.client.get("/api/v1/runs/run-1/turns/t1/decision"), 403, "run_forbidden")
    shape(
        scoped.client.post("/api/v1/runs/run-1/turns/t1/claim", {"worker_id": "w"}, format="json"),
        403,
        "run_forbidden",
    )


def test_a_viewer_deciding_is_403_role_required(viewer_client, runtime):
    b = JournalBuilder()
    b.plan("t1")
    assert runtime.client.post(RECORDS, b.body(), content_type="application/x-ndjson").status_code == 200
    answer = viewer_client.post("/api/v1/runs/run-1/turns/t1/block", {"reason": "no"}, format="json")
    shape(answer, 403, "role_required")


def test_not_found_method_and_media_type(runtime):
    shape(runtime.client.get("/api/v1/runs/nosuch"), 404, "not_found")
    shape(runtime.client.delete("/api/v1/runs"), 405, "method_not_allowed")
    shape(runtime.client.post(RECORDS, b"<x/>", content_type="application/xml"), 415, "unsupported_media_type")


@override_settings(LOOPX_INGEST_MAX_LINE_BYTES=64)
def test_413_names_the_limit(runtime):
    b = JournalBuilder()
    b.plan("t1")
    body = shape(runtime.client.post(RECORDS, b.body(), content_type="application/x-ndjson"), 413, "line_too_large")
    assert (body["limit"], body["line"]) == (64, 1)


def test_the_limits_a_runtime_keeps_to(runtime):
    with override_settings(
        LOOPX_INGEST_MAX_LINE_BYTES=1000,
        LOOPX_INGEST_MAX_BATCH_BYTES=5000,
        LOOPX_INGEST_MAX_BATCH_RECORDS=7,
        LOOPX_CLAIM_LEASE_SECONDS=42,
    ):
        answer = runtime.client.get("/api/v1/limits")
    assert answer.status_code == 200
    assert answer.json() == {
        "max_line_bytes": 1000,
        "max_batch_bytes": 5000,
        "max_batch_records": 7,
        "claim_lease_seconds": 42,
    }
    shape(APIClient().get("/api/v1/limits"), 401, "unauthenticated")


# --- Claims -------------------------------------------------------------------------------------------------


def _claim(client, turn: str = "t1", worker: str = "w1"):
    return client.post(f"/api/v1/runs/run-1/turns/{turn}/claim", {"worker_id": worker}, format="json")


@override_settings(LOOPX_CLAIM_LEASE_SECONDS=30)
def test_a_claim_names_its_lease_and_an_aware_expiry(runtime):
    b = JournalBuilder()
    b.plan("t1")
    runtime.client.post(RECORDS, b.body(), content_type="application/x-ndjson")
    before = timezone.now()
    answer = _claim(runtime.client)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert expires.utcoffset() is not None
    assert body["lease_seconds"] == 30
    assert before + timedelta(seconds=30) <= expires <= timezone.now() + timedelta(seconds=30)


def test_claiming_a_finished_turn_is_nothing_to_recover_and_hands_out_no_token(runtime):
    b = JournalBuilder()
    b.full_turn("t1")
    runtime.client.post(RECORDS, b.body(), content_type="application/x-ndjson")
    runtime.client.get("/api/v1/runs/run-1/turns/t1/decision")  # assessed: complete
    body = shape(_claim(runtime.client), 409, "nothing_to_recover")
    assert body["decision"] == "complete"
    assert not TurnClaim.objects.exists()


def test_not_happened_while_a_workers_lease_holds_is_claim_live(runtime, operator_client):
    b = JournalBuilder()
    b.plan("t1")
    b.commit("t1", "plan", "envelope")
    b.dispatch("t1", "send", effect_class="unsafe")
    runtime.client.post(RECORDS, b.body(), content_type="application/x-ndjson")
    assert _claim(runtime.client).status_code == 200
    approve = "/api/v1/runs/run-1/turns/t1/approve"
    evidence = {"reason": "checked the mailbox", "evidence": {"send": "not_happened"}}
    body = shape(operator_client.post(approve, evidence, format="json"), 409, "claim_live")
    assert body["holder"] == "w1"
    gate = runtime.client.get("/api/v1/runs/run-1/turns/t1/decision").json()
    assert (gate["state"], gate["reason"]) == ("hold", "effect_indeterminate")
    # Once the lease has run out the finding is taken.
    TurnClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert operator_client.post(approve, evidence, format="json").status_code == 200
