"""Ingest through the API into PostgreSQL, beside the floor measured in the same run.

    python -m benchmarks.bench_ingest                      # 200,000 records in batches of 1,000
    python -m benchmarks.bench_ingest --records 20000      # smaller
    python -m benchmarks.bench_ingest --database-url postgres://postgres@127.0.0.1:5432/loopx_bench

It (re)creates the benchmark database, migrates it, creates a runtime token and starts gunicorn on it, then:

- ``api``: once every worker has booted and served a first request (``warm_up``), POSTs the journal in
  batches (JSONL, one connection, one batch at a time) to /api/v1/runs/{run}/records and times each batch
  (p50/p95) and the whole (records/s, the sum of the batches' times);
- floor ``copy``: the same rows (the same columns, the same indexes and constraints: a table created
  LIKE journals_journalrecord INCLUDING ALL) through raw psycopg COPY, one COPY and one commit per batch of
  the same size, on one connection; and ``copy-one``: a single COPY of every row, the fastest a client can
  write them (informative).

The two sides alternate in blocks (``--block`` batches of the API, then the floor's COPY of the same rows),
so that a burst of load elsewhere on this shared machine lands on both alike; the ratio of each block is
printed beside the whole run's.

The target is API records/s >= half the per-batch COPY rate.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.canonical import canonical_bytes, digest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/loopx_bench"
TARGET = 0.5


def journal_lines(run: str, records: int) -> list[bytes]:
    """A conforming journal (chained v2 records): turns of 10 records each on branch 0."""
    sys.path.insert(0, str(REPO))

    phases = ["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"]
    lines: list[bytes] = []
    prev: str | None = None
    turn = 0
    while len(lines) < records:
        turn += 1
        tid = f"turn-{turn:07d}"
        body: list[dict[str, Any]] = [{"kind": "turn_planned", "turn": tid, "lineage": "bench"}]
        body.append({"kind": "intent_dispatched", "turn": tid, "intent": "fetch", "effect_class": "safe"})
        body += [{"kind": "phase_committed", "turn": tid, "phase": p} for p in phases]
        body.append({"kind": "turn_terminal", "turn": tid, "status": "completed"})
        for fields in body:
            if len(lines) >= records:
                break
            obj = {"v": 2, "run": run, "branch": 0, "lsn": len(lines), "at": "2026-01-01T00:00:00Z", **fields}
            if prev is not None:
                obj["prev"] = prev
            lines.append(canonical_bytes(obj))
            prev = digest(obj)
    return lines


def _psql(url: str, sql: str) -> None:
    import psycopg

    base, _, _ = url.rpartition("/")
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(sql)


def fresh_database(url: str) -> None:
    name = url.rpartition("/")[2]
    _psql(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _psql(url, f'CREATE DATABASE "{name}"')


def scratch_database(url: str, suffix: str) -> str:
    """(Re)create the database ``<name>_<suffix>`` beside the one ``url`` names (never written to itself);
    returns its URL."""
    base, _, name = url.partition("?")[0].rpartition("/")
    scratch = f"{base}/{name}_{suffix}"
    fresh_database(scratch)
    return scratch


def drop_database(url: str) -> None:
    _psql(url, f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')


@contextmanager
def own_database(suffix: str) -> Iterator[None]:
    """With a PostgreSQL DATABASE_URL: DATABASE_URL names a fresh database beside it (``<name>_<suffix>``)
    for the block, dropped after (the one named is never written to); otherwise nothing changes. For a
    benchmark that sets Django up in its own process, before it does."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield
        return
    scratch = scratch_database(url, suffix)
    os.environ["DATABASE_URL"] = scratch
    try:
        yield
    finally:
        os.environ["DATABASE_URL"] = url
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
        drop_database(scratch)


