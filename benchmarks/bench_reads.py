"""Turn list and turn detail through the API at scale, served by gunicorn, beside a plain Django view.

    python -m benchmarks.bench_reads                 # 100,000 turns / 1,000,000 records (a few minutes)
    python -m benchmarks.bench_reads --scale 0.1     # 10,000 turns / 100,000 records

It (re)creates a PostgreSQL database, migrates it and loads it with COPY (runs of 1,000 turns, each turn
10 records, 7 planned phases with their committing records and 1 intent; decisions spread over the five
kinds), then starts gunicorn with benchmarks/bench_settings.py (the project's URLs plus one baseline view)
and measures, one request at a time, the suites interleaved (blocks of 10 requests, suite after suite):

- ``baseline``: a plain Django view rendering 50 rows of one indexed table (turns of one decision, newest
  first, as JSON: no authentication, no serializer, no pagination count); the target is judged on it;
- ``page``: for comparison only, the same 50 rows as model instances rendered by a Django template (the
  other reading of the issue's floor, "about 16 ms p50"; several times heavier than ``baseline``);
- ``list``: GET /api/v1/turns?decision=... (page of 50, cursor pagination), as a runtime token;
- ``list-run``: GET /api/v1/runs/{run}/turns (first page of a run);
- ``detail``: GET /api/v1/runs/{run}/turns/{turn} (phases with committing records, intents).

Target: every API p95 within 2x the baseline's p95.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.bench_ingest import free_port, fresh_database, manage_command, percentile, start_gunicorn

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

REPO = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/loopx_bench_reads"
PHASES = ["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"]
DECISIONS = ["complete", "finalize", "resume", "blocked", "discarded"]
TURNS_PER_RUN = 1000
TARGET = 2.0
# Floors, measured in the same run: the target is judged on ``baseline``; ``page`` is printed for comparison.
FLOORS = ("baseline", "page")
BLOCK = 10


def load(url: str, turns: int) -> list[tuple[str, str]]:
    """COPY the data set in; returns (run, turn) pairs to request."""
    import psycopg

    runs = max(1, turns // TURNS_PER_RUN)
    now = datetime.now(UTC)
    record_id = turn_pk = phase_pk = intent_pk = 0
    sample: list[tuple[str, str]] = []
    with psycopg.connect(url) as conn:
        for r in range(runs):
            run_id = f"run-{r:05d}"
            inserted = conn.execute(
                "INSERT INTO journals_run (run_id, created_at, updated_at, record_count, last_seq, prefix_digest,"
                " live_branch, assessed_seq) VALUES (%s, %s, %s, %s, %s, %s, 0, %s) RETURNING id",
                [run_id, now, now, TURNS_PER_RUN * 10, TURNS_PER_RUN * 10, "0" * 64, TURNS_PER_RUN * 10],
            ).fetchone()
            assert inserted is not None  # RETURNING id: one row
            run_pk = inserted[0]
            conn.execute(
                "INSERT INTO journals_branch (run_id, number, last_lsn, committed_lsn, record_count, live)"
                " VALUES (%s, 0, %s, %s, %s, true)",
                [run_pk, TURNS_PER_RUN * 10 - 1, TURNS_PER_RUN * 10 - 1, TURNS_PER_RUN * 10],
            )
            records, turn_rows, phase_rows, intent_rows = [], [], [], []
            seq = 0
            for t in range(TURNS_PER_RUN):
                turn_pk += 1
                turn_id = f"turn-{t:05d}"
                decision = DECISIONS[(r * 7 + t) % len(DECISIONS)]
                done = 7 if decision in ("complete", "finalize") else (t % 7)
                kinds: list[tuple[str, str | None]] = [("turn_planned", None), ("intent_dispatched", None)]
                kinds += [("phase_committed", p) for p in PHASES] + [("turn_terminal", None)]
                committing: dict[str, int] = {}
                for kind, phase in kinds:
                    seq += 1
                    record_id += 1
                    obj = {"v": 2, "run": run_id, "branch": 0, "lsn": seq - 1, "kind": kind, "turn": turn_id}
                    if phase:
                        obj["phase"] = phase
                        obj["at"] = "2026-01-01T00:00:00Z"
                        committing[phase] = record_id
                    if kind == "intent_dispatched":
                        obj.update(intent="fetch", effect_class="safe", api_key="bench-secret")
                    line = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
                    records.append(
                        (
                            record_id,
                            run_pk,
                            seq,
                            0,
                            seq - 1,
                            kind,
                            2,
                            turn_id,
                            hashlib.sha256(line).hexdigest(),
                            line,
                            now,
                        )
                    )
                updated = now - timedelta(seconds=(runs - r) * TURNS_PER_RUN + (TURNS_PER_RUN - t))
                turn_rows.append(
                    (
                        turn_pk, run_pk, turn_id, "bench", 0, json.dumps(PHASES), seq - 9,
                        "completed" if decision == "complete" else "open", decision,
                        "phase_prefix_violation" if decision == "blocked" else None,
                        PHASES[done] if decision == "resume" and done < 7 else None,
                        json.dumps(PHASES[:done]), updated, updated, "", 0,
                    )
                )  # fmt: skip
                for position, phase in enumerate(PHASES):
                    phase_pk += 1
                    committed = position < done
                    phase_rows.append(
                        (
                            phase_pk, turn_pk, position, phase, committed,
                            committing[phase] if committed else None,
                            "2026-01-01T00:00:00Z" if committed else None,
                        )
                    )  # fmt: skip
                intent_pk += 1
                intent_rows.append((intent_pk, turn_pk, "fetch", "safe", None, "replay", 0, True, 1, None, 0))
                if t % 97 == 0:
                    sample.append((run_id, turn_id))
            _copy(conn, "journals_journalrecord",
                  "id, run_id, seq, branch, lsn, kind, v, turn, digest, line, received_at", records)  # fmt: skip
            _copy(conn, "journals_turn",
                  "id, run_id, turn_id, lineage, branch, plan, first_seq, status, decision, reason, resume_from,"
                  " completed_phases, created_at, updated_at, assessed_digest, fencing_counter", turn_rows)  # fmt: skip
            _copy(conn, "journals_phase", "id, turn_id, position, name, committed, record_id, committed_at", phase_rows)
            _copy(conn, "journals_intent",
                  "id, turn_id, intent_id, effect_class, idempotency_key, resolution, branch, live, dispatches,"
                  " outcome, position", intent_rows)  # fmt: skip
            conn.commit()
        for table in ("journals_journalrecord", "journals_turn", "journals_phase", "journals_intent"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")  # noqa: S608  a table name of the benchmark's own, never input
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return sample


def _copy(conn: psycopg.Connection[Any], table: str, columns: str, rows: Sequence[tuple[object, ...]]) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def measure(
    port: int, paths: list[str], headers: dict[str, str], rounds: int, *, start: int = 0, warm: bool = True
) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for path in paths[:5] if warm else []:  # warm the worker (imports, first queries)
        conn.request("GET", path, headers=headers)
        conn.getresponse().read()
    latencies = []
    for i in range(start, start + rounds):
        path = paths[i % len(paths)]
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        latencies.append(time.perf_counter() - t0)
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}: {body[:200]!r}")
        if b"bench-secret" in body:
            raise RuntimeError(f"{path} leaked a secret field")
    conn.close()
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1.0: 100,000 turns and 1,000,000 records")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_READS_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args(argv)
    turns = max(TURNS_PER_RUN, int(100_000 * args.scale))

    fresh_database(args.database_url)
    manage_command(args.database_url, "migrate", "--noinput")
    t0 = time.perf_counter()
    sample = load(args.database_url, turns)
    print(f"loaded {turns:,} turns / {turns * 10:,} records in {time.perf_counter() - t0:.1f} s")
    token = manage_command(args.database_url, "create_api_token", "bench-reader").strip().splitlines()[-1]

    rng = random.Random(7)
    runs = sorted({run for run, _ in sample})
    suites = {
        "baseline": ([f"/bench/baseline?decision={d}" for d in DECISIONS], {}),
        "page": ([f"/bench/baseline-page?decision={d}" for d in DECISIONS], {}),
        "list": ([f"/api/v1/turns?decision={d}" for d in DECISIONS], {"Authorization": f"Bearer {token}"}),
        "list-run": (
            [f"/api/v1/runs/{rng.choice(runs)}/turns" for _ in range(50)],
            {"Authorization": f"Bearer {token}"},
        ),
        "detail": (
            [f"/api/v1/runs/{run}/turns/{turn}" for run, turn in rng.sample(sample, min(100, len(sample)))],
            {"Authorization": f"Bearer {token}"},
        ),
    }
    port = free_port()
    server = start_gunicorn(args.database_url, args.workers, port, settings="benchmarks.bench_settings")
    results: dict[str, list[float]] = {name: [] for name in suites}
    try:
        # Every suite warmed, then the rounds taken in blocks of 10, suite after suite: a burst of load
        # from elsewhere on the machine then lands on every suite alike, not on the whole of one of them.
        for paths, headers in suites.values():
            measure(port, paths, headers, 0)
        for start in range(0, args.rounds, BLOCK):
            for name, (paths, headers) in suites.items():
                results[name] += measure(port, paths, headers, min(BLOCK, args.rounds - start), start=start, warm=False)
    finally:
        server.terminate()
        server.wait(timeout=30)

    base_p95 = percentile(results["baseline"], 0.95)
    page_p95 = percentile(results["page"], 0.95)
    worst = 0.0
    for name, latencies in results.items():
        p95 = percentile(latencies, 0.95)
        ratio = p95 / base_p95
        if name not in FLOORS:
            worst = max(worst, ratio)
        print(
            f"{name:9} p50 {statistics.median(latencies) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms"
            f"   p95/baseline {ratio:5.2f}   p95/page {p95 / page_p95:5.2f}"
        )
    verdict = "meets" if worst <= TARGET else "misses"
    print(f"worst p95 ratio {worst:.2f} ({verdict} the target of <= {TARGET:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
