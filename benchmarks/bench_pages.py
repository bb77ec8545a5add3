"""Console page latency at scale, beside a plain Django view measured in the same run.

    python -m benchmarks.bench_pages              # 100,000 turns / 1,000,000 records (a few minutes)
    python -m benchmarks.bench_pages --small      # 2,000 turns / 20,000 records (seconds)
    DATABASE_URL=postgres://... python -m benchmarks.bench_pages --scale 10   # 10x beside 1x (an hour or more)
    DATABASE_URL=postgres://... python -m benchmarks.bench_pages --scale 1 --base 0.1   # 10x, ten times smaller

Builds its own database (SQLite in a temporary directory; with a PostgreSQL DATABASE_URL, a scratch database
beside the one it names, ``<name>_bench_pages``, dropped at the end: the named one is never written to),
fills it with runs, turns and journal records in bulk plus a few real runs ingested and assessed through
the services (for the turn page), analyzes it on PostgreSQL as autovacuum would after such a load, then
times, through Django's test client with a signed-in operator:
- the turns list (default order), the turns list filtered to blocked turns, page 20, filtered to one run,
  searched for a turn id only one turn has, the turn page, the overview (its turn counts as an operator sees
  them: cached, recounted when a turn changes or a minute has passed, as the page says), the held queue and
  the runs list;
- the run page of the real run (about 20,000 records at full size) and its event history, first page and
  a page three quarters down;
- a plain view that renders 50 rows of one indexed table (Turn by its (-updated_at, -id) index) with no
  auth, no filters and no counts: the floor any page pays.
It prints p50/p95 per page and each page's ratio to the plain view at p50 and at p95; every page counts in
the verdict (target: within 3x at both). One more line, informative, times the overview recounting its
counts on every request (the cost of the first view after a change).

``--scale S`` (PostgreSQL only): S x 100,000 turns / S x 1,000,000 records, and first the ``--base`` size
(1.0), each in a fresh database beside DATABASE_URL's (``<name>_bench_pages``, dropped after; ``--keep``
keeps the last size's, to EXPLAIN the pages' queries on it), filled with
COPY (bench_reads' data set: runs of 1,000 turns of 10 records, with phases and intents, and each turn's
effective state) and measured by a child process (Django set up there on it). It prints each size's table,
then each page's p95 at both sizes and their ratio (target: within 1.3x), the same for each page's p95 over
the floor's (what the machine's load cancels out), and the peak RSS of the measuring child (the server:
Django's test client runs the views in it) and of the benchmark process.

Each round times every page once, in turn (the floor first): a burst of load elsewhere on a shared machine
lands on every page and on the floor alike.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_engine import peak_rss_mb
from benchmarks.bench_growth import analyze_as_autovacuum
from benchmarks.bench_ingest import drop_database, manage_command, own_database, scratch_database
from benchmarks.bench_reads import load
from engine.canonical import canonical_bytes
from engine.writer import JournalWriter

TARGET_RATIO = 3.0
TARGET_SCALE = 1.3  # a page's p95 at 10x the data within 1.3x of its p95 at the base size
PLAIN = "plain view, 50 rows of one indexed table"
COLD = "overview, counts recounted (informative)"


def _setup_django(workdir: str) -> None:
    if not os.environ.get("DATABASE_URL"):
        os.environ["LOOPX_VAR_DIR"] = workdir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")
    os.environ.setdefault("DEBUG", "0")  # no query log growing with every request
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def _plain_view(request: Any) -> Any:
    from django.http import HttpResponse
    from django.template import engines

    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.models import Turn

    rows = Turn.objects.order_by("-updated_at", "-id")[:50]
    template = engines["django"].from_string(
        "<table>{% for t in rows %}<tr><td>{{ t.turn_id }}</td><td>{{ t.decision }}</td>"
        "<td>{{ t.reason }}</td><td>{{ t.updated_at }}</td></tr>{% endfor %}</table>"
    )
    return HttpResponse(template.render({"rows": rows}))


def _urls() -> list[Any]:
    from django.urls import include, path

    return [path("bench/plain/", _plain_view), path("", include("loopx_site.urls"))]


urlpatterns: list[Any] = []  # filled in main(): this module is the ROOT_URLCONF while measuring


def _fill(turns: int, records: int, runs: int, log: Callable[[str], None]) -> None:
    """Bulk rows straight into the tables (the services are measured elsewhere; here the pages are)."""
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.models import JournalRecord, Run, Turn

    now = timezone.now()
    TurnEffective = _effective_model()
    per_run_turns = max(1, turns // runs)
    per_run_records = max(1, records // runs)
    decisions = [
        ("blocked", "phase_prefix_violation"),
        ("resume", None),
        ("complete", None),
        ("blocked", "effect_indeterminate"),
        ("finalize", None),
        ("resume", None),
        ("complete", None),
        ("discarded", None),
    ]
    started = time.perf_counter()
    for r in range(runs):
        with transaction.atomic():
            run = Run.objects.create(
                run_id=f"bench-{r:05d}",
                record_count=per_run_records,
                last_seq=per_run_records,
                assessed_seq=per_run_records,
            )
            Turn.objects.bulk_create(
                [
                    Turn(
                        run=run,
                        turn_id=f"turn-{r}-{i}",
                        lineage=f"job-{r}-{i}",
                        plan=["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"],
                        first_seq=i + 1,
                        decision=decisions[(r + i) % len(decisions)][0],
                        reason=decisions[(r + i) % len(decisions)][1],
                        resume_from="execute" if decisions[(r + i) % len(decisions)][0] == "resume" else None,
                        updated_at=now - timedelta(seconds=r * per_run_turns + i),
                        created_at=now - timedelta(days=1, seconds=r * per_run_turns + i),
                    )
                    for i in range(per_run_turns)
                ],
                batch_size=2000,
            )
            # Each turn's effective state, as recovery.state.turn_states_refresh stores it for these decisions
            # (no operator decision): the lists, counts and queue read it.
            TurnEffective.objects.bulk_create(
                [
                    TurnEffective(turn_id=pk, run=run, since=now, updated_at=now, **_effective(decision, reason))
                    for pk, decision, reason in Turn.objects.filter(run=run).values_list("pk", "decision", "reason")
                ],
                batch_size=2000,
            )
            rows = []
            for seq in range(1, per_run_records + 1):
                obj: dict[str, Any] = {
                    "v": 2,
                    "run": run.run_id,
                    "branch": 0,
                    "lsn": seq - 1,
                    "kind": "phase_committed",
                    "at": "2026-01-01T00:00:00Z",
                    "turn": f"turn-{r}-{seq % per_run_turns}",
                    "phase": "plan",
                }
                line = canonical_bytes(obj)
                rows.append(
                    JournalRecord(
                        run=run,
                        seq=seq,
                        branch=0,
                        lsn=seq - 1,
                        kind="phase_committed",
                        v=2,
                        turn=obj["turn"],
                        digest=hashlib.sha256(line).hexdigest(),
                        line=line,
                    )
                )
            JournalRecord.objects.bulk_create(rows, batch_size=2000)
        if r % max(1, runs // 10) == 0:
            log(f"  filled {r + 1}/{runs} runs ({time.perf_counter() - started:.0f}s)")


def _real_turn(records: int) -> int:
    """A real run (writer -> ingest -> assessment) with a blocked turn: the turn page's subject, and with its
    records the run page's and the event history's."""
    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.models import Turn
    from journals.services import records_ingest
    from recovery.services import assessment_refresh

    w = JournalWriter("bench-real")
    for i in range(max(1, records // 10)):
        w.complete_turn(f"done-{i}", lineage=f"job-{i}")
    w.plan("blocked-turn", lineage="job-x")
    w.commit("blocked-turn", "plan")
    w.commit("blocked-turn", "envelope")
    w.dispatch("blocked-turn", "charge", "unsafe", api_key="bench-secret")
    body = w.data()
    # Ingest in batches the API would accept.
    lines = body.split(b"\n")[:-1]
    run = None
    for start in range(0, len(lines), 5000):
        chunk = b"\n".join(lines[start : start + 5000]) + b"\n"
        run = records_ingest(run_id="bench-real", body=chunk, content_type="application/x-ndjson", token=None).run
    assert run is not None
    assessment_refresh(run=run)
    return Turn.objects.get(run=run, turn_id="blocked-turn").pk


def _time(client: Any, url: str, n: int, before: Callable[[], None] | None = None) -> list[float]:
    for _ in range(max(3, n // 10)):  # warm caches and connections
        assert client.get(url).status_code == 200, url
    samples = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, url
    return samples


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _measure(turns: int, records: int, requests: int, *, prefilled: bool) -> dict[str, tuple[float, float]]:
    """Fill (unless the database was filled already), then time every page: name -> (p50, p95) in ms."""
    from django.contrib.auth.models import Group, User
    from django.core.cache import cache
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import override_settings

    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.models import Turn
    from teams.services import team_ensure, team_members_add

    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    if not prefilled:
        _fill(turns, records, max(1, turns // 100), lambda m: print(m, flush=True))
    turn_pk = _real_turn(2_000 if turns <= 2_000 else 20_000)
    if connection.vendor == "postgresql":
        # This machine's server runs with autovacuum off; a production server's analyzes after a load this
        # size. Unanalyzed, the blocked turns, oldest first, took 230 ms (43 times the floor); 8 ms after.
        analyze_as_autovacuum()
    print(f"  data ready in {time.perf_counter() - t0:.0f}s", flush=True)

    user = User.objects.create_user("bench-operator", password="bench-password-123")  # noqa: S106  a throwaway account in the benchmark's own database
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    team_members_add(team=team_ensure(name="all-runs", prefixes=[""]), users=[user])
    client = Client()
    client.force_login(user)
    plain = Client()

    urlpatterns[:] = _urls()
    real = Turn.objects.select_related("run").get(pk=turn_pk).run
    deep = max(1, (real.record_count // 50) * 3 // 4)  # three quarters down the history
    pages = {
        PLAIN: (plain, "/bench/plain/"),
        "turns list": (client, "/turns/"),
        "turns list, blocked, oldest first": (client, "/turns/?decision=blocked&sort=updated"),
        "turns list, page 20": (client, "/turns/?page=20"),
        "turns list, one run": (client, f"/turns/?run={real.run_id}"),
        "turns list, search (one turn matches)": (client, "/turns/?q=blocked-turn"),
        "turn page": (client, f"/turns/{turn_pk}/"),
        "overview": (client, "/"),
        "held queue": (client, "/queue/blocked/"),
        "runs list": (client, "/runs/"),
        "run page (a run of the real turn)": (client, f"/runs/{real.pk}/"),
        "event history, first page": (client, f"/runs/{real.pk}/records/"),
        f"event history, page {deep}": (client, f"/runs/{real.pk}/records/?page={deep}"),
    }
    results: dict[str, tuple[float, float]] = {}
    with override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"]):
        for name, samples in _rounds(pages, requests).items():
            results[name] = (statistics.median(samples), _pct(samples, 0.95))
        samples = _time(client, "/", max(10, requests // 5), before=cache.clear)
        results[COLD] = (statistics.median(samples), _pct(samples, 0.95))
    return results


def _rounds(pages: dict[str, tuple[Any, str]], requests: int) -> dict[str, list[float]]:
    """Each page warmed, then ``requests`` rounds that time every page once, in turn: a burst of load
    elsewhere on a shared machine lands on every page and on the floor alike."""
    for who, url in pages.values():
        for _ in range(max(3, requests // 10)):
            assert who.get(url).status_code == 200, url
    samples: dict[str, list[float]] = {name: [] for name in pages}
    for _ in range(requests):
        for name, (who, url) in pages.items():
            t0 = time.perf_counter()
            response = who.get(url)
            samples[name].append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200, url
    return samples


def _print(results: dict[str, tuple[float, float]]) -> float:
    """The table of pages; returns the worst page's ratio to the plain view."""
    base_p50, base_p95 = results[PLAIN]
    print(f"{'page':<44} {'p50 ms':>9} {'p95 ms':>9} {'x p50':>7} {'x p95':>7}")
    worst = 0.0
    for name, (p50, p95) in results.items():
        ratio50 = p50 / base_p50 if base_p50 else float("inf")
        ratio95 = p95 / base_p95 if base_p95 else float("inf")
        if name not in (PLAIN, COLD):
            worst = max(worst, ratio50, ratio95)
        print(f"{name:<44} {p50:>9.2f} {p95:>9.2f} {ratio50:>7.2f} {ratio95:>7.2f}")
    verdict = "within" if worst <= TARGET_RATIO else "OVER"
    print(f"worst page ratio (p50 or p95) {worst:.2f}x: {verdict} the {TARGET_RATIO:.0f}x target")
    return worst


