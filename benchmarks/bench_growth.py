"""One run grown batch by batch: does each batch cost what it adds, or what the run already holds?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/loopx python -m benchmarks.bench_growth   # 1,000,000 records
    ... python -m benchmarks.bench_growth --records 100000        # 100 batches (minutes)
    ... python -m benchmarks.bench_growth --records 100000 --check  # exit 1 when a target is missed
    ... python -m benchmarks.bench_growth --records 45000 --statements 40  # batch 40's statements, timed

Without a PostgreSQL ``DATABASE_URL`` (or ``BENCH_DATABASE_URL``) it prints "skipped: ..." and exits 0. It
never writes to the database that names: it (re)creates a scratch database beside it
(``<name>_bench_growth``), migrates it, and drops it at the end. The measuring runs in a child process (so
that Django is set up on the scratch database there and nowhere else in a ``python -m benchmarks`` run),
with kombu's filesystem broker in a temporary folder: the assessments this benchmark times are never
handed to a worker of a shared Redis.

The journal is bench_engine's (turns of about ten records: planned, phases, dispatches with their
readbacks, terminal; v1 records upgraded to v2 early on; three forks; checkpoints), for one run, cached as
var/bench/growth-<records>-<generator version>-nostate.jsonl (its checkpoints carry no state: the whole state
of a long run is one line of megabytes, more than ingest takes). It is sent in batches of ``--batch`` records, and for
each batch, in this order, timed alone:

- ``ingest``: the real ingest service (``records_ingest``), as the API calls it: the batch stored, the run's
  pending flag raised, ``assess_run`` published (to the filesystem broker) when the flag was lowered;
- ``assess``: the worker's task body (``assessment_run`` in recovery/background.py) called in-process, as
  the worker calls it for that message: the flag lowered, the committed prefix assessed, stored, projected;
- floor: the batch's lines parsed with orjson and hashed with sha256, the work no ingest can avoid.

On a server whose autovacuum is off, the tables are analyzed between batches, untimed, as autovacuum's
defaults would (``analyze_as_autovacuum``): without statistics the planner reads a whole run's records to
find one batch's turns, which no production server with its default settings does.

Printed per tenth of the run's length: ingest and assessment p50/p95, the floor's p50, and the
TurnAssessment and Assessment rows stored so far (with the two tables' size on disk), and the full
collections the assessments ran (how many, their milliseconds: engine/warm.py). Then the ratios: the
last tenth's median assessment to the first tenth's; assessment / ingest per batch (max and p95), then
apart for the batches that wrote the run's fold snapshot and the others; the full collections' longest and
their share of a batch; ingest and assessment / floor per batch (p50). Targets (``--check`` exits 1 when
one is missed): the last tenth's median assessment within 1.5x the first tenth's, and every batch's
assessment within 3x its ingest.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import hashlib
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_engine import CACHE, GENERATOR_VERSION, generate, peak_rss_mb
from benchmarks.bench_ingest import drop_database, manage_command, percentile, scratch_database

REPO = Path(__file__).resolve().parents[1]
SKIP = "skipped: set DATABASE_URL (or BENCH_DATABASE_URL) to a PostgreSQL database"
RUN = "bench-growth"
TARGET_GROWTH = 1.5  # last tenth's median assessment / first tenth's
TARGET_PER_BATCH = 3.0  # each batch's assessment / its ingest


def journal(records: int) -> Path:
    """The run's journal, generated once and cached (bench_engine's generator, this run's id)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"growth-{records}-{GENERATOR_VERSION}-nostate.jsonl"
    if not path.exists():
        generate(path, records, run=RUN, checkpoint_state=False)  # every line within ingest's line limit
    return path


