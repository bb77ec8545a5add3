"""Structured logs: one JSON object a line with request/task context, request ids carried into Celery
tasks, and no secret in any line whatever the workload plants."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.db import connection

from journals.models import Run, Turn
from kernel import context
from kernel.logging import JsonFormatter, RedactingFilter, scrub
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder

URL = "/api/v1/runs/{}/records"
logger = logging.getLogger("loopx.tests")


@pytest.mark.django_db
def test_lines_are_json_with_request_id_and_context(client, log_stream):
    response = client.get("/api/v1/runs", HTTP_X_REQUEST_ID="req-abc.123")
    assert response["X-Request-ID"] == "req-abc.123"
    forged = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\nwith newline")
    assert forged["X-Request-ID"] != "bad id\nwith newline" and len(forged["X-Request-ID"]) == 32
    with context.bind(run="run-7", turn="turn-3"):
        logger.info("inside a turn", extra={"event": "test.bound", "count": 2})
    records = log_stream.records()
    access = [r for r in records if r.get("event") == "http.request" and r["path"] == "/api/v1/runs"]
    assert access and access[0]["request_id"] == "req-abc.123"
    assert {"time", "level", "logger", "message", "run", "turn", "request_id", "task_id"} <= set(access[0])
    bound = [r for r in records if r.get("event") == "test.bound"]
    assert bound == [bound[0]] and (bound[0]["run"], bound[0]["turn"], bound[0]["count"]) == ("run-7", "turn-3", 2)
    assert bound[0]["request_id"] is None  # outside any request


def test_request_id_travels_into_the_task_and_its_log_lines():
    """A real publish and a real worker (in-memory broker): the worker's line for the task carries the
    publishing request's id and the task's own id."""
    from celery import Celery, current_app
    from celery.contrib.testing.worker import start_worker

    from loopx_site.celery import app as project_app

    app = Celery("ops-logging-test", broker="memory://", backend="cache+memory://")
    app.conf.task_always_eager = False
    app.conf.worker_hijack_root_logger = False  # as settings.CELERY_WORKER_HIJACK_ROOT_LOGGER
    seen: dict[str, str | None] = {}
    # The starting worker may reconfigure the root logger's handlers: watch the task's logger directly,
    # through the same formatter and filter as settings.LOGGING.
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    task_logger = logging.getLogger("loopx.tests.task")
    task_logger.addHandler(handler)

    @app.task(name="ops_test.log_something")
    def log_something() -> str:
        logging.getLogger("loopx.tests.task").info("inside the task", extra={"event": "test.task"})
        seen.update(context.current())
        return "ok"

    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            with context.bind(request_id="req-into-task"):
                result = log_something.delay()
            assert result.get(timeout=20) == "ok"
    finally:
        # The worker made its app the process's current and default one; a service publishes through the
        # current app, so the project's goes back in place for the tests that run after this one.
        project_app.set_current()
        project_app.set_default()
    assert current_app._get_current_object() is project_app
    assert seen["request_id"] == "req-into-task" and seen["task_id"] == result.id
    task_logger.removeHandler(handler)
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert [(r["event"], r["request_id"], r["task_id"]) for r in lines] == [("test.task", "req-into-task", result.id)]


def test_filter_and_formatter_scrub_every_shape():
    raw = "lxr_" + "A1b2C3d4" * 5
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "calling with Authorization: Bearer %s", (raw,), None)
    record.password = "hunter2-PLANTED"
    record.details = {"token": "tok-PLANTED", "ok": 1, "nested": [{"client_secret": "cs-PLANTED"}]}
    record.note = f"token={raw} and api_key: 'k-PLANTED'"
    record.idempotency_key = "visible-key"
    try:
        raise ValueError(f"bad header Bearer {raw}")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert RedactingFilter().filter(record)
    line = JsonFormatter().format(record)
    out = json.loads(line)
    assert "PLANTED" not in line and raw not in line
    assert out["password"] == "[redacted]" and out["details"]["token"] == "[redacted]"
    assert out["details"]["nested"] == [{"client_secret": "[redacted]"}] and out["details"]["ok"] == 1
    assert out["idempotency_key"] == "visible-key"
    assert "ValueError" in out["exc"]
    assert scrub('\\"api_key\\": \\"sk-esc\\"') == '\\"api_key\\": \\"[redacted]\\"'


@pytest.mark.django_db
def test_no_secret_in_any_log_line(client, runtime, operator, log_stream, settings, webhook_receiver,
                                    django_capture_on_commit_callbacks):
    """Plant tokens and secret fields in records, requests and log calls; run ingest, assessment, page
    views and a webhook delivery; search every line written."""
    from notifications import delivery
    from notifications.models import Webhook

    planted = {
        "runtime token": runtime.raw,
        "wrong token": "lxr_PLANTEDwrongTokenValue000000000000",
        "record api_key": "sk-PLANTED-record-key",
        "record nested password": "PLANTED-nested-password",
        "torn line secret": "PLANTED-torn-secret",
        "query token": "PLANTED-query-token",
        "extra password": "PLANTED-extra-password",
        "extra nested token": "PLANTED-extra-token",
        "message secret": "PLANTED-message-secret",
        "webhook secret": "whsec-PLANTED-0123456789",
    }
    settings.LOG_LEVEL = "DEBUG"
    root = logging.getLogger()
    saved_level = root.level
    root.setLevel(logging.DEBUG)
    db_logger = logging.getLogger("django.db.backends")
    saved_db_level = db_logger.level
    db_logger.setLevel(logging.DEBUG)
    connection.force_debug_cursor = True  # every SQL statement, with its parameters, is logged
    try:
        b = JournalBuilder("secret-run")
        nested = {"auth": {"password": planted["record nested password"]}}
        b.plan("t1", api_key=planted["record api_key"], options=nested)
        b.commit("t1", "plan")
        assert client.post(URL.format("secret-run"), b.body(), content_type="application/x-ndjson",
                           HTTP_AUTHORIZATION=f"Bearer {runtime.raw}").status_code == 200
        torn = ('{"v":2,"run":"secret-run","branch":0,"lsn":9,"secret":"' + planted["torn line secret"] + '"').encode()
        assert client.post(URL.format("secret-run"), torn + b"\n", content_type="application/x-ndjson",
                           HTTP_AUTHORIZATION=f"Bearer {runtime.raw}").status_code == 400
        assert client.get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {planted['wrong token']}").status_code == 401
        assert client.get(f"/api/v1/runs?token={planted['query token']}").status_code in (401, 403)
        records = client.get("/api/v1/runs/secret-run/records", HTTP_AUTHORIZATION=f"Bearer {runtime.raw}")
        assert records.status_code == 200

        run = Run.objects.get(run_id="secret-run")
        assessment_refresh(run=run)
        client.force_login(operator)
        turn = Turn.objects.get(run=run, turn_id="t1")
        for page in ("/", "/runs/", f"/runs/{run.pk}/", "/turns/", f"/turns/{turn.pk}/", "/findings/"):
            assert client.get(page, follow=True).status_code == 200, page

        Webhook.objects.create(name="h", url=webhook_receiver.url, secret=planted["webhook secret"],
                               events=["turn.blocked"])
        webhook_receiver.statuses = [500]
        [pk] = delivery.enqueue("turn.blocked", ("secret-run", "t1", 1), {"run": "secret-run", "api_key": "x"})
        delivery.attempt(pk)
        settings.LOOPX_WEBHOOK_BACKOFF_SECONDS = 0
        from notifications.models import WebhookDelivery

        WebhookDelivery.objects.filter(pk=pk).update(next_attempt_at=run.created_at)
        assert delivery.attempt(pk) == "delivered"

        logger.info("calling upstream with Authorization: Bearer %s", runtime.raw)
        logger.warning(
            "retrying",
            extra={"password": planted["extra password"], "details": {"token": planted["extra nested token"]},
                   "headers": {"Authorization": f"Bearer {runtime.raw}"}},
        )
        logger.info("config loaded: secret=%s", planted["message secret"])
        try:
            raise RuntimeError(f"upstream refused token {runtime.raw}")
        except RuntimeError:
            logger.exception("call failed")
    finally:
        connection.force_debug_cursor = False
        db_logger.setLevel(saved_db_level)
        root.setLevel(saved_level)

    lines = log_stream.lines()
    assert len(lines) > 20, "the workload should have logged (requests, SQL, webhook attempts)"
    for line in lines:
        json.loads(line)  # every line is one JSON object
    text = "\n".join(lines)
    assert "[redacted]" in text  # the scrubbing did happen
    assert any('"logger":"django.db.backends"' in line for line in lines)  # SQL with parameters was logged
    leaked = {name: value for name, value in planted.items() if value in text}
    assert leaked == {}, f"secrets in log lines: {sorted(leaked)}"
