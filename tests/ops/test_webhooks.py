"""Webhooks: signed, idempotent deliveries retried with backoff by Celery, recorded for operators."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from kernel import events
from notifications import delivery
from notifications.models import Webhook, WebhookAttempt, WebhookDelivery
from notifications.tasks import deliver_due, deliver_webhook
from ops import metrics

pytestmark = pytest.mark.django_db
SECRET = "whsec-0123456789abcdef-PLANTED"


@pytest.fixture
def published(monkeypatch):
    """Capture publishes instead of sending them to a broker: (delivery id, countdown) pairs."""
    calls: list[tuple[int, float | None]] = []
    monkeypatch.setattr(
        deliver_webhook, "apply_async", lambda args, countdown=None, **_: calls.append((args[0], countdown))
    )
    return calls


def _hook(url: str, events_: list[str] | None = None, **extra) -> Webhook:
    return Webhook.objects.create(
        name=extra.pop("name", "ops"), url=url, secret=SECRET, events=events_ or ["turn.blocked"], **extra
    )


def _blocked(run: str = "r1", turn: str = "t1", assessment: int = 7) -> None:
    events.emit(
        events.turn_blocked, run_id=run, turn_id=turn, reason="lineage_missing", reason_line=3, assessment_id=assessment
    )


def _attempts_counted(result: str) -> float:
    return metrics.REGISTRY.get_sample_value("loopx_webhook_attempts_total", {"result": result}) or 0.0


def test_fails_twice_then_succeeds(webhook_receiver, eager_celery, settings, django_capture_on_commit_callbacks):
    settings.LOOPX_WEBHOOK_BACKOFF_SECONDS = 0  # retries at once; the backoff itself is tested below
    failed, delivered = _attempts_counted("failed"), _attempts_counted("delivered")
    hook = _hook(webhook_receiver.url)
    webhook_receiver.statuses = [500, 503]
    with django_capture_on_commit_callbacks(execute=True):
        _blocked()

    item = WebhookDelivery.objects.get()
    assert (item.status, item.attempts, item.last_status_code, item.last_error) == ("delivered", 3, 200, "")
    attempts = list(WebhookAttempt.objects.filter(delivery=item).order_by("number"))
    assert [(a.number, a.status_code, a.ok) for a in attempts] == [(1, 500, False), (2, 503, False), (3, 200, True)]
    assert attempts[0].error == "HTTP 500"
    # Each attempt reaches the metrics through the webhook_attempted signal.
    assert (_attempts_counted("failed") - failed, _attempts_counted("delivered") - delivered) == (2, 1)

    assert [r["status"] for r in webhook_receiver.requests] == [500, 503, 200]
    assert webhook_receiver.accepted_keys == [item.idempotency_key]  # exactly one accepted delivery
    bodies = {r["body"] for r in webhook_receiver.requests}
    assert len(bodies) == 1  # every attempt sends the same bytes
    body = bodies.pop()
    expected = "sha256=" + hmac.new(hook.secret.encode(), body, hashlib.sha256).hexdigest()
    for number, request in enumerate(webhook_receiver.requests, start=1):
        headers = request["headers"]
        assert headers["x-loopx-signature"] == expected
        assert headers["idempotency-key"] == item.idempotency_key
        assert headers["x-loopx-event"] == "turn.blocked"
        assert headers["x-loopx-attempt"] == str(number)
    payload = json.loads(body)
    assert payload["event"] == "turn.blocked" and payload["id"] == item.idempotency_key
    assert payload["data"] == {
        "run": "r1",
        "turn": "t1",
        "reason": "lineage_missing",
        "reason_line": 3,
        "assessment": 7,
    }
    assert SECRET not in body.decode()


def test_same_event_twice_is_one_delivery(published, django_capture_on_commit_callbacks):
    _hook("http://127.0.0.1:9/hook")
    with django_capture_on_commit_callbacks(execute=True):
        _blocked()
        _blocked()
        _blocked(assessment=8)  # a later assessment blocking again is a new event
    assert WebhookDelivery.objects.count() == 2
    assert len(published) == 2


def test_enqueue_waits_for_commit_and_does_no_http(published, django_capture_on_commit_callbacks):
    """The caller's transaction never waits for a receiver: the row is written, the task published after
    commit, and no HTTP request is made on the caller's path."""
    _hook("http://127.0.0.1:9/hook")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        started = time.monotonic()
        _blocked()
        assert time.monotonic() - started < 0.5
        assert published == []  # nothing leaves before commit
    for callback in callbacks:
        callback()
    item = WebhookDelivery.objects.get()
    assert published == [(item.pk, None)]
    assert (item.status, item.attempts) == ("pending", 0)


