"""`make run` on a bare machine: run_all on the embedded defaults (SQLite, kombu's filesystem broker)
comes up, serves the login page, its worker assesses the seeded demo runs and its beat and worker beat;
SIGTERM stops every process it started."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ops.demo import demo_journals
from tests.tasks.procs import ROOT, free_port, wait_for

pytestmark = pytest.mark.slow


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc: ppid is the 4th field of /proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return None


def _first_record(run: str) -> bytes:
    record = {"v": 2, "run": run, "branch": 0, "lsn": 0, "kind": "turn_planned",
              "at": "2026-01-01T00:00:00Z", "turn": "t1", "lineage": "job-1"}
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _post_chunked(port: int, path: str, token: str, body: bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        half = len(body) // 2
        conn.request(
            "POST", path, body=iter([body[:half], body[half:]]), encode_chunked=True,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
        )
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def _query(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return list(conn.execute(sql))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the children")
def test_run_all_comes_up_on_the_embedded_defaults_and_stops_cleanly(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(LOOPX_VAR_DIR=str(tmp_path / "var"), LOOPX_HEARTBEAT_SECONDS="1", PYTHONUNBUFFERED="1")
    log = open(tmp_path / "run_all.log", "wb")  # noqa: SIM115  the server writes it to the end; closed in finally
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "run_all", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    db = tmp_path / "var" / "loopx.sqlite3"
    demo_ids = sorted(d.run_id for d in demo_journals())
    children: set[int] = set()
    try:
        wait_for(lambda: _status(f"http://127.0.0.1:{port}/accounts/login/") in (200, 302), timeout=90,
                 interval=0.5, what="the login page")
        output = (tmp_path / "run_all.log").read_text(errors="replace")
        assert f"http://127.0.0.1:{port}/" in output and "operator / loopx-demo" in output
        # The worker (not this process, not the seeding) assesses every demo run: the task's own marks.
        done = (
            "SELECT r.run_id FROM journals_pendingassessment p JOIN journals_run r ON r.id = p.run_id "
            "WHERE p.outcome = 'stored' AND p.pending = 0 AND r.assessed_seq = r.last_seq ORDER BY r.run_id"
        )
        wait_for(lambda: [r[0] for r in _query(db, done)] == demo_ids, timeout=60, interval=0.5,
                 what="the worker to assess the demo runs")
        wait_for(lambda: {r[0] for r in _query(db, "SELECT role FROM audits_heartbeat")} == {"worker", "beat"},
                 timeout=30, interval=0.5, what="worker and beat heartbeats")
        # The demo's first audit pass, run by the worker, leaves findings for the console.
        wait_for(lambda: _query(db, "SELECT count(*) FROM recovery_finding")[0][0] > 0, timeout=30, interval=0.5,
                 what="the demo findings")
        # A runtime that streams its batch (Transfer-Encoding: chunked, no Content-Length) is read whole.
        token = subprocess.run(
            [sys.executable, "manage.py", "create_api_token", "chunked-writer"],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[-1]
        answer = _post_chunked(port, "/api/v1/runs/chunked-run/records", token, _first_record("chunked-run"))
        assert answer[0] == 200 and answer[1]["stored"] == 1, answer
        children = _descendants(proc.pid)
        assert len(children) >= 4  # web, worker (and its pool), beat
    finally:
        children |= _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        finally:
            log.close()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, (tmp_path / "run_all.log").read_text(errors="replace")[-3000:]
    time.sleep(0.5)
    assert [pid for pid in children if _alive(pid)] == []
