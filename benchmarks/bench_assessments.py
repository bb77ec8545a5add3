"""Assessments of a growing run: rows written and time per batch, beside a whole fold of the same journal.

    python -m benchmarks.bench_assessments            # 2,000 turns in 100 batches
    python -m benchmarks.bench_assessments --small    # 300 turns in 20 batches (seconds)

Builds its own database (SQLite in a temporary directory; with a PostgreSQL DATABASE_URL, a scratch database
beside the one it names, ``<name>_bench_assessments``, dropped at the end). One run is sent batch
by batch through the ingest service, and after each batch the worker's service (``assessment_refresh``,
as the task calls it) assesses it: from the run's fold snapshot, storing rows only for the turns that
changed, compacting superseded assessments (no grace here). It prints, per tenth of the batches, the rows
written and the seconds the assessment took; then the totals beside what one row per turn per assessment
would have stored, the output bytes kept, and the floor: the plain engine folding the whole journal once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from benchmarks.bench_ingest import own_database
from engine.writer import JournalWriter


def _setup_django(workdir: str) -> None:
    if not os.environ.get("DATABASE_URL"):
        os.environ["LOOPX_VAR_DIR"] = workdir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS"] = "0"
    import django

    django.setup()


def _lines(run_id: str, turns: int) -> list[bytes]:
    """Turns that run side by side: each batch plans some, commits phases of others and ends a few."""
    w = JournalWriter(run_id, keep_lines=True)
    for n in range(turns):
        w.plan(f"t{n}", lineage=f"job-{n}")
    for n in range(turns):
        w.commit(f"t{n}", "plan")
        if n % 3:
            w.commit(f"t{n}", "envelope")
        if n % 2:
            w.complete_turn(f"c{n}", lineage=f"job-c{n}")
    return w.lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_assessments", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--small", action="store_true", help="300 turns in 20 batches")
    args = parser.parse_args(argv)
    if args.small:
        args.turns, args.batches = 300, 20

    with own_database("bench_assessments"), tempfile.TemporaryDirectory(prefix="loopx-bench-assessments-") as workdir:
        _setup_django(workdir)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
        from engine import assess
        from journals.models import Turn
        from journals.services import records_ingest
        from recovery.models import Assessment, TurnAssessment
        from recovery.services import assessment_refresh

        lines = _lines("bench-grow", args.turns)
        size = max(1, len(lines) // args.batches)
        print(f"bench_assessments: {len(lines):,} records in batches of {size:,}", flush=True)
        seconds: list[float] = []
        rows_before = 0
        every = max(1, args.batches // 10)
        run = None
        for i, start in enumerate(range(0, len(lines), size)):
            body = b"\n".join(lines[start : start + size]) + b"\n"
            run = records_ingest(run_id="bench-grow", body=body, content_type="application/x-ndjson", token=None).run
            t0 = time.perf_counter()
            stored = assessment_refresh(run=run)
            seconds.append(time.perf_counter() - t0)
            rows = TurnAssessment.objects.filter(assessment__run=run).count()
            if i % every == 0:
                print(
                    f"  batch {i + 1:4d}: {rows - rows_before:6,} rows, {seconds[-1]:.3f}s, "
                    f"from snapshot: {'yes' if stored.from_snapshot else 'no'}",
                    flush=True,
                )
            rows_before = rows
        assert run is not None
        t0 = time.perf_counter()
        assess(lines)
        whole = time.perf_counter() - t0
        assessments = list(Assessment.objects.filter(run=run).values_list("turn_count", "output"))
        per_turn = sum(count for count, _ in assessments)
        kept = sum(len(str(output)) for _, output in assessments)
        print(f"  turns {Turn.objects.filter(run=run).count():,}, assessments {len(assessments):,}")
        print(f"  rows stored {rows_before:,}; one per turn per assessment would be {per_turn:,}")
        print(f"  output kept {kept:,} characters (every superseded one compacted)")
        print(
            f"  assessment per batch: median {statistics.median(seconds):.3f}s, last {seconds[-1]:.3f}s; "
            f"floor, one whole fold of the journal: {whole:.3f}s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
