from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sqlite_migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database of its own, migrated by ``manage.py migrate`` as a newcomer's is, so that CI's
    PostgreSQL pass runs the SQLite tests too. Migrated once (~4 s) for the tests of what SQLite keeps; each
    test leaves it as it found it (nothing committed)."""
    directory = tmp_path_factory.mktemp("sqlite-migrated")
    database = directory / "scratch.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "LOOPX_VAR_DIR": str(directory)}
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"], cwd=root, env=env, check=True, capture_output=True
    )
    return database
