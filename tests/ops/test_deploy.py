"""The production layout of docs/deployment.md: `check --deploy` is clean with the documented settings,
and the Procfile names the processes the docs describe."""

from __future__ import annotations

import importlib
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deployment.md").read_text()


def production_env(tmp_path: Path) -> dict[str, str]:
    # Only what a production process would have: the documented settings and the basics of a shell. The
    # test process's own environment (DJANGO_ALLOW_ASYNC_UNSAFE from live-server tests, DEBUG, ...) is not.
    basics = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: os.environ[k] for k in basics if k in os.environ}
    env.update(
        LOOPX_PRODUCTION="1",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="loopx.example.com",
        CSRF_TRUSTED_ORIGINS="https://loopx.example.com",
        DATABASE_URL=os.environ.get("DATABASE_URL") or f"sqlite:///{tmp_path / 'prod.sqlite3'}",
        REDIS_URL=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
        STATIC_ROOT=str(tmp_path / "static"),
        LOOPX_VAR_DIR=str(tmp_path / "var"),
    )
    return env


def test_documented_settings_are_the_ones_checked():
    required = ("SECRET_KEY", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "DATABASE_URL", "REDIS_URL", "LOOPX_PRODUCTION")
    for name in required:
        assert f"`{name}`" in DOC, name


def test_check_deploy_is_clean(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    env = production_env(tmp_path)
    del env["SECRET_KEY"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_procfile_names_web_worker_and_one_beat():
    entries = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line and not line.startswith("#")
    )
    assert {"web", "worker", "beat", "release"} <= set(entries)
    assert entries["web"].split()[0] == "gunicorn" and "loopx_site.wsgi" in entries["web"]
    assert re.search(r"celery -A loopx_site worker\b", entries["worker"])
    assert re.search(r"celery -A loopx_site beat\b", entries["beat"])
    assert "migrate" in entries["release"] and "collectstatic" in entries["release"]
    config = re.search(r"-c python:([\w.]+)", entries["web"])
    assert config is not None
    module = importlib.import_module(config.group(1))
    assert callable(module.child_exit) and module.accesslog is None
    assert "exactly one" in DOC


def _prepare_threshold(env: dict[str, str]) -> str:
    code = (
        "import django; django.setup(); from django.conf import settings;"
        " print(settings.DATABASES['default'].get('OPTIONS', {}).get('prepare_threshold', 'absent'))"
    )
    env = {**env, "DJANGO_SETTINGS_MODULE": "loopx_site.settings"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_prepared_statements_are_a_postgresql_setting_that_a_pooler_can_turn_off(tmp_path):
    env = production_env(tmp_path)
    env["DATABASE_URL"] = "postgres://loopx@db-host:5432/loopx"  # parsed only: nothing connects
    assert _prepare_threshold(env) == "5"
    assert _prepare_threshold({**env, "DB_PREPARED_STATEMENTS": "0"}) == "None"
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'x.sqlite3'}"
    assert _prepare_threshold(env) == "absent"  # SQLite has no such option
    assert "`DB_PREPARED_STATEMENTS`" in DOC


def test_a_visibility_timeout_below_the_task_limits_is_a_deploy_warning(settings):
    from ops.checks import visibility_timeout_check

    longest_task = max(
        settings.LOOPX_ASSESS_TIME_LIMIT, settings.LOOPX_AUDIT_TIME_LIMIT, settings.LOOPX_PACKAGE_TIME_LIMIT,
        settings.CELERY_TASK_TIME_LIMIT,
    )
    expected = settings.LOOPX_WEBHOOK_BACKOFF_MAX_SECONDS + longest_task
    assert expected == settings.CELERY_LONGEST_UNACKED_SECONDS
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": settings.CELERY_LONGEST_UNACKED_SECONDS}
    assert visibility_timeout_check() == []
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": settings.LOOPX_PACKAGE_TIME_LIMIT}
    assert [m.id for m in visibility_timeout_check()] == ["loopx.W001"]
