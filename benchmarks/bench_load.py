"""Load over HTTP: several runtimes posting batches at once through gunicorn, beside the in-process floor.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/loopx python -m benchmarks.bench_load
    ... python -m benchmarks.bench_load --writers 16 --batches 100 --records 50   # the size of a field test
    ... python -m benchmarks.bench_load --seconds 20                           # a shorter cap

Without a PostgreSQL ``DATABASE_URL`` (or ``BENCH_DATABASE_URL``) it prints "skipped: ..." and exits 0. It
never writes to the database that names: it (re)creates a scratch database beside it
(``<name>_bench_load``), migrates it, and drops it at the end. Everything is on loopback: gunicorn with the
production config (``ops.gunicorn_conf``: ``--web-workers`` processes of ``--threads`` threads) and, when
``redis-server`` is installed, a redis-server of its own as the broker (else kombu's filesystem transport in a temporary
folder). No Celery worker runs: the figures are ingest's. Each run's first batch publishes its assessment;
later batches find the flag raised.

- ``load``: ``--writers`` threads, each a runtime with a run of its own and one keep-alive connection,
  post ``--batches`` JSONL batches of ``--records`` records (every tenth one sent twice, as a runtime that
  lost an answer would); each POST is timed. It stops at ``--seconds`` even if not done. Printed: records
  stored per second (wall clock, first POST to last answer), p50 and p99 of a POST, and the answers.
- floor ``in-process``: the same number of batches of the same size through the store's ingest service
  (``records_ingest``) called directly, one writer, no HTTP, in a child process on the same database:
  what ingest costs without the web server.

The ratio load / floor says what HTTP, gunicorn and concurrency cost or gain over one in-process writer.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks.bench_ingest import (
    drop_database,
    free_port,
    journal_lines,
    manage_command,
    percentile,
    scratch_database,
    warm_up,
)

REPO = Path(__file__).resolve().parents[1]
SKIP = "skipped: set DATABASE_URL (or BENCH_DATABASE_URL) to a PostgreSQL database"


def _bodies(run: str, batches: int, records: int) -> list[bytes]:
    lines = journal_lines(run, batches * records)
    return [b"".join(line + b"\n" for line in lines[i : i + records]) for i in range(0, len(lines), records)]


class Broker:
    """A redis-server of the benchmark's own on loopback, or kombu's filesystem transport in a temporary folder."""

    def __init__(self, folder: Path) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = "filesystem://"
        if shutil.which("redis-server"):
            port = free_port()
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(folder)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            self.url = f"redis://127.0.0.1:{port}/0"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _start_web(env: dict[str, str], port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    web_env = {**env, "PORT": str(port), "BIND_HOST": "127.0.0.1", "WEB_CONCURRENCY": str(workers),
               "GUNICORN_THREADS": str(threads), "GUNICORN_MAX_REQUESTS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:ops.gunicorn_conf", "loopx_site.wsgi"],
        cwd=REPO, env=web_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        with contextlib.suppress(OSError), contextlib.closing(conn):
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        if proc.poll() is not None:
            raise RuntimeError("gunicorn exited while starting")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("gunicorn did not answer /healthz within 120 s")


class Load:
    def __init__(self, port: int, token: str, stop_at: float) -> None:
        self.port = port
        self.token = token
        self.stop_at = stop_at
        self.latencies: list[float] = []
        self.answers: Counter[int] = Counter()
        self.stored = 0
        self.lock = threading.Lock()

    def writer(self, run: str, bodies: list[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-ndjson"}
        try:
            for index, body in enumerate(bodies):
                for _ in range(2 if index % 10 == 9 else 1):
                    if time.monotonic() >= self.stop_at:
                        return
                    started = time.perf_counter()
                    conn.request("POST", f"/api/v1/runs/{run}/records", body=body, headers=headers)
                    response = conn.getresponse()
                    payload = response.read()
                    elapsed = time.perf_counter() - started
                    stored = json.loads(payload).get("stored", 0) if response.status == 200 else 0
                    with self.lock:
                        self.latencies.append(elapsed)
                        self.answers[response.status] += 1
                        self.stored += stored
        finally:
            conn.close()


def floor_child(batches: int, records: int) -> None:
    """The in-process floor, in a child process (so that Django is set up on the scratch database there and
    nowhere else in a ``python -m benchmarks`` run): one JSON line of per-batch seconds."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")
    import django

    django.setup()
    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.services import records_ingest

    seconds: list[float] = []
    for index, body in enumerate(_bodies("floor-run", batches, records)):
        started = time.perf_counter()
        records_ingest(run_id="floor-run", body=body, content_type="application/x-ndjson", token=None)
        seconds.append(time.perf_counter() - started)
        if index == 0:
            seconds.pop()  # the first batch opens the connection and creates the run: start-up
    print(json.dumps(seconds))


