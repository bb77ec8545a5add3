"""The service's own crash: SIGKILL the web process while it ingests a large batch.

Ingest commits a batch in one transaction or not at all, so after the restart the run holds either none
of the batch or all of it, byte-identical; an acknowledged batch is never lost; and redelivering the
batch (what a runtime does when its POST died with the server) ends with exactly the batch, once.
The kill is timed, not placed by a failpoint (ingest has none), so a trial reports whether its POST was
cut off; the checks hold either way.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from recovery.engine.writer import JournalWriter

from .http import HttpError, HttpGateway
from .server import LiveServer


@dataclass
class WebKillTrial:
    seed: int
    delay: float
    records: int
    acknowledged: bool = False
    stored_after_kill: int = 0
    failures: list[str] = field(default_factory=list)


def web_kill_trial(server: LiveServer, seed: int, records: int = 3000) -> WebKillTrial:
    rng = random.Random(seed)
    run = f"webkill-{seed}"
    writer = JournalWriter(run)
    n = 0
    while len(writer.lines) < records:
        n += 1
        writer.complete_turn(f"t{n}", lineage=f"job-{n}")
    lines = list(writer.lines)
    trial = WebKillTrial(seed, rng.uniform(0.05, 1.2), len(lines))
    gateway = HttpGateway(server.base_url, server.token, run)

    def post() -> None:
        try:
            gateway.ingest(lines)
            trial.acknowledged = True
        except (OSError, HttpError):  # the server died under the request: that is the point
            trial.acknowledged = False

    sender = threading.Thread(target=post)
    sender.start()
    time.sleep(trial.delay)
    server.kill()
    sender.join(timeout=120)
    server.start()

    stored = gateway.lines()
    trial.stored_after_kill = len(stored)
    if stored and len(stored) != len(lines):
        trial.failures.append(f"partial batch: {len(stored)} of {len(lines)} records stored")
    elif stored and stored != lines:
        trial.failures.append("the stored batch differs from the one sent")
    if trial.acknowledged and len(stored) != len(lines):
        trial.failures.append("an acknowledged batch was lost")
    gateway.ingest(lines)  # redelivery: idempotent for what is stored, completes what is not
    if gateway.lines() != lines:
        trial.failures.append("after redelivery the run does not hold exactly the batch")
    return trial
