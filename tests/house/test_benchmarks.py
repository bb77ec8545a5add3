"""`make bench` works: the runner gives each benchmark a process of its own, and every benchmark runs to its
figures at a tiny size (the figures themselves mean nothing at that size; a benchmark that no longer runs
against today's schema or services does).

Each benchmark runs as `make bench` runs it, in a child process. Those that need PostgreSQL (and Redis) run
in the suite's PostgreSQL run, on databases of their own beside the test database, dropped after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import benchmarks.__main__ as runner

REPO = Path(__file__).resolve().parents[2]


def test_the_runner_gives_each_benchmark_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def call(argv: list[str], **_: Any) -> int:
        calls.append(argv)
        return 0

    monkeypatch.setattr(runner.subprocess, "call", call)
    assert runner.main(["engine", "bench_imports.py", "--", "--repeat", "1"]) == 0
    assert calls == [
        [sys.executable, "-m", "benchmarks.bench_engine", "--repeat", "1"],
        [sys.executable, "-m", "benchmarks.bench_imports", "--repeat", "1"],
    ]


@pytest.mark.parametrize(("codes", "worst"), [([0, 0], 0), ([0, 2, 1], 2), ([-9, 0], 1)])
def test_the_runner_exits_with_the_worst_and_a_killed_benchmark_counts_as_failed(
    monkeypatch: pytest.MonkeyPatch, codes: list[int], worst: int
) -> None:
    given = iter(codes)
    monkeypatch.setattr(runner.subprocess, "call", lambda argv, **_: next(given))
    names = runner.available()[: len(codes)]
    assert runner.main(names) == worst


def test_the_runner_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["nonesuch"]) == 2
    assert "unknown benchmark(s): nonesuch" in capsys.readouterr().err


def _bench(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``benchmarks.bench_<name>`` as `make bench` does; its output, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.bench_{name}", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"bench_{name} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "skipped" not in done.stdout.splitlines()[0], done.stdout
    return done.stdout


@pytest.mark.parametrize(
    ("name", "args", "shown"),
    [
        ("engine", ["--records", "2000", "--repeat", "1"], "ratio to floor:"),
        ("imports", ["--events", "500", "--repeat", "1"], "ratio to floor:"),
        ("incremental", ["--records", "3000", "--rounds", "1"], "resumed batch"),
        ("packages", ["--size-mb", "2", "--members", "20", "--repeat", "1"], "restore / tarfile floor:"),
    ],
)
def test_a_benchmark_without_a_database_runs_to_its_figures(name: str, args: list[str], shown: str) -> None:
    assert shown in _bench(name, *args)


def _on_postgresql() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture
def scratch_url(worker_id: str) -> Iterator[str]:
    """A PostgreSQL URL beside the test database's, named for this test worker: the benchmarks make their
    databases beside it (``<name>_bench_...``) or in it; every database of that name is dropped after."""
    import psycopg

    from benchmarks.bench_ingest import drop_database

    base = os.environ["DATABASE_URL"].partition("?")[0].rpartition("/")[0]
    name = f"loopx_smoke_{worker_id}"
    yield f"{base}/{name}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        left = [row[0] for row in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [name + "%"])]
    for database in left:
        drop_database(f"{base}/{database}")


@pytest.fixture
def services_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment of a benchmark that sets Django up: on SQLite as it is (each makes its database in a
    folder of its own); on PostgreSQL, DATABASE_URL names a scratch database's name to make its own beside."""
    if not _on_postgresql():
        return {}
    return {"DATABASE_URL": request.getfixturevalue("scratch_url")}


@pytest.mark.parametrize(
    ("name", "args", "shown"),
    [
        ("assessments", ["--small"], "assessment per batch:"),
        ("pages", ["--small", "--requests", "3"], "worst page ratio"),
    ],
)
def test_a_benchmark_of_the_services_runs_to_its_figures(
    services_env: dict[str, str], name: str, args: list[str], shown: str
) -> None:
    assert shown in _bench(name, *args, env=services_env)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("name", "args", "shown"),
    [
        ("growth", ["--records", "3000"], "assessment / ingest per batch:"),
        ("ingest", ["--records", "2000", "--database-url", "{url}_ingest"], "api / copy ="),
        ("reads", ["--scale", "0.01", "--rounds", "5", "--probe", "1", "--database-url", "{url}_reads"], "ingest"),
        ("pages", ["--scale", "0.02", "--base", "0.01", "--requests", "3"], "2x the data: every page's p95"),
        ("load", ["--writers", "2", "--batches", "3", "--database-url", "{url}"], "load / floor ="),
    ],
)
def test_a_benchmark_on_postgresql_runs_to_its_figures(
    scratch_url: str, name: str, args: list[str], shown: str
) -> None:
    out = _bench(name, *(a.format(url=scratch_url) for a in args), env={"DATABASE_URL": scratch_url})
    assert shown in out


@pytest.mark.postgres
@pytest.mark.redis
def test_the_task_benchmark_runs_to_its_figures_on_redis(scratch_url: str) -> None:
    out = _bench("tasks", "--runs", "20", "--samples", "5", env={"DATABASE_URL": scratch_url})
    assert "floor noop" in out
    # Its workers' logs go with it when every worker lasted.
    queue = out.split(", queue ", 1)[1].split(",", 1)[0]
    assert queue.startswith("bench_tasks_")
    assert not (Path(os.environ.get("TMPDIR", "/tmp")) / queue).exists()  # noqa: S108  where the benchmark writes them
