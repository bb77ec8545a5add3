"""The package sweep (recovery/packages/services.py ``package_sweep``, task ``recovery.tasks.sweep_packages`` on
beat and at worker start): uploads whose validate_package was lost are published again, once per claim; upload
files no row names are removed after a grace period, and nothing else is touched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from recovery.models import PackageUpload
from recovery.packages import build_package
from recovery.packages import services as package_services
from recovery.packages.services import package_sweep, package_upload_receive, upload_dir
from recovery.tasks import sweep_packages, sweep_packages_at_start, validate_package
from tests.journal_builder import JournalBuilder
from tests.packages.test_import import package_dir  # noqa: F401 - an autouse fixture

HOUR = timedelta(hours=1)


@pytest.fixture
def package(tmp_path) -> bytes:
    b = JournalBuilder("sweep-run")
    b.full_turn("t1")
    build_package(tmp_path / "p.tar.gz", "sweep-run", b.body())
    return (tmp_path / "p.tar.gz").read_bytes()


class Broker:
    """validate_package's publish: down (raises, as kombu does when it cannot connect) or up (recorded)."""

    def __init__(self) -> None:
        self.up = False
        self.sent: list[str] = []
        self.lock = threading.Lock()

    def apply_async(self, args=None, **_):
        if not self.up:
            raise ConnectionError("broker unreachable")
        with self.lock:
            self.sent.append(args[0])


@pytest.fixture
def broker(monkeypatch) -> Broker:
    broker = Broker()
    monkeypatch.setattr(validate_package, "apply_async", broker.apply_async)
    return broker


def stranded(package: bytes, operator, django_capture_on_commit_callbacks, age: timedelta = HOUR) -> PackageUpload:
    """An upload committed while the broker was down: its publish failed, it waits in `received`."""
    with django_capture_on_commit_callbacks(execute=True):
        upload = package_upload_receive(file=package, actor=operator)
    PackageUpload.objects.filter(pk=upload.pk).update(created_at=timezone.now() - age)
    upload.refresh_from_db()
    assert upload.state == "received" and upload.enqueued_at is None
    return upload


# --- Lost publishes ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_upload_whose_publish_was_lost_is_published_again_once(
    broker, package, operator, django_capture_on_commit_callbacks
):
    upload = stranded(package, operator, django_capture_on_commit_callbacks)
    broker.up = True
    report = package_sweep()
    assert report.republished == [str(upload.pk)] and broker.sent == [str(upload.pk)]
    upload.refresh_from_db()
    assert upload.sweeps == 1 and upload.enqueued_at is not None
    assert package_sweep().republished == []  # just published: not stuck again before the grace period
    assert broker.sent == [str(upload.pk)]
    # The republished task does the work (run here in-process): verified and imported, once.
    assert validate_package(str(upload.pk)) == "imported"
    PackageUpload.objects.filter(pk=upload.pk).update(enqueued_at=timezone.now() - HOUR)
    assert package_sweep().republished == []  # a final upload is never published again


@pytest.mark.django_db
def test_a_young_upload_is_left_to_its_own_publish(broker, package, operator, django_capture_on_commit_callbacks):
    stranded(package, operator, django_capture_on_commit_callbacks, age=timedelta(seconds=5))
    broker.up = True
    assert package_sweep().republished == [] and broker.sent == []


@pytest.mark.django_db
def test_a_publish_that_fails_again_is_retried_by_a_later_sweep_with_backoff(
    broker, package, operator, django_capture_on_commit_callbacks
):
    upload = stranded(package, operator, django_capture_on_commit_callbacks)
    report = package_sweep()  # the broker is still down
    assert report.publish_failed == [str(upload.pk)] and report.republished == []
    broker.up = True
    grace = timedelta(seconds=django_settings.LOOPX_PACKAGE_SWEEP_GRACE_SECONDS)
    # After one republish an upload waits twice the grace period before the next one.
    PackageUpload.objects.filter(pk=upload.pk).update(enqueued_at=timezone.now() - grace * 1.5)
    assert package_sweep().republished == []
    PackageUpload.objects.filter(pk=upload.pk).update(enqueued_at=timezone.now() - grace * 2.5)
    assert package_sweep().republished == [str(upload.pk)]
    upload.refresh_from_db()
    assert upload.sweeps == 2 and broker.sent == [str(upload.pk)]


@pytest.mark.django_db
def test_a_check_whose_task_died_is_published_again_after_the_time_limit(
    broker, package, operator, django_capture_on_commit_callbacks, settings
):
    upload = stranded(package, operator, django_capture_on_commit_callbacks)
    broker.up = True
    limit = timedelta(seconds=settings.LOOPX_PACKAGE_TIME_LIMIT)
    # A worker picked it up (checking) and was killed, its message gone with it (the filesystem broker).
    PackageUpload.objects.filter(pk=upload.pk).update(
        state="checking", updated_at=timezone.now() - limit / 2, enqueued_at=timezone.now() - limit / 2
    )
    assert package_sweep().republished == []  # a check may still be running within its time limit
    PackageUpload.objects.filter(pk=upload.pk).update(
        updated_at=timezone.now() - limit - HOUR, enqueued_at=timezone.now() - limit - HOUR
    )
    assert package_sweep().republished == [str(upload.pk)]
    assert validate_package(str(upload.pk)) == "imported"


