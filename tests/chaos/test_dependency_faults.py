"""Assessments survive their own faults, against the production stack (certification/server.py's
LiveService: gunicorn, one Celery worker, beat, a redis-server and a PostgreSQL cluster of its own).

A few writers post batches over HTTP (every fifth one delivered twice) while, one after another:

1. the worker's process group is SIGKILLed in the middle of an assessment (an armed failpoint), with the
   broker's visibility timeout at its production value, so only the run's lease can bring it back soon;
2. Redis is SIGKILLed and started again empty (no persistence), losing every queued message;
3. PostgreSQL crashes (an immediate shutdown of the service's private cluster) and comes back. Without
   a usable ``initdb`` here, the service's connections are cut with ``pg_terminate_backend`` instead.

After each fault every run is assessed through its last record within BOUND seconds. Every request
answers 200 or, during the database outage, 503 with Retry-After; never a 500. At the end every
acknowledged record is stored exactly once with the same bytes, and no batch was half-stored (a batch
sent again after a 503 stored all of its records, none of them found already there).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from certification.server import LiveService, postgres_bin
from ops.demo import batches, workload_lines

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

WRITERS = 3
RUNS_PER_WRITER = 2
TURNS = 18
BATCH = 6
PHASES = ("worker", "redis", "database")
BOUND = 30.0  # seconds from a fault's end to every run assessed (the lease, then one sweep, then the task)
# Production's settings but the periods that a three-minute test cannot wait for: a running assessment's
# lease and a published message's wait are seconds, not half a minute, and the sweep runs every second.
# The broker's visibility timeout is production's (its default follows the time limits): a dead worker's
# message stays unacknowledged in Redis for an hour, and nothing here waits for it.
SETTINGS: dict[str, str | None] = {
    "CELERY_VISIBILITY_TIMEOUT": None,
    "CELERY_UNACKED_RESTORE_INTERVAL": None,
    "CELERY_UNACKED_RESTORE_THROTTLE": None,
    "LOOPX_ASSESS_LEASE_SECONDS": "5",
    "LOOPX_SWEEP_REPUBLISH_SECONDS": "5",
    "LOOPX_SWEEP_GRACE_SECONDS": "2",
    "LOOPX_UNAVAILABLE_RETRY_AFTER": "1",
}


@dataclass
class Ack:
    run: str
    index: int
    size: int
    answer: dict[str, Any]


@dataclass
class Traffic:
    """Every answer the writers got, by phase, and what was acknowledged."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    acks: list[Ack] = field(default_factory=list)
    bad_503: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _post(service: LiveService, run: str, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(
        f"{service.base_url}/api/v1/runs/{run}/records", data=body, method="POST",
        headers={"Authorization": f"Bearer {service.token}", "Content-Type": "application/x-ndjson"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = {"raw": raw[:200].decode(errors="replace")}
        return error.code, answer, dict(error.headers)


def _deliver(service: LiveService, traffic: Traffic, phase: str, run: str, index: int, body: bytes, size: int) -> None:
    """Send one batch until it is acknowledged, as a runtime's client would: again after a 503's Retry-After."""
    while True:
        try:
            status, answer, headers = _post(service, run, body)
        except OSError:
            with traffic.lock:
                traffic.statuses[(phase, 0)] += 1  # no answer at all: sent again
            time.sleep(0.5)
            continue
        with traffic.lock:
            traffic.statuses[(phase, status)] += 1
        if status == 200:
            with traffic.lock:
                traffic.acks.append(Ack(run, index, size, answer))
            return
        if status == 503:
            shaped = set(answer) == {"error", "detail", "line"} and answer["error"] == "unavailable"
            if not shaped or not headers.get("Retry-After", "").isdigit():
                with traffic.lock:
                    traffic.bad_503.append(f"{answer} {headers.get('Retry-After')!r}")
            time.sleep(min(2.0, float(headers.get("Retry-After", "1") or 1)))
            continue
        time.sleep(0.5)  # a 500 is recorded (and fails the test at the end); the batch is sent again


def _probe(service: LiveService, traffic: Traffic, phase: str) -> None:
    """One read of a run's page (it needs the database), its answer counted as the writers' are."""
    request = urllib.request.Request(
        f"{service.base_url}/api/v1/runs", headers={"Authorization": f"Bearer {service.token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw, headers = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, headers = error.code, error.read(), dict(error.headers)
    except OSError:
        status, raw, headers = 0, b"", {}
    with traffic.lock:
        traffic.statuses[(phase, status)] += 1
        if status == 503:
            try:
                answer = json.loads(raw)
            except ValueError:
                answer = {}
            shaped = set(answer) == {"error", "detail", "line"} and answer.get("error") == "unavailable"
            if not shaped or not headers.get("Retry-After", "").isdigit():
                traffic.bad_503.append(f"{answer} {headers.get('Retry-After')!r}")


Work = dict[str, list[tuple[int, bytes, int]]]  # run -> (batch index, body, records) to send, in order


def _writers(service: LiveService, traffic: Traffic, phase: str, work: Work) -> list[threading.Thread]:
    runs = sorted(work)

    def write(mine: list[str]) -> None:
        for position in range(max(len(work[run]) for run in mine)):
            for run in mine:
                if position < len(work[run]):
                    index, body, size = work[run][position]
                    _deliver(service, traffic, phase, run, index, body, size)
                    if index % 5 == 0:  # a redelivery, as a runtime that lost the answer would send
                        _deliver(service, traffic, phase, run, index, body, size)

    threads = [
        threading.Thread(target=write, args=(runs[w::WRITERS],), name=f"writer-{w}", daemon=True)
        for w in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    return threads


def _join(threads: list[threading.Thread], timeout: float = 90) -> float:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a writer is still sending after 90 s"
    return time.monotonic()


def _query(service: LiveService, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(service.database_url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchall()


def _behind(service: LiveService, runs: list[str]) -> list[tuple[str, int, int | None]]:
    rows = _query(service, "SELECT run_id, last_seq, assessed_seq FROM journals_run WHERE run_id = ANY(%s)", (runs,))
    assert len(rows) == len(runs)
    return [(run, last, assessed) for run, last, assessed in rows if assessed is None or assessed < last]


def _assessed_within(service: LiveService, runs: list[str], since: float, what: str) -> float:
    while True:
        behind = _behind(service, runs)
        waited = time.monotonic() - since
        if not behind:
            return waited
        if waited > BOUND:
            logs = "\n".join(
                f"--- {name}\n" + (service.root / f"{name}.log").read_text(errors="replace")[-2500:]
                for name in ("worker", "beat")
            )
            raise AssertionError(f"after {what}, runs still unassessed {waited:.0f}s later: {behind}\n{logs}")
        time.sleep(0.5)


def test_assessments_survive_a_killed_worker_an_empty_redis_and_a_database_crash(tmp_path: Path) -> None:
    started = time.monotonic()
    private = postgres_bin() is not None
    runs = [f"fault-{w}-{r}" for w in range(WRITERS) for r in range(RUNS_PER_WRITER)]
    lines = {run: workload_lines(run, turns=TURNS, seed=n) for n, run in enumerate(runs)}
    bodies = {run: batches(lines[run], BATCH) for run in runs}
    sizes = {run: [len(lines[run][i : i + BATCH]) for i in range(0, len(lines[run]), BATCH)] for run in runs}
    assert all(len(bodies[run]) >= 2 * len(PHASES) for run in runs)
    # Each phase sends its share of every run's batches, in order.
    def share(run: str, p: int) -> list[tuple[int, bytes, int]]:
        count = len(bodies[run])
        return [(i, bodies[run][i], sizes[run][i]) for i in range(count) if i * len(PHASES) // count == p]

    work: dict[str, Work] = {phase: {run: share(run, p) for run in runs} for p, phase in enumerate(PHASES)}
    traffic = Traffic()
    waited: dict[str, float] = {}

    with LiveService(tmp_path / "service", private_postgres=private, settings=SETTINGS) as service:
        # 1. The worker's whole process group dies at the start of an assessment of one run, the last one
        # that run asks for in this phase: only its lease can bring it back before the visibility timeout.
        victim = runs[0]
        held = work["worker"][victim].pop()
        _join(_writers(service, traffic, "worker", work["worker"]))
        # The worker catches up first: a task of the victim still queued from those batches would otherwise
        # be the one killed, with the held batch's flag raised after it took its lease (then the sweep
        # publishes that flag again instead of finding the lease run out).
        _assessed_within(service, runs, time.monotonic(), "the first batches")
        service.arm("worker", "assess_run.before_assess", victim)
        _deliver(service, traffic, "worker", victim, *held)
        deadline = time.monotonic() + 60
        while not service.fired("worker", "assess_run.before_assess", victim):
            assert time.monotonic() < deadline, "the worker never reached the armed failpoint"
            time.sleep(0.1)
        waited["worker"] = _assessed_within(service, runs, time.monotonic(), "the worker's kill")
        assert service.restarts["worker"] >= 1
        assert "'lease_expired': 1" in (service.root / "worker.log").read_text(errors="replace")
        # What the rig prints when a run never settles: the run's flag as stored, the worker's lines about
        # the run's tasks (the killed one's "received" among them) and its last line, both logs' errors.
        trace = service.assessment_trace(victim)
        assert trace.startswith("flag: pending=False, requested_seq="), trace
        about = trace.split("worker on the run: ")[1].split("; worker's last line: ")[0]
        assert "recovery.tasks.assess_run[" in about and " received" in about, trace
        assert "worker's last line: none" not in trace and "beat errors (" in trace, trace
        assert service.assessment_trace("no-such-run").startswith("flag: none; worker on the run: nothing")

        # 2. Redis dies and comes back with nothing: every queued message is gone.
        writers = _writers(service, traffic, "redis", work["redis"])
        time.sleep(1.0)
        service.kill_redis()
        time.sleep(3.0)
        service.start_redis()
        back = time.monotonic()
        done = _join(writers)
        waited["redis"] = _assessed_within(service, runs, max(back, done), "Redis restarted empty")

        # 3. The database crashes and restarts (or, on a shared server, loses every connection).
        writers = _writers(service, traffic, "database", work["database"])
        time.sleep(1.0)
        if private:
            service.crash_postgres()
            # The writers may have sent their share before the crash: a read while the database is down
            # must be told so too (503 with Retry-After), whatever the writers' timing.
            down = time.monotonic()
            _probe(service, traffic, "database")
            time.sleep(max(0.0, 3.0 - (time.monotonic() - down)))
            service.start_postgres()
        else:
            assert service.terminate_connections() > 0
        back = time.monotonic()
        done = _join(writers)
        waited["database"] = _assessed_within(service, runs, max(back, done), "the database's restart")

        stored = {
            run: [
                bytes(line)
                for (line,) in _query(
                    service,
                    "SELECT r.line FROM journals_journalrecord r JOIN journals_run u ON u.id = r.run_id"
                    " WHERE u.run_id = %s ORDER BY r.seq",
                    (run,),
                )
            ]
            for run in runs
        }

    statuses = dict(traffic.statuses)
    print(f"seconds from each fault's end to every run assessed: {waited}; answers by phase: {statuses}")
    assert not [key for key in statuses if key[1] not in (0, 200, 503)], statuses  # never a 500
    assert traffic.bad_503 == []  # every 503: the one error shape and Retry-After
    if private:
        assert statuses.get(("database", 503), 0) > 0, statuses  # the outage was seen, as 503s
    assert not [key for key in statuses if key[1] == 503 and key[0] != "database"], statuses
    # Nothing acknowledged is lost: every run's records are its journal, once each, byte for byte.
    for run in runs:
        assert stored[run] == lines[run], run
    # No batch half-stored: a batch is answered with all of its records stored, or (a redelivery, or a
    # batch committed whose answer was lost) all of them found already there; never a mix.
    for ack in traffic.acks:
        counts = (ack.answer["stored"], ack.answer["duplicates"])
        assert counts in ((ack.size, 0), (0, ack.size)), (ack.run, ack.index, counts)
    assert len({(a.run, a.index) for a in traffic.acks}) == sum(len(b) for b in bodies.values())
    assert all(seconds <= BOUND for seconds in waited.values()), waited
    assert time.monotonic() - started < 240, f"the fault test took {time.monotonic() - started:.0f}s"
