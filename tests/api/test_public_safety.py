"""Public safety (contract section 8): secrets planted in records, in reported actions and in refused
input never appear in any API answer or log line; runtime tokens never appear either."""

from __future__ import annotations

import json
import logging

import pytest

from journals.models import Run
from journals.selectors import journal_bytes
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db

SECRETS = [f"PLANTED-SECRET-{n}-d41d8cd9" for n in range(9)]


@pytest.fixture
def planted(runtime) -> JournalBuilder:
    b = JournalBuilder("run-s")
    b.plan("t1", api_key=SECRETS[0], meta={"auth": {"token": SECRETS[1]}, "list": [{"credential": SECRETS[2]}]})
    b.commit("t1", "plan", "envelope")
    b.dispatch("t1", "charge", effect_class="unsafe", args={"card_password": SECRETS[3], "Authorization": SECRETS[4]})
    b.dispatch("t1", "mail", effect_class="idempotent", idempotency_key="key-visible", client_secret=SECRETS[5])
    return b


def _broken_run(client) -> None:
    """A contract-breaking record (a float) carrying a secret is stored as evidence, and redacted."""
    b = JournalBuilder("run-u")
    b.plan("t1")
    b.record("phase_committed", turn="t1", phase="plan", ratio=1.5, secret=SECRETS[7])
    b.record("checkpoint", covers_lsn=0, state_digest="0" * 64, state={"ticket": SECRETS[6]})
    answer = client.post("/api/v1/runs/run-u/records", b.body(), content_type="application/x-ndjson")
    assert answer.status_code == 200 and answer.json()["stored"] == 3


def _all_reads(client, audit_id: int) -> list:
    base = "/api/v1/runs/run-s"
    urls = [
        "/api/v1/runs",
        base,
        base + "/records",
        base + "/branches",
        base + "/turns",
        base + "/assessments",
        "/api/v1/turns",
        base + "/turns/t1",
        base + "/turns/t1/intents",
        base + "/turns/t1/records",
        base + "/turns/t1/decision",
        base + "/turns/t1/evidence",
        base + "/turns/t1/gate-decisions",
        base + "/turns/t1/recovery",
        base + f"/turns/t1/recovery/{audit_id}",
        "/api/v1/audits",
        "/api/v1/operator-actions",
    ]
    answers = [client.get(url) for url in urls]
    assessment = answers[5].json()["results"][0]["id"]
    answers.append(client.get(f"{base}/assessments/{assessment}"))
    return answers


def test_secrets_never_leave_the_store(planted, runtime, operator_client, viewer_client, caplog):
    caplog.set_level(logging.DEBUG)
    base = "/api/v1/runs/run-s/turns/t1"
    answers = [runtime.client.post("/api/v1/runs/run-s/records", planted.body(), content_type="text/plain")]
    answers.append(
        operator_client.post(
            base + "/approve", {"reason": "checked", "evidence": {"charge": "not_happened"}}, format="json"
        )
    )
    claim = runtime.client.post(base + "/claim", {"worker_id": "w1"}, format="json")
    token = claim.json()["fencing_token"]
    opened = runtime.client.post(base + "/recovery", {"fencing_token": token}, format="json")
    audit = opened.json()["id"]
    reported = runtime.client.post(
        base + f"/recovery/{audit}/actions",
        {"fencing_token": token, "kind": "intent", "target": "charge", "detail": {"api_key": SECRETS[8]}},
        format="json",
    )
    answers += [claim, opened, reported]
    answers.append(runtime.client.post(base + f"/recovery/{audit}/close", {"fencing_token": token}, format="json"))
    _broken_run(runtime.client)
    for url in ("records", "turns/t1", "turns/t1/records", "turns/t1/decision"):
        answers.append(viewer_client.get(f"/api/v1/runs/run-u/{url}"))
    answers += _all_reads(viewer_client, audit)
    answers += _all_reads(runtime.client, audit)
    assert all(a.status_code < 300 for a in answers), [(a.status_code, a.content[:200]) for a in answers]

    for answer in answers:
        for secret in SECRETS + [runtime.raw]:
            assert secret.encode() not in answer.content, answer.request["PATH_INFO"]
    for secret in SECRETS + [runtime.raw]:
        assert secret not in caplog.text
    # Redacted, not dropped: the projections show the placeholder where the secret was.
    record = viewer_client.get("/api/v1/runs/run-s/records").json()["results"][0]["record"]
    assert record["api_key"] == "[redacted]" and record["meta"]["auth"]["token"] == "[redacted]"
    assert record["meta"]["list"][0]["credential"] == "[redacted]"
    dispatch = viewer_client.get("/api/v1/runs/run-s/records").json()["results"][4]["record"]
    assert dispatch["idempotency_key"] == "key-visible"
    # The stored bytes keep every secret: they are part of the digest chain and of the export.
    assert all(s.encode() in journal_bytes(run=Run.objects.get(run_id="run-s")) for s in SECRETS[:6])


def test_refusals_never_quote_secrets(planted, runtime, caplog):
    caplog.set_level(logging.DEBUG)
    url = "/api/v1/runs/run-s/records"
    runtime.client.post(url, planted.body(), content_type="application/x-ndjson")
    changed = dict(json.loads(planted.lines[0]), api_key="PLANTED-OTHER-SECRET")
    conflict = runtime.client.post(url, json.dumps(changed).encode() + b"\n", content_type="application/x-ndjson")
    torn = runtime.client.post(url, planted.lines[1][:-5] + b"\n", content_type="application/x-ndjson")
    other_run = runtime.client.post(
        "/api/v1/runs/run-t/records", planted.lines[0] + b"\n", content_type="application/x-ndjson"
    )
    assert (conflict.status_code, torn.status_code, other_run.status_code) == (409, 400, 400)
    for answer in (conflict, torn, other_run):
        for secret in [*SECRETS, "PLANTED-OTHER-SECRET", runtime.raw]:
            assert secret.encode() not in answer.content
    for secret in [*SECRETS, "PLANTED-OTHER-SECRET", runtime.raw]:
        assert secret not in caplog.text
