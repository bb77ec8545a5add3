"""Test-only failpoints: make a process pause at a named point so a fault test can kill it right there.

``LOOPX_FAILPOINTS`` holds ``name=action`` pairs separated by commas; the only action is ``sleep:SECONDS``
(e.g. ``LOOPX_FAILPOINTS=assess_run.before_store=sleep:30``). The variable is read at each call, not at
import, so a test can set it for one worker subprocess only. Unset (production), a failpoint costs one
dictionary lookup in ``os.environ``. With ``LOOPX_FAILPOINTS_DIR`` set, reaching a failpoint first creates
the file ``NAME.PID`` there, so the test knows which process is parked where before it kills it.
"""

from __future__ import annotations

import logging
import os
import time

ENV = "LOOPX_FAILPOINTS"
MARK_DIR_ENV = "LOOPX_FAILPOINTS_DIR"
logger = logging.getLogger(__name__)


def _actions() -> dict[str, str]:
    raw = os.environ.get(ENV, "")
    pairs = (item.split("=", 1) for item in raw.split(",") if "=" in item)
    return {name.strip(): action.strip() for name, action in pairs}


def failpoint(name: str) -> None:
    """Run the action configured for ``name``, if any."""
    if ENV not in os.environ:
        return
    action = _actions().get(name)
    if action is None:
        return
    verb, _, arg = action.partition(":")
    mark_dir = os.environ.get(MARK_DIR_ENV)
    if mark_dir:
        with open(os.path.join(mark_dir, f"{name}.{os.getpid()}"), "w") as fh:
            fh.write(action)
    if verb == "sleep":
        # Logged so that a test reading the worker's output knows the process is parked here.
        logger.warning("failpoint %s: sleeping %s s (pid %s)", name, arg, os.getpid())
        time.sleep(float(arg))
    else:
        raise ValueError(f"unknown failpoint action {verb!r} for {name}")