def manage_command(url: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gunicorn(url: str, workers: int, port: int, settings: str = "loopx_site.settings") -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": settings,
        "LOG_LEVEL": "WARNING",
        "API_TOKEN_THROTTLE": "1000000/min",
        # Served as production serves it: DEBUG on would keep every query in connection.queries and add
        # the debug machinery to each request. Nothing else is needed to serve 127.0.0.1 (ALLOWED_HOSTS
        # defaults to it and the development SECRET_KEY stays valid without LOOPX_PRODUCTION).
        "DEBUG": "0",
    }
    gunicorn = Path(sys.executable).with_name("gunicorn")
    proc = subprocess.Popen(
        [str(gunicorn), "loopx_site.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", str(workers), "-k", "sync"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("gunicorn did not start")


def warm_up(port: int, token: str, workers: int) -> None:
    """Let every worker boot and serve a first request before the clock starts: start_gunicorn returns as
    soon as the master listens, while each worker still imports Django and the project (seconds on a
    loaded machine) and then its first request loads the URL conf and opens its database connection. That
    is start-up, not ingest; it used to land in the first batches' latency and the API's total time."""
    for _ in range(4 * workers):  # a new connection each: the kernel hands them to the workers in turn
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("GET", "/api/v1/runs", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"warm-up answered {response.status}")


class FloorCopy:
    """The floor: the same rows via raw COPY into a table shaped like journals_journalrecord, one COPY and
    one commit per batch, on one connection held open as the API's is."""

    TABLE = "bench_copy_floor"
    COLUMNS = "run_id, seq, branch, lsn, kind, v, turn, digest, line, received_at"

    def __init__(self, url: str, lines: list[bytes]) -> None:
        import psycopg

        now = datetime.now(UTC)
        self.rows = [
            (1, seq, 0, seq - 1, "phase_committed", 2, "turn", hashlib.sha256(line).hexdigest(), line, now)
            for seq, line in enumerate(lines, start=1)
        ]
        self.conn = psycopg.connect(url)
        self.conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self.conn.execute(f"CREATE TABLE {self.TABLE} (LIKE journals_journalrecord INCLUDING ALL)")
        self.conn.commit()

    def batch(self, start: int, stop: int) -> float:
        """COPY rows[start:stop] and commit; returns the seconds it took."""
        t0 = time.perf_counter()
        with self.conn.cursor() as cur, cur.copy(f"COPY {self.TABLE} ({self.COLUMNS}) FROM STDIN") as copy:
            for row in self.rows[start:stop]:
                copy.write_row(row)
        self.conn.commit()
        return time.perf_counter() - t0

    def truncate(self) -> None:
        self.conn.execute(f"TRUNCATE {self.TABLE}")
        self.conn.commit()

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self.conn.commit()
        self.conn.close()


def bench_interleaved(
    port: int, token: str, run: str, batches: list[bytes], floor: FloorCopy, batch: int, block: int
) -> tuple[list[float], list[float]]:
    """The API and the floor in alternating blocks of ``block`` batches (the API's block of batches, then the
    floor's COPY of the same rows), so that a burst of load elsewhere on this shared machine lands on both
    sides alike instead of on whichever happened to run then. Returns each side's per-batch seconds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
    api: list[float] = []
    copy: list[float] = []
    for first in range(0, len(batches), block):
        for index in range(first, min(first + block, len(batches))):
            t0 = time.perf_counter()
            conn.request("POST", f"/api/v1/runs/{run}/records", body=batches[index], headers=headers)
            response = conn.getresponse()
            payload = response.read()
            if response.status != 200:
                raise RuntimeError(f"ingest answered {response.status}: {payload[:300]!r}")
            api.append(time.perf_counter() - t0)
        for index in range(first, min(first + block, len(batches))):
            copy.append(floor.batch(index * batch, (index + 1) * batch))
    conn.close()
    return api, copy


def bench_copy_one(floor: FloorCopy) -> float:
    """A single COPY of every row: the fastest a client can write them (informative)."""
    floor.truncate()
    return floor.batch(0, len(floor.rows))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--block", type=int, default=10, help="batches per side before the other side's turn")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args(argv)
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error("the ingest benchmark measures PostgreSQL: --database-url postgres://...")

    print(f"preparing {args.records:,} records, batches of {args.batch:,}, database {args.database_url}")
    lines = journal_lines("bench-run", args.records)
    batches = [b"".join(line + b"\n" for line in lines[i : i + args.batch]) for i in range(0, len(lines), args.batch)]
    fresh_database(args.database_url)
    manage_command(args.database_url, "migrate", "--noinput")
    token = manage_command(args.database_url, "create_api_token", "bench-runtime").strip().splitlines()[-1]

    port = free_port()
    server = start_gunicorn(args.database_url, args.workers, port)
    floor = FloorCopy(args.database_url, lines)
    try:
        warm_up(port, token, args.workers)
        latencies, copies = bench_interleaved(port, token, "bench-run", batches, floor, args.batch, args.block)
        copy_one_seconds = bench_copy_one(floor)
    finally:
        server.terminate()
        server.wait(timeout=30)
        floor.close()

    api_seconds, copy_seconds = sum(latencies), sum(copies)
    api_rate = args.records / api_seconds
    copy_rate = args.records / copy_seconds
    print(f"api        {api_rate:12,.0f} records/s  ({api_seconds:.2f} s)")
    print(f"copy       {copy_rate:12,.0f} records/s  ({copy_seconds:.2f} s, one COPY + commit per batch)")
    print(f"copy-one   {args.records / copy_one_seconds:12,.0f} records/s  ({copy_one_seconds:.2f} s, a single COPY)")
    print(
        f"batch of {args.batch:,}: p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p95 {percentile(latencies, 0.95) * 1000:.1f} ms (floor: p50 {statistics.median(copies) * 1000:.1f} ms, "
        f"p95 {percentile(copies, 0.95) * 1000:.1f} ms)"
    )
    blocks = [
        sum(copies[i : i + args.block]) / sum(latencies[i : i + args.block]) for i in range(0, len(copies), args.block)
    ]
    print(
        f"api / copy per block of {args.block} batches: min {min(blocks):.2f}, "
        f"median {statistics.median(blocks):.2f}, max {max(blocks):.2f}"
    )
    ratio = api_rate / copy_rate
    verdict = "meets" if ratio >= TARGET else "misses"
    print(f"api / copy = {ratio:.2f} ({verdict} the target of >= {TARGET:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
