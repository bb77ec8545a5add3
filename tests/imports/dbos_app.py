"""A DBOS Transact application run as its own process by tests/imports/test_dbos.py, on a SQLite system
database file or a PostgreSQL URL: ``python -m tests.imports.dbos_app DB_OR_URL TRIES_DIR WORKFLOW_ID MODE``.

MODE ``complete`` runs the order workflow to its end; ``crash`` kills the process (SIGKILL) inside the
``charge`` step; ``error`` makes ``charge`` raise, so the workflow ends in ERROR. Running ``complete`` on
a database where ``crash`` left the workflow pending resumes it (DBOS replays the recorded steps and runs
the rest), as a restarted worker would. Every step returns SECRET, which no journal may hold.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from dbos import DBOS, SetWorkflowID

SECRET = "card-4242-4242-secret"

DB, TRIES, WORKFLOW_ID, MODE = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
URL = DB if DB.startswith(("postgres://", "postgresql://")) else "sqlite:///" + DB

DBOS(config={"name": "shop", "system_database_url": URL, "run_admin_server": False})


@DBOS.step()
def lookup_customer(n: int) -> str:
    return f"{SECRET}-{n}"


@DBOS.step(retries_allowed=True, max_attempts=3, interval_seconds=0.01, backoff_rate=1.0)
def reserve_stock(n: int) -> str:
    """Fails twice, then succeeds: DBOS retries it in its process and records only the last attempt."""
    tries = Path(TRIES) / f"{WORKFLOW_ID}.tries"
    done = int(tries.read_text()) if tries.exists() else 0
    tries.write_text(str(done + 1))
    if done < 2:
        raise RuntimeError(SECRET)
    return SECRET


@DBOS.step()
def charge_card(n: int) -> str:
    if MODE == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "error":
        raise RuntimeError(SECRET)
    return SECRET


@DBOS.workflow()
def pack(n: int) -> str:
    lookup_customer(n)
    return SECRET


@DBOS.workflow()
def order(n: int) -> str:
    lookup_customer(n)
    reserve_stock(n)
    pack(n)  # a child workflow, awaited in place
    handle = DBOS.start_workflow(pack, n + 1)  # a child started, then awaited
    handle.get_result()
    DBOS.sleep(0.01)
    charge_card(n)
    return SECRET


DBOS.launch()
try:
    with SetWorkflowID(WORKFLOW_ID):
        order(1)
except RuntimeError:
    pass
DBOS.destroy()
