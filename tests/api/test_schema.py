"""The OpenAPI schema is complete and valid, and the API holds to it: schemathesis fuzzes every
operation (as a runtime and as an operator) and no input gives a 500."""

from __future__ import annotations

import io
import json
from urllib.parse import urlencode

import pytest
import schemathesis
from django.core.management import call_command
from django.http import HttpResponse
from django.test import Client
from hypothesis import HealthCheck, settings

from tests.journal_builder import JournalBuilder
from tests.personas import make_runtime

pytestmark = pytest.mark.django_db


def test_schema_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out), stderr=io.StringIO())
    text = out.read_text()
    for operation in (
        "records_ingest",
        "turn_decision",
        "turn_claim",
        "recovery_open",
        "recovery_close",
        "turn_approve",
    ):
        assert f"operationId: {operation}" in text
    assert "runtimeToken" in text and "application/x-ndjson" in text


@schemathesis.serializer("application/x-ndjson", "application/jsonl")
def _jsonl(ctx: object, value: object) -> bytes:
    """The JSONL bodies of the ingest endpoint are strings in the schema: sent as their UTF-8 bytes (lone
    surrogates too, escaped, so that the bytes are whatever the generator made)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "surrogatepass")


def _load_schema() -> schemathesis.specs.openapi.schemas.OpenApiSchema:
    """The schema exactly as /api/schema/ serves it (generated in-process: collection touches no database),
    bound to the WSGI application for schemathesis' own bookkeeping."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    from loopx_site.wsgi import application

    document = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))
    loaded = schemathesis.openapi.from_dict(document)
    loaded.app = application
    return loaded


@pytest.fixture
def seeded(db) -> str:
    """A run with turns in every gate state, so that fuzzed paths sometimes name real things."""
    runtime = make_runtime("fuzz-runtime")
    b = JournalBuilder("run-1")
    b.full_turn("t1")
    b.plan("t2")
    b.commit("t2", "plan")
    b.dispatch("t2", "charge", effect_class="unsafe", api_key="FUZZ-SECRET")
    runtime.client.post("/api/v1/runs/run-1/records", b.body(), content_type="application/x-ndjson")
    return runtime.raw


@pytest.fixture
def operator_session(operator) -> Client:
    """The operator's side of the API (approve, block): a logged-in session (the test client skips CSRF)."""
    client = Client()
    client.force_login(operator)
    return client


schema = _load_schema()


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_never_answers_500(case, seeded, operator_session):
    """Each generated request is sent as the runtime (token) and as an operator (session)."""
    for client, headers in ((Client(), {"Authorization": f"Bearer {seeded}"}), (operator_session, {})):
        response = _send(client, case, headers)
        # A streamed answer (the trail's export) is read whole, so that a secret in it is seen too.
        content = b"".join(response.streaming_content) if response.streaming else response.content
        assert response.status_code < 500, (case.method, case.path, response.status_code, content[:300])
        assert b"FUZZ-SECRET" not in content


def _send(client: Client, case, headers: dict[str, str]) -> HttpResponse:
    """Send the generated request through Django's test client: the whole stack (middleware, DRF), inside
    the test's transaction (a bare WSGI call would close the test connection on request_finished)."""
    request = case.as_transport_kwargs(headers=headers)
    query = request.get("query_string") or {}
    # A list parameter sent as one comma-separated value (the runs list's `ordering`) comes already encoded.
    encoded = query if isinstance(query, str) else urlencode(query, doseq=True)
    path = request["path"] + ("?" + encoded if encoded else "")
    if "json" in request:
        body: bytes | str = json.dumps(request["json"])
    else:
        body = request.get("data") or b""
    all_headers = dict(request.get("headers") or {})
    content_type = all_headers.pop("Content-Type", "application/octet-stream")
    return client.generic(request["method"], path, data=body, content_type=content_type, headers=all_headers)
