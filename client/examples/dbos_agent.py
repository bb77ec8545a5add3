"""The support agent of langgraph_agent.py as a DBOS workflow, audited from DBOS's own database afterwards:

    python dbos_agent.py agent.sqlite
    python manage.py import_history agent.sqlite --from dbos --out journals/ --effects effects.json

with effects.json ``{"lookup_ticket": "safe", "save_note": "idempotent", "send_reply": "unsafe"}``. LoopX
adds no line to the program. ``AGENT_CRASH_AT=send`` kills the process inside the send.
"""

from __future__ import annotations

import os
import signal
import sys

from dbos import DBOS

DBOS(config={"name": "support", "system_database_url": "sqlite:///" + sys.argv[1], "run_admin_server": False})


@DBOS.step()
def lookup_ticket(ticket_id: str) -> str:
    return f"ticket {ticket_id}: the customer asks where the refund is"


@DBOS.step()
def save_note(ticket_id: str, note: str) -> str:
    return "saved"


@DBOS.step()
def send_reply(ticket_id: str, text: str) -> str:
    if os.environ.get("AGENT_CRASH_AT") == "send":
        os.kill(os.getpid(), signal.SIGKILL)
    return "sent"


@DBOS.workflow()
def support(ticket_id: str) -> str:
    lookup_ticket(ticket_id)
    save_note(ticket_id, "refund asked")
    return send_reply(ticket_id, "Your refund is on its way.")


if __name__ == "__main__":
    DBOS.launch()
    print(support("1234"))
    DBOS.destroy()
