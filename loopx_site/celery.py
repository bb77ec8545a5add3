"""The Celery app. Tasks live in each app's tasks.py and are discovered from INSTALLED_APPS."""

from __future__ import annotations

import os

from celery import Celery

from audits.heartbeat import WorkerHeartbeat

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")

app = Celery("loopx_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Every worker writes its heartbeat from its own timer (audits/heartbeat.py): the console's overview.
app.steps["worker"].add(WorkerHeartbeat)