# Each turn's effective state from its decision and reason, through a VALUES table of the _STATES below.
_EFFECTIVE_SQL = (
    "INSERT INTO journals_turneffective (turn_id, run_id, state, gate, decision, reason, resume_from,"
    " actor_name, note, needs_evidence, since, updated_at)"
    " SELECT t.id, t.run_id, m.state, m.gate, t.decision, t.reason, t.resume_from, '', '', '[]',"
    " t.updated_at, t.updated_at FROM journals_turn t"
    " JOIN (VALUES {values}) AS m (decision, reason, state, gate)"
    " ON m.decision = t.decision AND m.reason IS NOT DISTINCT FROM t.reason"
)


def _fill_copy(url: str, turns: int) -> None:
    """PostgreSQL, at any size: bench_reads' COPY of runs, turns, phases, intents and records (10 records a
    turn), then each turn's effective state from its decision in one statement, as the state writer stores
    it with no operator decision on top (the _STATES table below)."""
    import psycopg

    load(url, turns)
    mapping = [(d, r, state, gate) for (d, r), (state, gate) in _STATES.items()]
    values = ", ".join(["(%s, %s, %s, %s)"] * len(mapping))
    with psycopg.connect(url) as conn:
        conn.execute(_EFFECTIVE_SQL.replace("{values}", values), [v for row in mapping for v in row])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE journals_turneffective")


