"""/metrics: names and values after a scripted workload, access control, multi-process aggregation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from journals.models import Run
from recovery.services import assessment_refresh, turn_block
from tests.journal_builder import JournalBuilder
from tests.ops.conftest import scrape, value

pytestmark = pytest.mark.django_db
URL = "/api/v1/runs/{}/records"
ROOT = Path(__file__).resolve().parents[2]


def _ingest(client, run: str, body: bytes):
    return client.post(URL.format(run), body, content_type="application/x-ndjson")


def test_workload_shows_in_metrics(runtime, operator):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {runtime.raw}"}
    before = scrape(runtime.client, **auth)

    ok = JournalBuilder("m-ok")
    ok.full_turn("t1")
    ok.plan("t2")
    ok.commit("t2", "plan")
    assert _ingest(runtime.client, "m-ok", ok.body()).status_code == 200
    assert _ingest(runtime.client, "m-ok", ok.body()).json()["duplicates"] == len(ok.lines)  # redelivery

    conflicting = JournalBuilder("m-ok")
    conflicting.record("turn_planned", turn="other", lineage="x")
    assert _ingest(runtime.client, "m-ok", conflicting.body()).status_code == 409
    assert _ingest(runtime.client, "m-ok", b"this is not json\n").status_code == 400

    blocked = JournalBuilder("m-blocked")
    blocked.record("turn_planned", turn="t9")  # no lineage: the engine blocks the turn
    assert _ingest(runtime.client, "m-blocked", blocked.body()).status_code == 200

    for run_id in ("m-ok", "m-blocked"):
        assessment_refresh(run=Run.objects.get(run_id=run_id))
    turn_block(turn=Run.objects.get(run_id="m-ok").turns.get(turn_id="t2"), actor=operator, reason="hold it")

    from recovery.findings.services import finding_open_or_touch

    finding_open_or_touch(kind="lost_turn", run=Run.objects.get(run_id="m-ok"), fact_key="t2")

    after = scrape(runtime.client, **auth)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    stored = len(ok.lines) + len(blocked.lines)
    assert delta("loopx_ingest_batches_total", outcome="accepted", code="") == 3
    assert delta("loopx_ingest_batches_total", outcome="conflict", code="lsn_conflict") == 1
    assert delta("loopx_ingest_batches_total", outcome="refused", code="not_json") == 1
    assert delta("loopx_ingest_records_total", outcome="stored") == stored
    assert delta("loopx_ingest_records_total", outcome="duplicate") == len(ok.lines)
    assert delta("loopx_assessment_duration_seconds_count") == 2
    assert delta("loopx_assessment_duration_seconds_bucket", le="+Inf") == 2
    # t9 held by the engine, t2 held by the operator's block: each became held once.
    assert delta("loopx_events_total", event="turn_blocked") == 2
    assert delta("loopx_events_total", event="finding_opened") == 1

    # Scrape-time gauges: exact, from this test's database.
    assert value(after, "loopx_turns", state="complete", decision="complete", reason="") == 1
    assert value(after, "loopx_turns", state="blocked_operator", decision="blocked", reason="operator_blocked") == 1
    assert value(after, "loopx_turns", state="held_review", decision="blocked", reason="lineage_missing") == 1
    assert value(after, "loopx_findings_open", kind="lost_turn") == 1
    assert value(after, "loopx_findings_open", kind="chain_broken") == 0
    assert value(after, "loopx_operator_actions_total", kind="turn_block") == 1
    assert value(after, "loopx_recovery_audits_total", divergence="none") == 0
    assert ("loopx_task_queue_depth", (("queue", "celery"),)) in after
    assert ("loopx_task_queue_oldest_age_seconds", (("queue", "celery"),)) in after
    for source in ("turns", "findings", "recovery_audits", "operator_actions", "webhooks", "broker"):
        assert value(after, "loopx_scrape_error", source=source) == 0, source


def test_metrics_refuses_anonymous_and_bad_tokens(client, runtime):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer lxr_not-a-real-token-at-all").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {runtime.raw}").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {runtime.raw}").status_code == 200


def test_revoked_token_is_refused(client, runtime):
    from trail.tokens import api_token_revoke

    api_token_revoke(token=runtime.token)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {runtime.raw}").status_code == 401


@override_settings(METRICS_TOKEN="scrape-secret-0123456789")
def test_metrics_token_setting(client):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-0123456789").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-wrong").status_code == 401


@override_settings(METRICS_ALLOW_IPS=["10.1.0.0/16", "192.0.2.7"])
def test_metrics_allowed_from_internal_addresses(client):
    assert client.get("/metrics", REMOTE_ADDR="10.1.44.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.7").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.2.0.1").status_code == 401
    # A forwarded header is not an address we trust.
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="10.1.0.1").status_code == 401


def test_queue_depth_from_filesystem_broker(client, runtime, tmp_path, settings):
    """Kombu's filesystem transport (the development default): one file per waiting message."""
    folder = tmp_path / "out"
    folder.mkdir()
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    for n in range(3):
        (folder / f"{1000 + n}_abc{n}.celery.msg").write_text('{"headers": {"loopx_published_at": 1.0}}')
    (folder / "1005_x.other.msg").write_text("{}")
    samples = scrape(client, HTTP_AUTHORIZATION=f"Bearer {runtime.raw}")
    assert value(samples, "loopx_task_queue_depth", queue="celery") == 3
    assert value(samples, "loopx_task_queue_oldest_age_seconds", queue="celery") > 1_000_000