def batches(path: Path, size: int) -> list[bytes]:
    with open(path, "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    return [b"".join(lines[i : i + size]) for i in range(0, len(lines), size)]


def floor(body: bytes) -> float:
    """Seconds to parse each line of the batch with orjson and hash it with sha256."""
    import orjson

    started = time.perf_counter()
    for line in body.splitlines():
        orjson.loads(line)
        hashlib.sha256(line).hexdigest()
    return time.perf_counter() - started


class Bar:
    """A progress bar on stderr, drawn only on a terminal (a log or a pipe gets none)."""

    def __init__(self, total: int) -> None:
        self.total = max(1, total)
        self.on = sys.stderr.isatty()
        self.started = time.monotonic()

    def show(self, done: int, note: str) -> None:
        if not self.on:
            return
        elapsed = time.monotonic() - self.started
        left = elapsed / done * (self.total - done) if done else 0.0
        bar = "#" * (25 * done // self.total)
        sys.stderr.write(f"\rgrowth [{bar:<25}] {done}/{self.total} batches, {note}, {left:5.0f} s left ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.on:
            sys.stderr.write("\n")


@dataclass
class Tenth:
    """One tenth of the run's length: each batch's seconds, and the rows stored by its end."""

    records: int = 0
    ingest: list[float] = field(default_factory=list)
    assess: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    sealed: list[bool] = field(default_factory=list)  # whether the batch's assessment wrote the fold snapshot
    full_gc: list[float] = field(default_factory=list)  # seconds of each full collection during its assessments
    turn_rows: int = 0
    assessments: int = 0
    stored_mb: float = 0.0


def stored_rows() -> tuple[int, int, float]:
    """TurnAssessment and Assessment rows stored so far, and the size on disk (MB) of those two tables and
    of the output entries'."""
    from django.db import connection

    # Django is set up at run time, in the child, on the scratch database: models load once the app registry is ready.
    from recovery.models import Assessment, OutputEntry, TurnAssessment

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size(%s) + pg_total_relation_size(%s) + pg_total_relation_size(%s)",
            [TurnAssessment._meta.db_table, Assessment._meta.db_table, OutputEntry._meta.db_table],
        )
        size = cursor.fetchone()
    return TurnAssessment.objects.count(), Assessment.objects.count(), (size[0] if size else 0) / 1e6


def snapshot_through() -> int | None:
    """The seq the run's stored fold snapshot was folded through (None: none stored)."""
    # Django is set up at run time, in the child, on the scratch database: models load once the app registry is ready.
    from recovery.models import FoldSnapshot

    return FoldSnapshot.objects.filter(run__run_id=RUN).values_list("through_seq", flat=True).first()


def autovacuum_on() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        row = cursor.fetchone()
    return bool(row) and str(row[0]) == "on"


def analyze_as_autovacuum() -> list[str]:
    """ANALYZE each table as PostgreSQL's autovacuum would by default: once the rows changed since its last
    analysis pass 50 + 10% of its rows (``autovacuum_analyze_threshold``, ``..._scale_factor``). For a
    server whose autovacuum is off (this machine's): production runs it, and the worker's reads are planned
    from the statistics it keeps. Called between batches, outside the timed steps, as autovacuum works in
    its own process. Returns the tables analyzed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
            " WHERE s.n_mod_since_analyze > 50 + 0.1 * GREATEST(c.reltuples, 0)"
        )
        tables = [str(name) for (name,) in cursor.fetchall()]
        for name in tables:
            cursor.execute(f'ANALYZE "{name}"')
    return tables


class FullCollections:
    """The seconds of each full collection (the collector's oldest generation) while it is installed, from the
    collector's own callbacks: the batches whose assessment ran one are the largest of a long run."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds.append(time.perf_counter() - self._started)

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


class Statements:
    """Each statement a batch's assessment sends, with its milliseconds, printed in order at the end; the rest
    of the batch is Python's. Those sent through Django's cursor are timed from sending to the answer read
    (``execute_wrapper``); the writes kernel/dialect.py sends on psycopg's own cursor (unnest statements,
    and COPY, timed from its start to its end, rows written by the client included) through wrappers of
    psycopg's ``Cursor.execute`` and ``Cursor.copy`` installed while it is entered."""

    def __init__(self) -> None:
        self.timed: list[tuple[float, str]] = []
        self._installed = contextlib.ExitStack()

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.timed.append((time.perf_counter() - started, " ".join(str(sql).split())))

    def __enter__(self) -> Statements:
        import psycopg
        from django.db import connection

        execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy
        timed = self.timed

        def plain_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if type(cursor) is not psycopg.Cursor:  # Django's cursors: timed by the execute wrapper
                return execute(cursor, query, *args, **kwargs)
            started = time.perf_counter()
            try:
                return execute(cursor, query, *args, **kwargs)
            finally:
                timed.append((time.perf_counter() - started, "(psycopg) " + " ".join(str(query).split())))

        @contextlib.contextmanager
        def timed_copy(cursor: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                with copy(cursor, statement, *args, **kwargs) as writing:
                    yield writing
            finally:
                timed.append((time.perf_counter() - started, "(psycopg) " + " ".join(str(statement).split())))

        def restore() -> None:
            psycopg.Cursor.execute = execute  # type: ignore[method-assign]
            psycopg.Cursor.copy = copy  # type: ignore[method-assign]

        psycopg.Cursor.execute = plain_execute  # type: ignore[method-assign,assignment]
        psycopg.Cursor.copy = timed_copy  # type: ignore[method-assign,assignment]
        self._installed.callback(restore)
        self._installed.enter_context(connection.execute_wrapper(self))
        return self

    def __exit__(self, *exc: object) -> None:
        self._installed.close()

    def show(self, index: int, total: float) -> None:
        spent = sum(seconds for seconds, _ in self.timed)
        print(f"batch {index}: {len(self.timed)} statements, {spent * 1e3:.1f} ms of {total * 1e3:.1f} ms")
        for seconds, sql in self.timed:
            print(f"  {seconds * 1e3:7.2f} ms  {sql[:160]}")


def grow(bodies: list[bytes], profile: Sequence[int] = (), statements: Sequence[int] = ()) -> list[Tenth]:
    """Ingest and assess every batch in turn; the figures by tenth of the run's length. ``profile``: the
    numbers of batches whose assessment runs under cProfile (its top entries printed; that batch's time
    then counts the profiler too); ``statements``: those whose assessment's statements are printed with
    their times."""
    # Django is set up at run time, in the child, on the scratch database: services load once the app registry is ready.
    from journals.services import records_ingest
    from recovery.background import assessment_run

    tenths = [Tenth() for _ in range(10)]
    bar = Bar(len(bodies))
    analyze = not autovacuum_on()
    if analyze:
        print("autovacuum is off on this server: its analysis is done between batches, untimed", flush=True)
    for index, body in enumerate(bodies):
        if analyze:
            analyze_as_autovacuum()
        through = snapshot_through()
        tenth = tenths[index * 10 // len(bodies)]
        started = time.perf_counter()
        result = records_ingest(run_id=RUN, body=body, content_type="application/x-ndjson", token=None)
        ingested = time.perf_counter()
        traced = Statements() if index in statements and index not in profile else None
        with FullCollections() as full:
            if index in profile:
                profiler = cProfile.Profile()
                outcome = profiler.runcall(assessment_run, run_id=RUN)
                bar.close()
                print(f"batch {index}:")
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
                pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
            elif traced is not None:
                with traced:
                    outcome = assessment_run(run_id=RUN)
            else:
                outcome = assessment_run(run_id=RUN)
            assessed = time.perf_counter()
        if traced is not None:  # printed after the batch's clock stopped
            bar.close()
            traced.show(index, assessed - ingested)
        lines = body.count(b"\n")
        if result.stored != lines or outcome != "stored":
            raise RuntimeError(f"batch {index}: {result.stored} of {lines} records stored, assessment {outcome}")
        tenth.records += lines
        tenth.ingest.append(ingested - started)
        tenth.assess.append(assessed - ingested)
        tenth.floor.append(floor(body))
        tenth.sealed.append(snapshot_through() != through)
        tenth.full_gc.extend(full.seconds)
        if index + 1 == len(bodies) or (index + 1) * 10 // len(bodies) != index * 10 // len(bodies):
            tenth.turn_rows, tenth.assessments, tenth.stored_mb = stored_rows()
        last = f"last: ingest {(ingested - started) * 1e3:.0f} ms, assess {(assessed - ingested) * 1e3:.0f} ms"
        bar.show(index + 1, last)
    bar.close()
    return tenths


def report(tenths: list[Tenth], check: bool) -> int:
    ms = 1000.0
    print(
        f"{'tenth':>5} {'records':>10} {'ingest p50':>10} {'p95':>8} {'assess p50':>10} {'p95':>8} "
        f"{'floor p50':>9} {'TurnAssessment':>14} {'Assessment':>10} {'stored MB':>9} {'full GC':>7} {'ms':>5}"
    )
    total = 0
    for number, t in enumerate(tenths, start=1):
        if not t.ingest:
            continue
        total += t.records
        print(
            f"{number:>5} {total:>10,}"
            f" {statistics.median(t.ingest) * ms:>10.1f} {percentile(t.ingest, 0.95) * ms:>8.1f}"
            f" {statistics.median(t.assess) * ms:>10.1f} {percentile(t.assess, 0.95) * ms:>8.1f}"
            f" {statistics.median(t.floor) * ms:>9.2f} {t.turn_rows:>14,} {t.assessments:>10,} {t.stored_mb:>9.1f}"
            f" {len(t.full_gc):>7} {sum(t.full_gc) * ms:>5.0f}"
        )
    filled = [t for t in tenths if t.ingest]
    growth = statistics.median(filled[-1].assess) / statistics.median(filled[0].assess)
    ingest = [s for t in filled for s in t.ingest]
    assess = [s for t in filled for s in t.assess]
    floors = [s for t in filled for s in t.floor]
    per_batch = [a / i for a, i in zip(assess, ingest, strict=True)]
    growth_ok = growth <= TARGET_GROWTH
    batch_ok = max(per_batch) <= TARGET_PER_BATCH
    print(
        f"last tenth / first tenth, median assessment: {growth:.2f}x "
        f"(target <= {TARGET_GROWTH:g}x: {'ok' if growth_ok else 'MISSED'})"
    )
    print(
        f"assessment / ingest per batch: max {max(per_batch):.2f}x, p95 {percentile(per_batch, 0.95):.2f}x, "
        f"p50 {statistics.median(per_batch):.2f}x (target: every batch <= {TARGET_PER_BATCH:g}x: "
        f"{'ok' if batch_ok else 'MISSED'})"
    )
    sealed = [x for t in filled for x in t.sealed]
    for name, which in (("batches that wrote the snapshot", True), ("the other batches", False)):
        times = [a for a, w in zip(assess, sealed, strict=True) if w == which]
        ratios = [r for r, w in zip(per_batch, sealed, strict=True) if w == which]
        if times:
            print(
                f"{name}: {len(times)}, assessment p50 {statistics.median(times) * ms:.0f} ms, max "
                f"{max(times) * ms:.0f} ms; / ingest max {max(ratios):.2f}x, p95 {percentile(ratios, 0.95):.2f}x, "
                f"p50 {statistics.median(ratios):.2f}x"
            )
    collections = [x for t in filled for x in t.full_gc]
    if collections:
        print(
            f"full collections during the assessments: {len(collections)}, {max(collections) * ms:.0f} ms the longest, "
            f"{sum(collections) / len(assess) * ms:.2f} ms a batch on average; objects out of the collector's sight "
            f"at the end: {gc.get_freeze_count():,}"
        )
    print(
        f"floor (orjson + sha256 of the batch's lines) per batch: p50 {statistics.median(floors) * ms:.2f} ms; "
        f"ingest / floor p50 {statistics.median([i / f for i, f in zip(ingest, floors, strict=True)]):.1f}x, "
        f"assessment / floor p50 {statistics.median([a / f for a, f in zip(assess, floors, strict=True)]):.1f}x"
    )
    print(f"peak RSS of the measuring process: {peak_rss_mb():.0f} MB")
    return 1 if check and not (growth_ok and batch_ok) else 0


def child(records: int, size: int, check: bool, profile: Sequence[int] = (), statements: Sequence[int] = ()) -> int:
    """The measurement, in the child process whose environment names the scratch database."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")
    import django

    django.setup()
    path = journal(records)
    bodies = batches(path, size)
    lines = sum(body.count(b"\n") for body in bodies)
    print(f"bench_growth: one run, {lines:,} records in {len(bodies):,} batches of {size:,}", flush=True)
    return report(grow(bodies, profile, statements), check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="the run's length (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=1_000, help="records per batch (default 1,000)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database afterwards")
    parser.add_argument(
        "--profile", type=int, action="append", default=[], help="profile this batch's assessment (0-based; repeat)"
    )
    parser.add_argument(
        "--statements", type=int, action="append", default=[], help="print this batch's statements (0-based; repeat)"
    )
    default_url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL", "")
    parser.add_argument("--database-url", default=default_url)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.records, args.batch, args.check, args.profile, args.statements)
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        print(SKIP)
        return 0
    journal(args.records)  # generated (once) before the clock of any batch starts
    scratch = scratch_database(args.database_url, "bench_growth")
    folder = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    env = {**os.environ, "DATABASE_URL": scratch, "CELERY_BROKER_URL": "filesystem://", "REDIS_URL": "",
           "LOOPX_VAR_DIR": str(folder / "var"), "LOG_LEVEL": "ERROR", "DEBUG": "0",
           "DJANGO_SETTINGS_MODULE": "loopx_site.settings"}  # fmt: skip
    for name in ("LOOPX_FAILPOINTS", "LOOPX_FAILPOINTS_ARM_DIR", "CELERY_TASK_ALWAYS_EAGER"):
        env.pop(name, None)
    try:
        manage_command(scratch, "migrate", "--noinput")
        argv_child = ["--child", "--records", str(args.records), "--batch", str(args.batch)]
        argv_child += [f"--profile={n}" for n in args.profile]
        argv_child += [f"--statements={n}" for n in args.statements]
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_growth", *argv_child, *(["--check"] if args.check else [])],
            cwd=REPO,
            env=env,
            check=False,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if not args.keep:
            drop_database(scratch)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