def _size_in_child(url: str, scale: float, requests: int, *, keep: bool = False) -> dict[str, Any]:
    """One size on PostgreSQL: a fresh database beside ``url`` filled with COPY, measured by a child process
    (Django set up there on it); the child's figures and peak memory. ``keep`` leaves the database in place
    afterwards (for EXPLAIN ANALYZE on the same rows)."""
    turns = max(1_000, int(100_000 * scale))
    scratch = scratch_database(url, "bench_pages")
    manage_command(scratch, "migrate", "--noinput")
    t0 = time.perf_counter()
    _fill_copy(scratch, turns)
    loaded = f"{turns:,} turns / {turns * 10:,} records loaded in {time.perf_counter() - t0:.0f}s"
    print(f"-- scale {scale:g}: {loaded}", flush=True)
    # The real run's ingest publishes assess_run: to kombu's filesystem broker in the child's folder, never
    # to a shared Redis.
    env = {**os.environ, "DATABASE_URL": scratch, "CELERY_BROKER_URL": "filesystem://", "REDIS_URL": "",
           "LOG_LEVEL": "ERROR"}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="loopx-bench-pages-") as folder:
        env["LOOPX_VAR_DIR"] = folder
        try:
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_pages", "--child", "--turns", str(turns), "--records",
                 str(turns * 10), "--requests", str(requests)],
                cwd=Path(__file__).resolve().parents[1], env=env, stdout=subprocess.PIPE, text=True, check=True,
            )  # fmt: skip
        finally:
            if keep:
                print(f"-- scale {scale:g}: kept database {scratch.rpartition('/')[2]}", flush=True)
            else:
                drop_database(scratch)
    lines = child.stdout.strip().splitlines()
    print("\n".join(lines[:-1]), flush=True)
    out: dict[str, Any] = json.loads(lines[-1])
    out["turns"] = turns
    return out