@pytest.mark.redis
def test_queue_depth_and_age_from_redis(client, runtime, own_redis, settings):
    """A real publish through Celery to a private Redis: the depth counts it, the age reads the stamp."""
    import time

    from loopx_site.celery import app

    settings.CELERY_BROKER_URL = own_redis.url
    with app.connection_for_write(own_redis.url) as conn:
        app.send_task("notifications.deliver_due", connection=conn)
        app.send_task("notifications.deliver_due", connection=conn)
    time.sleep(1.1)
    samples = scrape(client, HTTP_AUTHORIZATION=f"Bearer {runtime.raw}")
    assert value(samples, "loopx_task_queue_depth", queue="celery") == 2
    assert 1.0 <= value(samples, "loopx_task_queue_oldest_age_seconds", queue="celery") < 60


_CHILD = """
import os, sys, django
os.environ["DJANGO_SETTINGS_MODULE"] = "loopx_site.settings"
django.setup()
from ops import metrics
if sys.argv[1] == "count":
    metrics.on_ingest_finished(outcome="accepted", code="", stored=3, duplicates=1)
    metrics.on_assessment_finished(seconds=0.2)
else:
    from prometheus_client.exposition import generate_latest
    sys.stdout.write(generate_latest(metrics.scrape_registry()).decode())
"""


def test_multiprocess_dir_adds_up_processes(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR, a scrape in one process sees the counts of every other process."""
    mp = tmp_path / "prom"
    mp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL")}
    env.update(
        PROMETHEUS_MULTIPROC_DIR=str(mp),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        LOOPX_VAR_DIR=str(tmp_path / "var"),
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", _CHILD, "count"], cwd=ROOT, env=env, check=True, timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, "scrape"], cwd=ROOT, env=env, check=True, timeout=60, capture_output=True,
        text=True,
    ).stdout
    assert 'loopx_ingest_records_total{outcome="stored"} 6.0' in out
    assert 'loopx_ingest_records_total{outcome="duplicate"} 2.0' in out
    assert "loopx_assessment_duration_seconds_count 2.0" in out


def test_recovery_audits_by_divergence(runtime):
    from tests.gate.test_gate import claim, close, ingest, open_recovery, report

    b = JournalBuilder()
    b.plan("mid")
    b.commit("mid", "plan")
    ingest(runtime.client, b)
    token = claim(runtime.client, "mid").json()["fencing_token"]
    audit = open_recovery(runtime.client, "mid", token).json()
    assert report(runtime.client, "mid", audit["id"], token, "intent", "not-in-the-plan").status_code in (200, 201)
    assert close(runtime.client, "mid", audit["id"], token).status_code == 200
    samples = scrape(runtime.client, HTTP_AUTHORIZATION=f"Bearer {runtime.raw}")
    assert value(samples, "loopx_recovery_audits_total", divergence="unplanned_action") == 1
    assert value(samples, "loopx_recovery_audits_total", divergence="none") == 0


def test_a_scrape_costs_a_few_queries(client, runtime, django_assert_max_num_queries):
    """One grouped query per family, whatever the volume (plus the token lookup and its touch)."""
    b = JournalBuilder("volume")
    for n in range(30):
        b.full_turn(f"t{n}")
    assert _ingest(runtime.client, "volume", b.body()).status_code == 200
    assessment_refresh(run=Run.objects.get(run_id="volume"))
    with django_assert_max_num_queries(10):
        samples = scrape(client, HTTP_AUTHORIZATION=f"Bearer {runtime.raw}")
    assert value(samples, "loopx_turns", state="complete", decision="complete", reason="") == 30
