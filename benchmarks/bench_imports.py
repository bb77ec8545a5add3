"""A Temporal history at Temporal's own cap (51,200 events, ~50 MB) imported, beside the floor of reading it.

    python -m benchmarks.bench_imports                  # 51,200 events, ~50 MB
    python -m benchmarks.bench_imports --events 5000    # smaller
    python -m benchmarks.bench_imports --check          # exit 1 when a target is missed

The history is generated once (workflow tasks, activities scheduled, started and closed in every way,
timers, signals, markers, children; payloads of random base64 as Temporal stores them, ~1 KB a event on
average, pretty-printed as `temporal workflow show --output json` prints it) and cached as
var/bench/temporal-<events>-<generator version>.json.

Measured in the same run, each in its own child process (so that a peak RSS is that process's own), in
alternating rounds (floor, import, floor, ...; the best of each side kept, each round's ratio printed):

- floor: the file read, ``orjson.loads`` of it whole and sha256 of it (hex digest): the least any import
  of it does;
- import: ``recovery.imports.importers.history_import_file(source="temporal", ...)``, the whole thing (split,
  parse, map, journal bytes in memory).

Targets: the import within 3x of the floor in CPU time; its peak RSS under 200 MB.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_engine import peak_rss_mb
from recovery.imports.importers import effect_map_parse, history_import_file

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "var" / "bench"
GENERATOR_VERSION = "g1"
TARGET_RATIO = 3.0
TARGET_RSS_MB = 200.0


def _payload(rnd: random.Random, size: int) -> dict[str, Any]:
    raw = rnd.randbytes(size)
    return {
        "payloads": [
            {"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": base64.b64encode(raw).decode()},
        ]
    }


def generate(path: Path, events: int) -> None:
    """A history of exactly `events` events, written as one pretty-printed JSON object."""
    rnd = random.Random(20261202)
    out: list[dict[str, Any]] = []

    def add(event_type: str, **attrs: Any) -> int:
        eid = len(out) + 1
        seconds = eid // 10
        out.append(
            {
                "eventId": str(eid),
                "eventTime": f"2026-03-{1 + seconds // 86400:02d}T{seconds // 3600 % 24:02d}:"
                f"{seconds // 60 % 60:02d}:{seconds % 60:02d}.{eid % 1000:03d}456789Z",
                "eventType": "EVENT_TYPE_" + "".join("_" + c if c.isupper() else c.upper() for c in event_type)[1:],
                "taskId": str(1048576 + eid),
                event_type[:1].lower() + event_type[1:] + "EventAttributes": attrs,
            }
        )
        return eid

    add(
        "WorkflowExecutionStarted",
        workflowType={"name": "BenchWorkflow"},
        taskQueue={"name": "bench", "kind": "TASK_QUEUE_KIND_NORMAL"},
        input=_payload(rnd, 600),
        workflowExecutionTimeout="0s",
        originalExecutionRunId="0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9",
        firstExecutionRunId="0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9",
        attempt=1,
    )
    n = 0
    while len(out) + 7 < events:  # each round adds at most six events; the end is one more
        scheduled = add("WorkflowTaskScheduled", taskQueue={"name": "bench"}, startToCloseTimeout="10s", attempt=1)
        started = add("WorkflowTaskStarted", scheduledEventId=str(scheduled), identity="1@bench", requestId="r")
        done = add("WorkflowTaskCompleted", scheduledEventId=str(scheduled), startedEventId=str(started))
        shape = n % 10
        if shape < 6:
            s = add(
                "ActivityTaskScheduled",
                activityId=str(n),
                activityType={"name": ("ChargeCard", "SendEmail", "Lookup")[n % 3]},
                taskQueue={"name": "bench", "kind": "TASK_QUEUE_KIND_NORMAL"},
                header={},
                input=_payload(rnd, rnd.randint(750, 3500)),
                scheduleToCloseTimeout="0s",
                startToCloseTimeout="30s",
                heartbeatTimeout="0s",
                workflowTaskCompletedEventId=str(done),
                retryPolicy={"initialInterval": "1s", "backoffCoefficient": 2.0, "maximumInterval": "100s"},
            )
            st = add("ActivityTaskStarted", scheduledEventId=str(s), identity="1@bench", attempt=1)
            closing = ("ActivityTaskCompleted", "ActivityTaskFailed", "ActivityTaskTimedOut")[n % 5 % 3]
            add(closing, scheduledEventId=str(s), startedEventId=str(st), result=_payload(rnd, rnd.randint(400, 2200)))
        elif shape < 8:
            t = add("TimerStarted", timerId=str(n), startToFireTimeout="5s", workflowTaskCompletedEventId=str(done))
            add("TimerFired", timerId=str(n), startedEventId=str(t))
        elif shape == 8:
            add("MarkerRecorded", markerName="LocalActivity", details={"data": _payload(rnd, 400)})
            add("WorkflowExecutionSignaled", signalName="poke", input=_payload(rnd, 300), identity="cli")
        else:
            i = add(
                "StartChildWorkflowExecutionInitiated",
                workflowId=f"child-{n}",
                workflowType={"name": "Child"},
                input=_payload(rnd, 500),
                workflowTaskCompletedEventId=str(done),
            )
            add(
                "ChildWorkflowExecutionStarted", initiatedEventId=str(i), workflowExecution={"workflowId": f"child-{n}"}
            )
            add("ChildWorkflowExecutionCompleted", initiatedEventId=str(i), result=_payload(rnd, 300))
        n += 1
    while len(out) < events - 1:
        add("WorkflowTaskScheduled", taskQueue={"name": "bench"}, startToCloseTimeout="10s", attempt=1)
    add("WorkflowExecutionCompleted", result=_payload(rnd, 200), workflowTaskCompletedEventId=str(len(out)))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"events": out}, indent=2))
    os.replace(tmp, path)


def history(events: int) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"temporal-{events}-{GENERATOR_VERSION}.json"
    if not path.exists():
        started = time.perf_counter()
        print(f"generating {path.relative_to(REPO)} (once) ...", flush=True)
        generate(path, events)
        print(f"  done in {time.perf_counter() - started:.1f} s", flush=True)
    return path


# -- the measurements (each in a child process) ------------------------------------------------------------------


def floor(path: Path) -> dict[str, Any]:
    import hashlib

    import orjson

    data = path.read_bytes()
    parsed = orjson.loads(data)
    hashlib.sha256(data).hexdigest()
    return {"events": len(parsed["events"])}


def importer(path: Path) -> dict[str, Any]:
    result = history_import_file(
        source="temporal", path=path, effects=effect_map_parse({"Lookup": "safe", "SendEmail": "idempotent"})
    )
    return {"events": result.events, "records": result.runs[0].records, "journal_mb": len(result.runs[0].journal) / 1e6}


def child(what: str, path: Path) -> None:
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    out = floor(path) if what == "floor" else importer(path)
    out["wall"] = time.perf_counter() - started_wall
    out["cpu"] = time.process_time() - started_cpu
    out["rss_mb"] = peak_rss_mb()
    print(json.dumps(out))


def _child_run(what: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_imports", "--child", what, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed: {proc.stderr.strip()[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_imports", description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=51_200, help="history size in events (default 51,200)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of (floor, import); best of each kept")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0

    path = history(args.events)
    size_mb = path.stat().st_size / 1e6
    best: dict[str, dict[str, Any]] = {}
    rounds: list[float] = []
    for _ in range(args.repeat):
        pair = {what: _child_run(what, path) for what in ("floor", "import")}
        rounds.append(pair["import"]["cpu"] / pair["floor"]["cpu"])
        for what, out in pair.items():
            if what not in best or out["cpu"] < best[what]["cpu"]:
                best[what] = out
    base, run = best["floor"], best["import"]
    if base["events"] != run["events"]:
        print(f"the floor read {base['events']} events but the import {run['events']}", file=sys.stderr)
        return 1
    n = run["events"]
    ratio_cpu, ratio_wall = run["cpu"] / base["cpu"], run["wall"] / base["wall"]
    print(
        f"imports: Temporal history of {n:,} events, {size_mb:.1f} MB -> {run['records']:,} records "
        f"({run['journal_mb']:.1f} MB of journal)"
    )
    print(
        f"  floor  (orjson.loads + sha256): wall {base['wall']:.2f} s  cpu {base['cpu']:.2f} s  "
        f"peak RSS {base['rss_mb']:.0f} MB"
    )
    print(
        f"  import (history_import_file):   wall {run['wall']:.2f} s  cpu {run['cpu']:.2f} s  "
        f"peak RSS {run['rss_mb']:.0f} MB"
    )
    ratio_ok = ratio_cpu <= TARGET_RATIO
    rss_ok = run["rss_mb"] < TARGET_RSS_MB
    print(
        f"  ratio to floor: {ratio_cpu:.2f}x cpu, {ratio_wall:.2f}x wall (target <= {TARGET_RATIO:g}x cpu: "
        f"{'ok' if ratio_ok else 'MISSED'}); peak RSS {run['rss_mb']:.0f} MB (target < {TARGET_RSS_MB:g} MB: "
        f"{'ok' if rss_ok else 'MISSED'})"
    )
    print(f"  ratio in each round: {', '.join(f'{r:.2f}x' for r in rounds)} (best of each side above)")
    return 1 if args.check and not (ratio_ok and rss_ok) else 0


if __name__ == "__main__":
    sys.exit(main())