def _compare(base: dict[str, Any], scaled: dict[str, Any]) -> None:
    """Each page's p95 at both sizes and their ratio; then each page's p95 over the floor's (the plain view's,
    timed in the same rounds) at both sizes and that ratio's change, which the machine's load cancels out."""
    at_base, at_scaled = f"p95 at {base['turns']:,}", f"p95 at {scaled['turns']:,}"
    print(f"{'page':<44} {at_base:>16} {at_scaled:>18} {'ratio':>7} {'x floor':>8} {'x floor':>8} {'change':>7}")
    floor = (base["results"][PLAIN][1], scaled["results"][PLAIN][1])
    raw_ok = floored_ok = True
    for name, (_, before) in base["results"].items():
        after = scaled["results"].get(name, scaled["results"].get(_deep_name(name, scaled), (0, 0)))[1]
        change = (after / floor[1]) / (before / floor[0])
        if name not in (PLAIN, COLD):  # the floor is printed, not judged; the recount is informative
            raw_ok, floored_ok = raw_ok and after / before <= TARGET_SCALE, floored_ok and change <= TARGET_SCALE
        print(f"{name:<44} {before:13.2f} ms {after:15.2f} ms {after / before:7.2f} {before / floor[0]:8.2f}"
              f" {after / floor[1]:8.2f} {change:7.2f}")  # fmt: skip
    print(f"peak RSS of the measuring process: {base['rss_mb']:.0f} MB at {base['turns']:,} turns, "
          f"{scaled['rss_mb']:.0f} MB at {scaled['turns']:,}")  # fmt: skip
    factor = scaled["turns"] / base["turns"]
    for judged, ok in (("p95", raw_ok), ("p95 over the floor's", floored_ok)):
        verdict = "meets" if ok else "misses"
        print(f"{factor:g}x the data: every page's {judged} within {TARGET_SCALE:g}x of the base size's? {verdict}")