@pytest.mark.django_db
def test_a_claim_is_a_compare_and_set_so_two_sweeps_that_read_the_same_row_publish_once(
    broker, package, operator, django_capture_on_commit_callbacks, monkeypatch
):
    upload = stranded(package, operator, django_capture_on_commit_callbacks)
    broker.up = True
    real_claim = package_services._claim_republish
    inner: list[package_services.SweepReport] = []
    started: list[bool] = []

    def claim_after_another_sweep(*args):
        # Sweep A has read the row; before it claims, sweep B reads, claims and publishes the same upload.
        if not started:
            started.append(True)
            inner.append(package_sweep())
        return real_claim(*args)

    monkeypatch.setattr(package_services, "_claim_republish", claim_after_another_sweep)
    outer = package_sweep()
    assert inner[0].republished == [str(upload.pk)]  # B won
    assert outer.republished == [] and outer.publish_failed == []  # A's read was stale: its claim failed
    assert broker.sent == [str(upload.pk)]
    upload.refresh_from_db()
    assert upload.sweeps == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_publish_each_stuck_upload_exactly_once(broker, package, operator):
    uploads = []
    for _ in range(12):
        uploads.append(package_upload_receive(file=package, actor=operator))  # publish fails: broker down
    PackageUpload.objects.update(created_at=timezone.now() - HOUR)
    broker.up = True
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            start.wait()
            package_sweep()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sorted(broker.sent) == sorted(str(u.pk) for u in uploads)  # each once, whoever claimed it
    assert set(PackageUpload.objects.values_list("sweeps", flat=True)) == {1}


@pytest.mark.django_db
def test_the_sweep_is_on_beats_schedule_and_asked_for_at_worker_start(monkeypatch):
    row = PeriodicTask.objects.get(name="packages: sweep")
    assert row.task == "recovery.tasks.sweep_packages" and row.enabled and row.interval.every == 60
    sent: list[dict] = []
    monkeypatch.setattr(sweep_packages, "apply_async", lambda *a, **kw: sent.append(kw))
    sweep_packages_at_start(sender=None)
    assert len(sent) == 1
    monkeypatch.setattr(sweep_packages, "apply_async", lambda *a, **kw: (_ for _ in ()).throw(OSError("down")))
    sweep_packages_at_start(sender=None)  # a broker that is down never stops the worker


@pytest.mark.django_db
def test_the_task_takes_its_thresholds_from_the_schedules_kwargs(
    broker, package, operator, django_capture_on_commit_callbacks
):
    upload = stranded(package, operator, django_capture_on_commit_callbacks, age=timedelta(seconds=5))
    broker.up = True
    assert sweep_packages()["republished"] == []
    assert sweep_packages(grace_seconds=1)["republished"] == [str(upload.pk)]


# --- Orphaned files ---------------------------------------------------------------------------------------


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


@pytest.mark.django_db
def test_orphaned_upload_files_are_removed_and_nothing_else(
    broker, package, operator, django_capture_on_commit_callbacks, tmp_path
):
    named = stranded(package, operator, django_capture_on_commit_callbacks)  # its row names its file
    directory = upload_dir()
    named_file = directory / named.stored_name.split("/", 1)[1]
    orphan = directory / f"{uuid.uuid4().hex}.pkg"
    young = directory / f"{uuid.uuid4().hex}.pkg"
    foreign = directory / "notes.txt"
    outside = tmp_path / "outside.pkg"
    link = directory / f"{uuid.uuid4().hex}.pkg"
    for path in (orphan, young, foreign, outside):
        path.write_bytes(b"bytes")
    link.symlink_to(outside)
    for path in (orphan, foreign, named_file, link):
        _age(path, 2 * 3600)
    report = package_sweep()
    assert report.orphans_removed == [orphan.name]
    assert not orphan.exists()
    assert named_file.exists() and young.exists() and foreign.exists() and link.is_symlink() and outside.exists()
    assert package_sweep().orphans_removed == []  # idempotent


@pytest.mark.django_db
def test_a_file_left_by_a_receive_killed_before_its_commit_is_swept(tmp_path, settings):
    """A real process writes an upload's file and is SIGKILLed before its row is committed."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LOOPX_FAILPOINTS")},
        "DJANGO_SETTINGS_MODULE": "loopx_site.settings",
        "LOOPX_VAR_DIR": str(tmp_path / "var"),
        "LOOPX_PACKAGE_DIR": str(settings.LOOPX_PACKAGE_DIR),
        "LOOPX_FAILPOINTS": "package_receive.written=sleep:120",
        "LOOPX_FAILPOINTS_DIR": str(tmp_path),
    }
    code = (
        "import django; django.setup()\n"
        "from recovery.packages.services import package_upload_receive\n"
        "package_upload_receive(file=b'a package that never got its row', actor=None)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=django_settings.BASE_DIR, env=env)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("package_receive.written.*")):
            assert proc.poll() is None and time.monotonic() < deadline, "the receive did not reach its failpoint"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait(10)
    left = [p for p in upload_dir().iterdir() if p.suffix == ".pkg"]
    assert len(left) == 1 and left[0].read_bytes() == b"a package that never got its row"
    assert not PackageUpload.objects.exists()
    assert package_sweep().orphans_removed == []  # younger than the grace period: a receive may be committing
    _age(left[0], django_settings.LOOPX_PACKAGE_ORPHAN_GRACE_SECONDS + 60)
    assert package_sweep().orphans_removed == [left[0].name]
    assert not left[0].exists()
