"""The package task with real Celery workers (subprocesses), a private redis-server and PostgreSQL: a worker
SIGKILLed in the middle of verifying or of importing an upload is replaced, and the upload is imported once.

Uses the fault-test machinery of tests/tasks (procs.py): the message is acknowledged late, so the killed
worker's message comes back to the survivor; the upload's compare-and-set states make the second run finish
the work instead of doubling it.
"""

from __future__ import annotations

import pytest

from journals.models import JournalRecord, Run
from recovery.models import PackageUpload
from recovery.packages import build_package
from recovery.packages.services import package_upload_receive
from tests.journal_builder import JournalBuilder
from tests.tasks import conftest as worker_tests
from tests.tasks.procs import Stack, publishing_to, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

redis_server = worker_tests.redis_server  # the worker tests' private redis-server, one per module


@pytest.fixture
def stack(redis_server, transactional_db, tmp_path, settings, monkeypatch):
    packages = tmp_path / "packages"
    settings.LOOPX_PACKAGE_DIR = packages
    monkeypatch.setenv("LOOPX_PACKAGE_DIR", str(packages))  # the workers' environment is copied from ours
    redis_server.flush()
    stack = Stack(redis_server, tmp_path)
    with publishing_to(redis_server.url):
        yield stack
        stack.stop()  # before the database is flushed: no worker may still hold a connection


@pytest.mark.parametrize(("point", "checks"), [("package_validate.checking", 2), ("package_import.before_commit", 1)])
def test_a_worker_killed_mid_package_is_replaced_and_imports_once(stack, operator, tmp_path, point, checks):
    b = JournalBuilder("worker-run")
    b.full_turn("t1")
    b.plan("t2")
    build_package(tmp_path / "p.tar.gz", "worker-run", b.body())
    doomed = stack.worker("doomed", failpoints=f"{point}=sleep:120")
    upload = package_upload_receive(file=(tmp_path / "p.tar.gz").read_bytes(), actor=operator)  # publishes
    wait_for(lambda: stack.parked(point), timeout=30, what=f"the worker to park at {point}")
    survivor = stack.worker("survivor")
    doomed.kill()  # SIGKILL: no ack; an import in flight dies with its transaction
    done = wait_for(
        lambda: PackageUpload.objects.filter(pk=upload.pk, state="imported").first(),
        timeout=60,
        what="the redelivered task to import on the survivor",
    )
    assert str(upload.pk) in survivor.output()
    assert done.checks == checks and done.result["stored"] == len(b.lines)
    assert Run.objects.filter(run_id="worker-run").count() == 1
    assert JournalRecord.objects.filter(run__run_id="worker-run").count() == len(b.lines)


def test_an_upload_stranded_while_the_broker_was_down_is_imported_once_a_worker_starts(stack, operator, tmp_path):
    """The upload's publish failed (no broker) and no beat runs: the sweep a worker asks for when it starts
    publishes it again, and the worker imports it."""
    from datetime import timedelta
    from unittest import mock

    from django.utils import timezone

    b = JournalBuilder("stranded-run")
    b.full_turn("t1")
    build_package(tmp_path / "p.tar.gz", "stranded-run", b.body())
    with mock.patch("recovery.tasks.validate_package.apply_async", side_effect=ConnectionError("broker down")):
        upload = package_upload_receive(file=(tmp_path / "p.tar.gz").read_bytes(), actor=operator)
    PackageUpload.objects.filter(pk=upload.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert PackageUpload.objects.get(pk=upload.pk).enqueued_at is None
    worker = stack.worker("starter")
    done = wait_for(
        lambda: PackageUpload.objects.filter(pk=upload.pk, state="imported").first(),
        timeout=60,
        what="the sweep asked for at worker start to get the upload imported",
    )
    assert "recovery.tasks.sweep_packages" in worker.output()
    assert done.sweeps == 1 and done.checks == 1 and done.result["stored"] == len(b.lines)