def test_broker_down_at_publish_leaves_it_pending_for_the_sweep(monkeypatch, django_capture_on_commit_callbacks):
    _hook("http://127.0.0.1:9/hook")

    def broker_down(*args, **kwargs):
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(deliver_webhook, "apply_async", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        _blocked()  # must not raise
    item = WebhookDelivery.objects.get()
    assert item.status == "pending"
    calls: list[int] = []
    monkeypatch.setattr(deliver_webhook, "apply_async", lambda args, countdown=None, **_: calls.append(args[0]))
    assert deliver_due() == 1
    assert calls == [item.pk]


def test_receiver_down_backs_off_exponentially(published, settings):
    from tests.ops.conftest import free_port

    settings.LOOPX_WEBHOOK_BACKOFF_SECONDS = 10
    settings.LOOPX_WEBHOOK_TIMEOUT_SECONDS = 1
    _hook(f"http://127.0.0.1:{free_port()}/hook")  # nobody listens there
    [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
    for number, wait in ((1, 10), (2, 20), (3, 40)):
        started = time.monotonic()
        assert delivery.attempt(pk) == "retry"
        assert time.monotonic() - started < 2
        item = WebhookDelivery.objects.get(pk=pk)
        assert (item.status, item.attempts) == ("pending", number)
        assert "refused" in item.last_error.lower()
        remaining = (item.next_attempt_at - timezone.now()).total_seconds()
        assert wait - 2 < remaining <= wait
        assert published[-1] == (pk, wait)
        assert delivery.attempt(pk) == "skipped"  # not due yet: a redelivered message does nothing
        assert deliver_due() == 0
        WebhookDelivery.objects.filter(pk=pk).update(next_attempt_at=timezone.now())


def test_claim_is_compare_and_set(webhook_receiver):
    _hook(webhook_receiver.url)
    [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
    # Another worker holds a live claim: this one backs off without sending.
    WebhookDelivery.objects.filter(pk=pk).update(status="delivering", lease_until=timezone.now() + timedelta(minutes=1))
    assert delivery.attempt(pk) == "skipped"
    assert webhook_receiver.requests == []
    # That worker died mid-attempt: once its lease expires the delivery is taken over.
    WebhookDelivery.objects.filter(pk=pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert delivery.attempt(pk) == "delivered"
    assert delivery.attempt(pk) == "skipped"  # delivered is final
    assert len(webhook_receiver.requests) == 1


def test_gives_up_then_operator_resends(webhook_receiver, published, settings):
    settings.LOOPX_WEBHOOK_MAX_ATTEMPTS = 2
    settings.LOOPX_WEBHOOK_BACKOFF_SECONDS = 0
    _hook(webhook_receiver.url)
    webhook_receiver.statuses = [500, 500]
    [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
    assert delivery.attempt(pk) == "retry"
    assert delivery.attempt(pk) == "failed"
    assert WebhookDelivery.objects.get(pk=pk).status == "failed"
    assert delivery.resend([pk]) == 1
    item = WebhookDelivery.objects.get(pk=pk)
    assert (item.status, item.attempt_limit) == ("pending", 4)
    assert delivery.attempt(pk) == "delivered"
    keys = {r["headers"]["idempotency-key"] for r in webhook_receiver.requests}
    assert keys == {item.idempotency_key} and len(webhook_receiver.requests) == 3


def test_inactive_and_unsubscribed_hooks_get_nothing(published):
    _hook("http://127.0.0.1:9/a", name="inactive", active=False)
    _hook("http://127.0.0.1:9/b", ["finding.opened"], name="findings-only")
    assert delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"}) == []
    events.emit(events.finding_opened, finding_id=5, kind="lost_turn", run_id="r", turn_id="t")
    assert list(WebhookDelivery.objects.values_list("webhook__name", "event")) == [("findings-only", "finding.opened")]


def test_payload_is_redacted(published):
    _hook("http://127.0.0.1:9/hook", ["package.rejected"])
    [pk] = delivery.enqueue(
        "package.rejected",
        ("pkg-1", "checksum_mismatch"),
        {"package": "pkg-1", "evidence": {"api_key": "sk-PLANTED", "nested": [{"password": "PLANTED-2"}]}},
    )
    body = WebhookDelivery.objects.get(pk=pk).body
    assert "PLANTED" not in body
    assert json.loads(body)["data"]["evidence"] == {"api_key": "[redacted]", "nested": [{"password": "[redacted]"}]}


@pytest.fixture
def superuser_client(client, django_user_model):
    # Not pytest-django's admin_client: tests/personas.py's `admin_user` is the admin *role*, not staff.
    client.force_login(django_user_model.objects.create_superuser("root-ops", "root@example.com", "pw-123456789"))
    return client


def test_admin_never_shows_the_secret_and_resends(superuser_client, published, django_capture_on_commit_callbacks):
    admin_client = superuser_client
    hook = _hook("https://user:pw-PLANTED@hooks.example.com/in?token=PLANTED-Q")
    [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
    WebhookDelivery.objects.filter(pk=pk).update(status="failed", attempts=8)
    pages = [
        admin_client.get("/admin/notifications/webhook/"),
        admin_client.get(f"/admin/notifications/webhook/{hook.pk}/change/"),
        admin_client.get("/admin/notifications/webhookdelivery/"),
        admin_client.get(f"/admin/notifications/webhookdelivery/{pk}/change/"),
    ]
    for page in pages:
        assert page.status_code == 200
        text = page.content.decode()
        assert SECRET not in text
    assert "PLANTED" not in pages[0].content.decode()  # list: no credentials, no query string
    # Saving without typing a secret keeps the old one.
    answer = admin_client.post(
        f"/admin/notifications/webhook/{hook.pk}/change/",
        {
            "name": "ops",
            "url": "https://hooks.example.com/in",
            "secret": "",
            "events": ["turn.blocked"],
            "active": "on",
        },
    )
    assert answer.status_code == 302
    assert Webhook.objects.get(pk=hook.pk).secret == SECRET
    with django_capture_on_commit_callbacks(execute=True):
        answer = admin_client.post(
            "/admin/notifications/webhookdelivery/", {"action": "resend_deliveries", "_selected_action": [pk]}
        )
    assert answer.status_code == 302
    assert WebhookDelivery.objects.get(pk=pk).status == "pending"
    assert published[-1] == (pk, None)


def test_api_secret_is_write_only(admin_user, viewer_client, operator_client, published):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(admin_user)
    answer = client.post(
        "/api/v1/webhooks",
        {"name": "api", "url": "https://hooks.example.com/x", "secret": SECRET, "events": ["finding.opened"]},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    assert "secret" not in answer.json()
    listed = client.get("/api/v1/webhooks")
    assert listed.status_code == 200 and SECRET not in listed.content.decode()
    assert Webhook.objects.get(name="api").secret == SECRET
    no_secret = {"name": "x", "url": "https://a.example", "events": []}
    assert client.post("/api/v1/webhooks", no_secret, format="json").status_code == 400
    assert viewer_client.get("/api/v1/webhooks").status_code == 403
    [pk] = delivery.enqueue("finding.opened", (1, "lost_turn"), {"finding": 1})
    assert viewer_client.get("/api/v1/webhook-deliveries").status_code == 200
    assert viewer_client.post(f"/api/v1/webhook-deliveries/{pk}/resend").status_code == 403
    assert operator_client.post(f"/api/v1/webhook-deliveries/{pk}/resend").status_code == 202


def test_a_turn_that_becomes_blocked_is_announced_once(published, django_capture_on_commit_callbacks):
    """The real path: ingest, then the assessment task: a turn newly blocked makes one delivery; a later
    assessment in which it is still blocked makes none."""
    from journals.services import records_ingest
    from recovery.background import assessment_run
    from tests.journal_builder import JournalBuilder

    _hook("http://127.0.0.1:9/hook")
    b = JournalBuilder("wh-run")
    b.full_turn("t1")
    b.record("turn_planned", turn="t2")  # no lineage: the engine blocks t2
    with django_capture_on_commit_callbacks(execute=True):
        records_ingest(run_id="wh-run", body=b.body(), content_type="application/x-ndjson", token=None)
        assert assessment_run(run_id="wh-run") == "stored"
    item = WebhookDelivery.objects.get()
    data = json.loads(item.body)["data"]
    expected = ("turn.blocked", "wh-run", "t2", "lineage_missing")
    assert (item.event, data["run"], data["turn"], data["reason"]) == expected
    assert isinstance(data["reason_line"], int) and isinstance(data["assessment"], int)
    assert published == [(item.pk, None)]

    b.plan("t3")
    with django_capture_on_commit_callbacks(execute=True):
        records_ingest(run_id="wh-run", body=b.body(), content_type="application/x-ndjson", token=None)
        assert assessment_run(run_id="wh-run") == "stored"
    assert WebhookDelivery.objects.count() == 1  # t2 was already blocked: nothing new to announce


def test_a_parked_crash_loop_is_announced(runtime, published, settings, django_capture_on_commit_callbacks):
    from tests.gate.test_gate import claim, ingest, open_recovery
    from tests.journal_builder import JournalBuilder

    settings.LOOPX_MAX_RECOVERY_ATTEMPTS = 2
    _hook("http://127.0.0.1:9/hook", ["crash_loop.parked"])
    b = JournalBuilder()
    b.plan("mid")
    b.commit("mid", "plan")
    ingest(runtime.client, b)
    token = claim(runtime.client, "mid").json()["fencing_token"]
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(2):
            assert open_recovery(runtime.client, "mid", token).status_code == 201
        assert open_recovery(runtime.client, "mid", token).json()["error"] == "recovery_attempts_exceeded"
    item = WebhookDelivery.objects.get()
    data = json.loads(item.body)["data"]
    assert (item.event, data["run"], data["turn"], data["attempts"]) == ("crash_loop.parked", "run-1", "mid", 2)
    assert published == [(item.pk, None)]


def _traversing_package() -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"{}"
        info = tarfile.TarInfo("../../etc/cron.d/evil")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_rejected_package_upload_is_announced(
    operator, published, settings, tmp_path, django_capture_on_commit_callbacks
):
    """The package service's verification (what the validate_package task runs) rejects a hostile upload:
    one `package.rejected` delivery, naming the upload by its id, never by the uploader's file name."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from recovery.packages.services import package_process, package_upload_receive

    settings.LOOPX_PACKAGE_DIR = tmp_path
    _hook("http://127.0.0.1:9/hook", ["package.rejected"])
    upload = SimpleUploadedFile("evil-PLANTED-name.tar.gz", _traversing_package(), content_type="application/gzip")
    with django_capture_on_commit_callbacks(execute=True):
        received = package_upload_receive(file=upload, actor=operator)
    with django_capture_on_commit_callbacks(execute=True):
        assert package_process(upload_id=str(received.pk)) == "rejected"
    item = WebhookDelivery.objects.get()
    data = json.loads(item.body)["data"]
    assert (item.event, data["code"], data["package"]) == ("package.rejected", "path_traversal", str(received.pk))
    assert "PLANTED" not in item.body


def test_a_teams_webhook_hears_its_teams_runs_only(published):
    """A webhook of a team is a destination of that team's runs' events only; events of no run go to
    webhooks of no team (docs/access.md)."""
    from teams.services import team_ensure

    blue = team_ensure(name="blue", prefixes=["blue-"])
    _hook("http://127.0.0.1:9/blue", ["turn.blocked", "package.rejected"], name="blue-hook", team=blue)
    _hook("http://127.0.0.1:9/all", ["turn.blocked", "package.rejected"], name="all-hook")
    _blocked(run="blue-pay", turn="t1")
    _blocked(run="red-pay", turn="t1")
    delivery.enqueue("package.rejected", ("pkg-1", "bad"), {"package": "pkg-1", "run": None})
    sent = sorted(WebhookDelivery.objects.values_list("webhook__name", "run_ident"), key=str)
    assert sent == sorted(
        [("all-hook", "blue-pay"), ("all-hook", "red-pay"), ("all-hook", None), ("blue-hook", "blue-pay")], key=str
    )


def test_deliveries_of_another_teams_runs_are_absent_and_404(published, red_client, operator_client):
    _hook("http://127.0.0.1:9/all", ["turn.blocked"])
    _blocked(run="blue-pay", turn="t1")
    _blocked(run="red-pay", turn="t1")
    blue_pk = WebhookDelivery.objects.get(run_ident="blue-pay").pk
    listed = red_client.get("/api/v1/webhook-deliveries").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["id"] for row in rows] == [WebhookDelivery.objects.get(run_ident="red-pay").pk]
    assert red_client.post(f"/api/v1/webhook-deliveries/{blue_pk}/resend").status_code == 404
    assert WebhookDelivery.objects.get(pk=blue_pk).attempt_limit == delivery.max_attempts()  # not resent
    everything = operator_client.get("/api/v1/webhook-deliveries").json()
    assert len(everything["results"] if isinstance(everything, dict) else everything) == 2


def test_events_sent_together_read_the_webhooks_once(published):
    """Inside ``events.sending_many`` (a refresh that newly holds many turns) the active webhooks are read
    once for all the events; each event still makes its own delivery. Outside, each event reads them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _hook("https://hooks.example.com/a")
    with events.sending_many():
        _blocked(turn="t1")
        with CaptureQueriesContext(connection) as inside:
            _blocked(turn="t2")
            _blocked(turn="t3")
    assert inside.captured_queries  # the deliveries were written
    assert not any('FROM "notifications_webhook"' in q["sql"] for q in inside.captured_queries)
    assert WebhookDelivery.objects.count() == 3
    with CaptureQueriesContext(connection) as outside:
        _blocked(turn="t4")
    assert any('FROM "notifications_webhook"' in q["sql"] for q in outside.captured_queries)
    assert WebhookDelivery.objects.count() == 4


def test_a_lookup_is_kept_for_its_scope_only():
    read: list[int] = []

    def reader() -> int:
        read.append(1)
        return len(read)

    assert events.looked_up("k", reader) == 1
    assert events.looked_up("k", reader) == 2  # no scope: read every time
    with events.sending_many():
        assert events.looked_up("k", reader) == 3
        with events.sending_many():  # a nested scope shares the outer one
            assert events.looked_up("k", reader) == 3
        assert events.looked_up("other", reader) == 4
    assert events.looked_up("k", reader) == 5
