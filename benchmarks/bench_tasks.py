"""Background assessments on Redis with real Celery workers, beside a no-op task's round trip.

    REDIS_URL=redis://127.0.0.1:6379/14 DATABASE_URL=postgres://postgres@127.0.0.1:5432/loopx_tasks \\
        python -m benchmarks.bench_tasks                 # 10,000 small runs, two worker processes
    ... python -m benchmarks.bench_tasks --runs 1000     # smaller

Without REDIS_URL and a PostgreSQL DATABASE_URL it prints "skipped: ..." and exits 0. It never writes to
the database DATABASE_URL names: it (re)creates a scratch database beside it (``<name>_bench_tasks``) and
migrates it; on Redis it uses a queue of its own (``bench_tasks_<pid>``), so other consumers of that Redis
are neither fed nor robbed.

- ``throughput``: ingest N small runs through the store's service with no worker running (each commit
  publishes one ``assess_run``), then start two worker processes (two Celery workers, pool of one each)
  and time the first task's start to the last task's end, from the tasks' own marks in the database;
- ``latency``: with the workers idle, one small run at a time: the time from the ingest batch's answer
  (the service returned: committed and published) to its decision being readable (``assessed_seq``
  caught up), p50 and p95;
- floor ``noop``: a task that only pushes to a Redis list, published on the same broker and queue to the
  same workers, timed from publish to the push being popped here (p50, p95).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from celery import shared_task

from benchmarks.bench_ingest import scratch_database

REPO = Path(__file__).resolve().parents[1]
SKIP = "skipped: set REDIS_URL and DATABASE_URL"


@shared_task(name="benchmarks.noop", acks_late=True, soft_time_limit=25, time_limit=30, ignore_result=True)
def noop(url: str, key: str) -> None:
    """The floor: nothing but the broker's round trip (the reply goes to a Redis list the bench pops)."""
    import redis

    redis.Redis.from_url(url).rpush(key, b"1")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:7.1f} ms   p95 {_pct(values, 0.95) * 1000:7.1f} ms"


def _start_workers(env: dict[str, str], queue: str, count: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    workers = []
    for n in range(count):
        log = open(logs / f"worker{n}.log", "wb")  # noqa: SIM115  lives as long as the worker
        workers.append(
            subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "loopx_site", "worker", "-n", f"bench{n}-{queue}@%h",
                 "-Q", queue, "--concurrency", "1", "--loglevel", "WARNING", "--without-mingle",
                 "--without-gossip", "--include", "benchmarks.bench_tasks"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        )
    return workers


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for proc in workers:
        proc.terminate()
    for proc in workers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000, help="small runs for the throughput (default 10,000)")
    parser.add_argument("--turns", type=int, default=2, help="turns per small run (default 2: ~20 records)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--samples", type=int, default=200, help="latency samples, each kind (default 200)")
    args = parser.parse_args(argv)
    redis_url, database_url = os.environ.get("REDIS_URL", ""), os.environ.get("DATABASE_URL", "")
    if not redis_url or not database_url.startswith(("postgres://", "postgresql://")):
        print(SKIP)
        return 0

    scratch = scratch_database(database_url, "bench_tasks")
    queue = f"bench_tasks_{os.getpid()}"
    env = {**os.environ, "DATABASE_URL": scratch, "REDIS_URL": redis_url, "LOG_LEVEL": "WARNING",
           "DJANGO_SETTINGS_MODULE": "loopx_site.settings", "PYTHONUNBUFFERED": "1"}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True)
    os.environ.update(DATABASE_URL=scratch, LOG_LEVEL="WARNING")
    sys.path.insert(0, str(REPO))
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")
    django.setup()
    import redis
    from django.db.models import F, Max, Min

    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.models import PendingAssessment, Run
    from journals.services import records_ingest
    from loopx_site.celery import app
    from ops.demo import workload_lines

    app.conf.task_default_queue = queue  # before the first publish: every message goes to our queue
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / queue  # noqa: S108  the fallback when TMPDIR is unset; the directory is the benchmark's own queue name
    logs.mkdir(parents=True, exist_ok=True)

    def ingest(run_id: str) -> None:
        body = b"".join(line + b"\n" for line in workload_lines(run_id, turns=args.turns, seed=len(run_id)))
        records_ingest(run_id=run_id, body=body, content_type="application/x-ndjson", token=None)

    print(f"scratch database {scratch.rpartition('/')[2]}, queue {queue}, {args.workers} worker processes")
    started = time.perf_counter()
    for n in range(args.runs):
        ingest(f"bench-{n:06d}")
    ingest_seconds = time.perf_counter() - started
    records = Run.objects.aggregate(n=Max("record_count"))["n"]
    print(f"ingested {args.runs:,} runs of {records} records in {ingest_seconds:.1f} s; starting the workers")

    workers = _start_workers(env, queue, args.workers, logs)
    try:
        flags = PendingAssessment.objects.filter(run__run_id__startswith="bench-")
        while flags.filter(finished_at__isnull=True).exists() or flags.filter(pending=True).exists():
            if any(w.poll() is not None for w in workers):
                raise SystemExit(f"a worker exited; see {logs}")
            time.sleep(0.5)
        span = flags.aggregate(first=Min("started_at"), last=Max("finished_at"))
        seconds = (span["last"] - span["first"]).total_seconds()
        assessed = Run.objects.filter(run_id__startswith="bench-", assessed_seq=F("last_seq")).count()

        latencies: list[float] = []
        for n in range(args.samples):
            run_id = f"lat-{n:05d}"
            ingest(run_id)
            answered = time.perf_counter()
            run = Run.objects.only("pk").get(run_id=run_id)
            while not Run.objects.filter(pk=run.pk, assessed_seq__isnull=False).exists():
                time.sleep(0.001)
            latencies.append(time.perf_counter() - answered)

        client = redis.Redis.from_url(redis_url)
        key = f"{queue}:noop:{uuid.uuid4().hex}"
        round_trips: list[float] = []
        for _ in range(args.samples):
            sent = time.perf_counter()
            noop.apply_async(args=[redis_url, key])  # type: ignore[arg-type]  # celery takes a list; celery-types wants a tuple
            client.blpop([key], timeout=30)
            round_trips.append(time.perf_counter() - sent)
        client.delete(key)
    finally:
        _stop(workers)
        # kombu's channels have queue_delete; its stubs' StdChannel leaves it out.
        app.connection_for_write().default_channel.queue_delete(queue)  # type: ignore[attr-defined]

    # The workers' logs are kept only when a worker exited (the message above names them).
    shutil.rmtree(logs, ignore_errors=True)
    print(f"throughput   {assessed / seconds:8.1f} assessments/s  ({assessed:,} runs in {seconds:.1f} s, "
          f"{args.workers} worker processes)")
    print(f"latency      ingest answer -> decision readable   {_ms(latencies)}   ({args.samples} runs)")
    print(f"floor noop   publish -> task ran -> reply          {_ms(round_trips)}   (same broker, same workers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
