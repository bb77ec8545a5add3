"""Turn list and turn detail through the API at scale, served by gunicorn, beside a plain Django view.

    python -m benchmarks.bench_reads                 # 100,000 turns / 1,000,000 records (a few minutes)
    python -m benchmarks.bench_reads --scale 0.1     # 10,000 turns / 100,000 records
    python -m benchmarks.bench_reads --scale 10      # 1,000,000 turns / 10,000,000 records, beside 1x (an hour)
    python -m benchmarks.bench_reads --scale 1 --base 0.1   # 10x the data, ten times smaller

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

Then an ingest probe (``--probe`` batches of 1,000 records, 20 by default): batches POSTed to a new run
through the API, each beside the COPY of the same rows into the loaded journals_journalrecord (its indexes as
deep as the size makes them), interleaved as bench_ingest does; printed as the records/s ratio. And the peak
RSS (VmHWM) of the gunicorn master and each worker, read before they stop, and of the benchmark process.

With ``--scale`` above ``--base`` (1.0), the base size is measured first, in its own fresh database, then
the scale; each suite's p95 at both sizes and their ratio are printed (target: within 1.3x), with ingest's
ratio to COPY at each.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.bench_ingest import (
    FloorCopy,
    bench_interleaved,
    free_port,
    fresh_database,
    journal_lines,
    manage_command,
    percentile,
    start_gunicorn,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

REPO = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/loopx_bench_reads"
PHASES = ["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"]
DECISIONS = ["complete", "finalize", "resume", "blocked", "discarded"]
TURNS_PER_RUN = 1000
TARGET = 2.0
TARGET_SCALE = 1.3  # a suite's p95 at 10x the data within 1.3x of its p95 at the base size
PROBE_BATCH = 1000
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
            run_id, run_pk = _insert_run(conn, r, now)
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


def _insert_run(conn: psycopg.Connection[Any], r: int, now: datetime) -> tuple[str, int]:
    """The run's row and its one branch; returns (run id, run pk)."""
    run_id = f"run-{r:05d}"
    # Every run holds blocked turns (DECISIONS): its stored status is needs_attention (run_status_compute).
    inserted = conn.execute(
        "INSERT INTO journals_run (run_id, created_at, updated_at, changed_at, record_count, last_seq,"
        " prefix_digest, live_branch, assessed_seq, status)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, 0, %s, 'needs_attention') RETURNING id",
        [run_id, now, now, now, TURNS_PER_RUN * 10, TURNS_PER_RUN * 10, "0" * 64, TURNS_PER_RUN * 10],
    ).fetchone()
    assert inserted is not None  # RETURNING id: one row
    run_pk: int = inserted[0]
    conn.execute(
        "INSERT INTO journals_branch (run_id, number, last_lsn, committed_lsn, record_count, live)"
        " VALUES (%s, 0, %s, %s, %s, true)",
        [run_pk, TURNS_PER_RUN * 10 - 1, TURNS_PER_RUN * 10 - 1, TURNS_PER_RUN * 10],
    )
    return run_id, run_pk


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


@dataclass
class Figures:
    """What one size measured: each suite's latencies, ingest beside COPY, the processes' peak memory."""

    turns: int
    load_seconds: float
    results: dict[str, list[float]]
    api_seconds: float
    copy_seconds: float
    server_rss_mb: dict[str, float] = field(default_factory=dict)


