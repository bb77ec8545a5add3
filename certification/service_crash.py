"""The service's own crash: SIGKILL the web process while it ingests a large batch.

Ingest commits a batch in one transaction or not at all, so after the restart the run holds either none
of the batch or all of it, byte-identical; an acknowledged batch is never lost; and redelivering the
batch (what a runtime does when its POST died with the server) ends with exactly the batch, once.
The kill is timed (seed 0's is placed: parked at ingest's failpoint, then killed), so a trial reports
whether its POST was cut off; the checks hold either way.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from loopx_client import LoopxError

from engine.writer import JournalWriter
from kernel.failpoints import ENV, MARK_DIR_ENV

from .http import HttpGateway
from .server import LiveServer


@dataclass
class WebKillTrial:
    seed: int
    delay: float
    records: int
    acknowledged: bool = False
    stored_after_kill: int = 0
    failures: list[str] = field(default_factory=list)


def _placed_kill(server: LiveServer, marks: Path) -> None:
    """Park the next ingest inside its transaction (records written, not committed), wait until the web
    process is there, and kill it: the kill lands mid-batch whatever the machine's speed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(marks.glob("records_ingest.before_commit.*")):
        time.sleep(0.02)
    server.kill()


def web_kill_trial(server: LiveServer, seed: int, records: int = 3000, *, placed: bool = False) -> WebKillTrial:
    rng = random.Random(seed)
    run = f"webkill-{seed}"
    writer = JournalWriter(run)
    n = 0
    while len(writer.lines) < records:
        n += 1
        writer.complete_turn(f"t{n}", lineage=f"job-{n}")
    lines = list(writer.lines)
    trial = WebKillTrial(seed, rng.uniform(0.05, 1.2), len(lines))
    # One batch, no retries: the trial sees the POST the kill cut off, and redelivers the batch itself below.
    gateway = HttpGateway(server.base_url, server.token, run, retries=0, batch_records=len(lines))

    def post() -> None:
        try:
            gateway.ingest(lines)
            trial.acknowledged = True
        except (OSError, LoopxError):  # the server died under the request: that is the point
            trial.acknowledged = False

    marks = Path(tempfile.mkdtemp(prefix="loopx-failpoints-"))
    if placed:
        trial.delay = 0.0
        server.kill()
        server.env.update({ENV: "records_ingest.before_commit=sleep:60", MARK_DIR_ENV: str(marks)})
        server.start()
    sender = threading.Thread(target=post)
    sender.start()
    if placed:
        _placed_kill(server, marks)
        server.env.pop(ENV, None)
        server.env.pop(MARK_DIR_ENV, None)
    else:
        time.sleep(trial.delay)
        server.kill()
    sender.join(timeout=120)
    server.start()
    shutil.rmtree(marks, ignore_errors=True)

    stored = gateway.lines()
    trial.stored_after_kill = len(stored)
    if stored and len(stored) != len(lines):
        trial.failures.append(f"partial batch: {len(stored)} of {len(lines)} records stored")
    elif stored and stored != lines:
        trial.failures.append("the stored batch differs from the one sent")
    if trial.acknowledged and len(stored) != len(lines):
        trial.failures.append("an acknowledged batch was lost")
    # Redelivery, by a runtime restarted with the same batch: idempotent for what is stored, completes the rest.
    HttpGateway(server.base_url, server.token, run, batch_records=len(lines)).ingest(lines)
    if gateway.lines() != lines:
        trial.failures.append("after redelivery the run does not hold exactly the batch")
    return trial