def _deep_name(name: str, scaled: dict[str, Any]) -> str:
    """The deep event-history page is named by its page number, which the real run's length sets."""
    if not name.startswith("event history, page "):
        return name
    return next((n for n in scaled["results"] if n.startswith("event history, page ")), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_pages", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--small", action="store_true", help="2,000 turns / 20,000 records")
    parser.add_argument("--requests", type=int, default=100, help="timed requests per page")
    parser.add_argument("--scale", type=float, help="PostgreSQL: this many times 100,000 turns, beside --base")
    parser.add_argument("--base", type=float, default=1.0, help="the size --scale is compared with (1.0)")
    parser.add_argument("--keep", action="store_true", help="--scale: keep the last size's database, undropped")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.small:
        args.turns, args.records = 2_000, 20_000
    if args.scale is not None:
        url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL", "")
        if not url.startswith(("postgres://", "postgresql://")):
            print("skipped: --scale fills with COPY: set DATABASE_URL (or BENCH_DATABASE_URL) to PostgreSQL")
            return 0
        sizes = [args.base, args.scale] if args.scale > args.base > 0 else [args.scale]
        measured = [_size_in_child(url, size, args.requests, keep=args.keep and size == sizes[-1]) for size in sizes]
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of the benchmark process: {own:.0f} MB")
        if len(measured) == 2:
            _compare(*measured)
        return 0
    # The --scale child measures the database its parent filled; the default size fills one of its own.
    with (
        contextlib.nullcontext() if args.child else own_database("bench_pages"),
        tempfile.TemporaryDirectory(prefix="loopx-bench-pages-") as workdir,
    ):
        _setup_django(workdir)
        runs = max(1, args.turns // 100)
        if not args.child:
            print(f"bench_pages: {args.turns:,} turns / {args.records:,} records in {runs:,} runs", flush=True)
        results = _measure(args.turns, args.records, args.requests, prefilled=args.child)
        _print(results)
        if args.child:
            print(json.dumps({"results": results, "rss_mb": peak_rss_mb()}))
    return 0


def _effective_model() -> Any:
    # Django is set up at run time, on the benchmark's own database: models load once the app registry is ready.
    from journals.models import TurnEffective

    return TurnEffective


# The effective state of an engine decision with no operator decision on top (recovery/state.py's rule).
_STATES: dict[tuple[str | None, str | None], tuple[str, str]] = {
    ("blocked", "phase_prefix_violation"): ("held_review", "hold"),
    ("blocked", "effect_indeterminate"): ("held_effect", "hold"),
    ("resume", None): ("resuming", "proceed"),
    ("finalize", None): ("finalizing", "proceed"),
    ("complete", None): ("complete", "done"),
    ("discarded", None): ("discarded", "done"),
}


def _effective(decision: str | None, reason: str | None) -> dict[str, Any]:
    state, gate = _STATES[(decision, reason)]
    return {
        "state": state,
        "gate": gate,
        "decision": decision,
        "reason": reason,
        "resume_from": "execute" if decision == "resume" else None,
    }


if __name__ == "__main__":
    sys.exit(main())