def suites(sample: list[tuple[str, str]], token: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    rng = random.Random(7)
    runs = sorted({run for run, _ in sample})
    bearer = {"Authorization": f"Bearer {token}"}
    return {
        "baseline": ([f"/bench/baseline?decision={d}" for d in DECISIONS], {}),
        "page": ([f"/bench/baseline-page?decision={d}" for d in DECISIONS], {}),
        "list": ([f"/api/v1/turns?decision={d}" for d in DECISIONS], bearer),
        "list-run": ([f"/api/v1/runs/{rng.choice(runs)}/turns" for _ in range(50)], bearer),
        "detail": (
            [f"/api/v1/runs/{run}/turns/{turn}" for run, turn in rng.sample(sample, min(100, len(sample)))],
            bearer,
        ),
    }


class TableFloor(FloorCopy):
    """The ingest probe's floor: the same rows COPYed into journals_journalrecord itself (the loaded table, its
    indexes as deep as the size makes them), for a run of their own, one COPY and one commit per batch."""

    TABLE = "journals_journalrecord"

    def __init__(self, url: str, lines: list[bytes]) -> None:
        import psycopg

        now = datetime.now(UTC)
        self.conn = psycopg.connect(url)
        # A run with no record yet and never assessed: its status is running (run_status_compute).
        made = self.conn.execute(
            "INSERT INTO journals_run (run_id, created_at, updated_at, changed_at, record_count, last_seq,"
            " prefix_digest, live_branch, status) VALUES ('copy-floor', %s, %s, %s, 0, 0, %s, 0, 'running')"
            " RETURNING id",
            [now, now, now, "0" * 64],
        ).fetchone()
        assert made is not None  # RETURNING id: one row
        self.conn.commit()
        self.rows = [
            (made[0], seq, 0, seq - 1, "phase_committed", 2, "turn", hashlib.sha256(line).hexdigest(), line, now)
            for seq, line in enumerate(lines, start=1)
        ]

    def close(self) -> None:
        self.conn.close()  # journal records are append-only: the scratch database goes with them


def ingest_probe(url: str, port: int, token: str, batches: int) -> tuple[float, float]:
    """Batches of 1,000 records posted to a new run through the API, each beside the COPY of the same rows
    into the loaded table (bench_ingest's interleaving): the seconds of each side."""
    lines = journal_lines("ingest-probe", batches * PROBE_BATCH)
    bodies = [b"".join(line + b"\n" for line in lines[i : i + PROBE_BATCH]) for i in range(0, len(lines), PROBE_BATCH)]
    floor = TableFloor(url, lines)
    try:
        api, copy = bench_interleaved(port, token, "ingest-probe", bodies, floor, PROBE_BATCH, BLOCK)
    finally:
        floor.close()
    return sum(api), sum(copy)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for child in task.read_text().split():
                found += process_tree(int(child))
    return found


def peak_rss_of(pid: int) -> float:
    """A live process's peak resident set in MB (VmHWM): getrusage cannot be asked about another process."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def table_sizes(url: str) -> str:
    """The records table's size on disk and its indexes', in MB (what partitioning would split)."""
    import psycopg

    sql = (
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = 'journals_journalrecord'"
        " OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'journals_journalrecord'::regclass)"
        " ORDER BY 1"
    )
    with psycopg.connect(url) as conn:
        rows = conn.execute(sql).fetchall()
    return "journals_journalrecord on disk: " + ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in rows)


def measure_size(url: str, scale: float, rounds: int, workers: int, probe: int) -> Figures:
    """Load the data set of ``scale`` into a fresh database, serve it with gunicorn and time every suite."""
    turns = max(TURNS_PER_RUN, int(100_000 * scale))
    fresh_database(url)
    manage_command(url, "migrate", "--noinput")
    t0 = time.perf_counter()
    sample = load(url, turns)
    loaded = time.perf_counter() - t0
    print(f"loaded {turns:,} turns / {turns * 10:,} records in {loaded:.1f} s; {table_sizes(url)}", flush=True)
    token = manage_command(url, "create_api_token", "bench-reader").strip().splitlines()[-1]
    named = suites(sample, token)
    port = free_port()
    server = start_gunicorn(url, workers, port, settings="benchmarks.bench_settings")
    results: dict[str, list[float]] = {name: [] for name in named}
    try:
        # Every suite warmed, then the rounds taken in blocks of 10, suite after suite: a burst of load
        # from elsewhere on the machine then lands on every suite alike, not on the whole of one of them.
        for paths, headers in named.values():
            measure(port, paths, headers, 0)
        for start in range(0, rounds, BLOCK):
            for name, (paths, headers) in named.items():
                results[name] += measure(port, paths, headers, min(BLOCK, rounds - start), start=start, warm=False)
        api_seconds, copy_seconds = ingest_probe(url, port, token, probe) if probe else (0.0, 0.0)
        tree = process_tree(server.pid)
        rss = {("gunicorn master" if pid == server.pid else f"gunicorn worker {pid}"): peak_rss_of(pid) for pid in tree}
    finally:
        server.terminate()
        server.wait(timeout=30)
    return Figures(turns, loaded, results, api_seconds, copy_seconds, rss)


def report(figures: Figures) -> float:
    """Print one size's figures; returns its worst p95 ratio to the baseline."""
    results = figures.results
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
    if figures.api_seconds:
        print(
            f"ingest probe: API / COPY into the loaded table = {figures.copy_seconds / figures.api_seconds:.2f} "
            f"(records/s ratio; API {figures.api_seconds:.2f} s, COPY {figures.copy_seconds:.2f} s)"
        )
    rss = ", ".join(f"{who} {mb:.0f} MB" for who, mb in figures.server_rss_mb.items())
    print(f"peak RSS: {rss}")
    return worst


def compare(base: Figures, scaled: Figures) -> bool:
    """Each suite's p95 at the larger size beside the base size's; True when every one is within the target."""
    factor = scaled.turns / base.turns
    print(f"{'suite':9} {'p95 at ' + f'{base.turns:,}':>16} {'p95 at ' + f'{scaled.turns:,}':>18} {'ratio':>7}")
    ok = True
    for name in base.results:
        before, after = percentile(base.results[name], 0.95), percentile(scaled.results[name], 0.95)
        ok = ok and (name in FLOORS or after / before <= TARGET_SCALE)
        print(f"{name:9} {before * 1000:13.1f} ms {after * 1000:15.1f} ms {after / before:7.2f}")
    if base.api_seconds and scaled.api_seconds:
        ratios = [f.copy_seconds / f.api_seconds for f in (base, scaled)]
        at = f"{ratios[0]:.2f} at {base.turns:,} turns, {ratios[1]:.2f} at {scaled.turns:,}"
        print(f"ingest / COPY records/s ratio: {at}")
    verdict = "meets" if ok else "misses"
    print(f"{factor:g}x the data: every API p95 within {TARGET_SCALE:g}x of the base size's? {verdict}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1.0: 100,000 turns and 1,000,000 records")
    parser.add_argument(
        "--base", type=float, default=1.0, help="with --scale above it, this size is measured first and compared"
    )
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--probe", type=int, default=20, help="batches of 1,000 records in the ingest probe (0: none)")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_READS_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args(argv)

    sizes = [args.base, args.scale] if args.scale > args.base > 0 else [args.scale]
    measured = []
    for scale in sizes:
        print(f"-- scale {scale:g}", flush=True)
        measured.append(measure_size(args.database_url, scale, args.rounds, args.workers, args.probe))
        report(measured[-1])
    print(f"peak RSS of the benchmark process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if len(measured) == 2:
        compare(*measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
