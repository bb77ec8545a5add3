"""The audits app's own state: the chain verification's cursor and the workers' heartbeats (their model
module is audits/background.py). The operator trail is the `trail` app's; findings and recovery audits are
the `recovery` app's (the gate reads them)."""

from audits.background import ChainCursor, Heartbeat  # noqa: F401
