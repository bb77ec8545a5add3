"""Heartbeats of workers and beat, for the console's overview."""

from __future__ import annotations

import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from audits.heartbeat import WorkerHeartbeat, heartbeat_record, heartbeats_overview
from audits.models import Heartbeat

pytestmark = pytest.mark.django_db


def test_a_heartbeat_is_one_row_per_process_name_kept_current():
    heartbeat_record(role="worker", name="worker@a", detail={"concurrency": 2})
    first = Heartbeat.objects.get(name="worker@a")
    heartbeat_record(role="worker", name="worker@a", detail={"concurrency": 2})
    again = Heartbeat.objects.get(name="worker@a")
    assert Heartbeat.objects.count() == 1
    assert again.last_seen >= first.last_seen and again.started_at == first.started_at
    assert again.pid == os.getpid()


def test_a_restarted_process_starts_its_row_over():
    heartbeat_record(role="beat", name="beat@a")
    Heartbeat.objects.filter(name="beat@a").update(pid=1, started_at=timezone.now() - timedelta(days=1))
    heartbeat_record(role="beat", name="beat@a")
    row = Heartbeat.objects.get(name="beat@a")
    assert row.pid == os.getpid() and row.started_at > timezone.now() - timedelta(minutes=1)


def test_the_overview_tells_live_from_silent(settings):
    settings.LOOPX_HEARTBEAT_SECONDS = 10
    heartbeat_record(role="worker", name="worker@live")
    heartbeat_record(role="worker", name="worker@gone")
    heartbeat_record(role="beat", name="beat@a")
    Heartbeat.objects.filter(name="worker@gone").update(last_seen=timezone.now() - timedelta(seconds=31))
    overview = heartbeats_overview()
    assert {(h.name, h.alive) for h in overview["worker"]} == {("worker@live", True), ("worker@gone", False)}
    assert [h.name for h in overview["beat"]] == ["beat@a"]
    assert overview["worker"][1].age_seconds >= 31


def test_the_worker_bootstep_beats_on_start_and_on_its_timer(settings):
    settings.LOOPX_HEARTBEAT_SECONDS = 5
    calls = []

    class Timer:
        def call_repeatedly(self, interval, fun, args, priority=0):
            calls.append((interval, fun, args))
            return SimpleNamespace(cancel=lambda: calls.append("cancelled"))

    worker = SimpleNamespace(hostname="worker@test", concurrency=3, pool=None, timer=Timer())
    step = WorkerHeartbeat(worker)
    step.start(worker)
    row = Heartbeat.objects.get(name="worker@test")
    assert (row.role, row.detail["concurrency"]) == ("worker", 3)
    interval, fun, args = calls[0]
    assert interval == 5.0
    Heartbeat.objects.all().delete()
    fun(*args)  # the timer firing
    assert Heartbeat.objects.filter(name="worker@test").exists()
    step.stop(worker)
    assert calls[-1] == "cancelled"


def test_a_failing_heartbeat_never_raises(monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("database down")

    monkeypatch.setattr("audits.heartbeat.heartbeat_record", broken)
    worker = SimpleNamespace(hostname="worker@test", concurrency=1, pool=None)
    WorkerHeartbeat(worker)._beat(worker)  # logged, not raised
