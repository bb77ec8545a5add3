"""Test-only failpoints: make a process pause or die at a named point so a fault test can crash it right there.

Two ways to set one, both read at each call (not at import), so a test can set them for one subprocess:

- ``LOOPX_FAILPOINTS`` holds ``name=action`` pairs separated by commas, in force for every call
  (e.g. ``LOOPX_FAILPOINTS=assess_run.before_store=sleep:30``).
- ``LOOPX_FAILPOINTS_ARM_DIR`` names a folder where a test *arms* a point once, for one key: a file
  ``NAME@KEY`` (or ``NAME`` for any key) whose content is the action. The first process to reach the point
  with that key takes the file (renamed to ``.fired``, which only one process can do) and runs the action;
  the others go on. A long-lived server shared by many runs can so be crashed inside one run's request,
  at a point of the test's choosing, without restarting it with other settings.

Actions: ``sleep:SECONDS``; ``kill`` (SIGKILL this process); ``kill-group`` (SIGKILL this process's
group: a web server's master and all its workers, the whole service dying at once).

Unset (production), a failpoint costs two dictionary lookups in ``os.environ``. With
``LOOPX_FAILPOINTS_DIR`` set, reaching a failpoint first creates the file ``NAME.PID`` there, so the test
knows which process is parked where before it kills it.
"""

from __future__ import annotations

import logging
import os
import signal
import time

ENV = "LOOPX_FAILPOINTS"
ARM_DIR_ENV = "LOOPX_FAILPOINTS_ARM_DIR"
MARK_DIR_ENV = "LOOPX_FAILPOINTS_DIR"
logger = logging.getLogger(__name__)


def _actions() -> dict[str, str]:
    raw = os.environ.get(ENV, "")
    pairs = (item.split("=", 1) for item in raw.split(",") if "=" in item)
    return {name.strip(): action.strip() for name, action in pairs}


def arm_file(name: str, key: str | None = None) -> str:
    """The file name that arms ``name`` for ``key`` (a run id, say) in the arm folder."""
    return f"{name}@{key}" if key is not None else name


def _take_armed(arm_dir: str, name: str, key: str | None) -> str | None:
    """The action armed for this call, taken so that no other process runs it; None when none is armed."""
    for candidate in ([arm_file(name, key)] if key is not None else []) + [name]:
        path = os.path.join(arm_dir, candidate)
        taken = f"{path}.{os.getpid()}.fired"
        try:
            os.rename(path, taken)  # atomic: of two processes reaching the point, one takes it
        except FileNotFoundError:
            continue
        with open(taken) as fh:
            return fh.read().strip()
    return None


def failpoint(name: str, *, key: str | None = None) -> None:
    """Run the action configured or armed for ``name`` (and ``key``), if any."""
    if ENV not in os.environ and ARM_DIR_ENV not in os.environ:
        return
    action = _actions().get(name)
    arm_dir = os.environ.get(ARM_DIR_ENV)
    if action is None and arm_dir:
        action = _take_armed(arm_dir, name, key)
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
    elif verb == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif verb == "kill-group":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    else:
        raise ValueError(f"unknown failpoint action {verb!r} for {name}")