def _ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:7.1f} ms, p99 {percentile(values, 0.99) * 1000:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--batches", type=int, default=50, help="batches per writer")
    parser.add_argument("--records", type=int, default=50, help="records per batch")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop the load after this long")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    default_url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL", "")
    parser.add_argument("--database-url", default=default_url)
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_child:
        floor_child(args.batches, args.records)
        return 0
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        print(SKIP)
        return 0

    scratch = scratch_database(args.database_url, "bench_load")
    folder = Path(tempfile.mkdtemp(prefix="bench-load-"))
    broker = Broker(folder)
    env = {**os.environ, "DATABASE_URL": scratch, "REDIS_URL": "" if broker.proc is None else broker.url,
           "CELERY_BROKER_URL": broker.url, "LOOPX_VAR_DIR": str(folder / "var"), "LOG_LEVEL": "WARNING",
           "DJANGO_SETTINGS_MODULE": "loopx_site.settings", "API_TOKEN_THROTTLE": "100000000/min", "DEBUG": "0"}
    env.pop("LOOPX_FAILPOINTS", None)
    os.environ.update(LOOPX_VAR_DIR=env["LOOPX_VAR_DIR"], CELERY_BROKER_URL=broker.url)
    web: subprocess.Popen[bytes] | None = None
    try:
        manage_command(scratch, "migrate", "--noinput")
        token = manage_command(scratch, "create_api_token", "bench-load").strip().splitlines()[-1]
        total = args.writers * args.batches
        print(f"scratch database {scratch.rpartition('/')[2]}, broker {broker.url.partition(':')[0]}; "
              f"{args.writers} writers x {args.batches} batches of {args.records} records "
              f"(gunicorn {args.web_workers} x {args.threads} threads)")

        floor = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_load", "--floor-child", "--batches", str(total + 1),
             "--records", str(args.records)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=max(120.0, args.seconds * 4), check=True,
        )
        floor_seconds: list[float] = json.loads(floor.stdout.strip().splitlines()[-1])

        port = free_port()
        web = _start_web(env, port, args.web_workers, args.threads)
        warm_up(port, token, args.web_workers * args.threads)
        bodies = {f"load-{w:03d}": _bodies(f"load-{w:03d}", args.batches, args.records) for w in range(args.writers)}
        started = time.monotonic()
        load = Load(port, token, started + args.seconds)
        threads = [threading.Thread(target=load.writer, args=(run, b), daemon=True) for run, b in bodies.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(args.seconds + 130)
        wall = time.monotonic() - started
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=30)
        broker.stop()
        shutil.rmtree(folder, ignore_errors=True)
        drop_database(scratch)

    floor_records = len(floor_seconds) * args.records
    floor_rate = floor_records / sum(floor_seconds)
    load_rate = load.stored / wall
    done = "all sent" if load.stored >= total * args.records else f"stopped at {args.seconds:.0f} s"
    answers = ", ".join(f"{n} x {status}" for status, n in sorted(load.answers.items()))
    print(f"load       {load_rate:10,.0f} records/s  {_ms(load.latencies)}  ({load.stored:,} records, "
          f"{sum(load.answers.values()):,} POSTs in {wall:.1f} s, {done}; answers: {answers})")
    print(f"floor      {floor_rate:10,.0f} records/s  {_ms(floor_seconds)}  (in-process ingest, one writer, "
          f"{floor_records:,} records)")
    print(f"load / floor = {load_rate / floor_rate:.2f}")
    return 0 if set(load.answers) == {200} else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
