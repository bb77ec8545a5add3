"""The suite's parallel workers each have a var/ and a Redis database of their own (tests/worker_rooms.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

from tests import worker_rooms


def test_a_worker_takes_the_redis_database_below_the_named_one_by_its_number() -> None:
    assert worker_rooms._redis_for("redis://127.0.0.1:6379/15", 0) == "redis://127.0.0.1:6379/15"
    assert worker_rooms._redis_for("redis://127.0.0.1:6379/15", 3) == "redis://127.0.0.1:6379/12"
    assert worker_rooms._redis_for("redis://:pw@cache:6380/7?timeout=2", 1) == "redis://:pw@cache:6380/6?timeout=2"
    assert worker_rooms._redis_for("redis://127.0.0.1:6379", 0) == "redis://127.0.0.1:6379/0"


def test_a_worker_with_no_database_left_is_refused_with_what_to_do() -> None:
    with pytest.raises(RuntimeError, match=r"name a higher database in REDIS_URL"):
        worker_rooms._redis_for("redis://127.0.0.1:6379/1", 2)


def test_rooms_move_var_and_both_redis_urls_and_leave_other_brokers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOOPX_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/15")
    monkeypatch.setenv("CELERY_BROKER_URL", "filesystem://")
    worker_rooms._rooms("gw2")
    assert os.environ["LOOPX_VAR_DIR"] == str(tmp_path / "gw2")
    assert os.environ["REDIS_URL"] == "redis://127.0.0.1:6379/13"
    assert os.environ["CELERY_BROKER_URL"] == "filesystem://"


def test_this_process_runs_in_its_own_rooms() -> None:
    """Under `make test` (xdist), this worker's settings name its own var/, and what lives under it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    var = Path(settings.VAR_DIR)
    if worker is None:
        assert var.name not in {f"gw{n}" for n in range(64)}  # one process: var/ as given
        return
    assert var.name == worker
    under = (Path(settings.BROKER_DIR), Path(settings.LOOPX_PACKAGE_DIR))
    assert under == (var / "broker", var / "packages")
