"""Publishing a recovery task from a service, by the task's registered name.

The tasks call the services, so a service names the task it publishes instead of importing the tasks module
(which imports it). recovery/apps.py imports recovery.tasks when the app is ready, so every name is registered
in every process: the web, the worker and the commands.
"""

from __future__ import annotations

from typing import Any

from celery import current_app

# A publish retries briefly, then gives up: the database row already holds the truth, and a sweep or the
# console's "queue again" publishes again.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def task_publish(name: str, *args: Any) -> None:
    """Send ``name(*args)`` to the broker (or run it here when Celery is eager). Raises what the broker
    raises; the caller logs it and leaves the row for the retry."""
    current_app.tasks[name].apply_async(args=tuple(args), retry=True, retry_policy=PUBLISH_RETRY_POLICY)
