from django.apps import AppConfig
from django.core.signals import got_request_exception


class OpsConfig(AppConfig):
    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Metrics and the worker's request context listen to the domain's signals, once per process, in
        # the web server and the Celery worker alike (both load INSTALLED_APPS), once the app registry is ready
        # (they import models).
        from . import celery_signals, checks, metrics  # noqa: F401  (checks registers itself)
        from .unavailable import remember_dependency_down

        celery_signals.connect()
        metrics.connect()
        got_request_exception.connect(remember_dependency_down, dispatch_uid="loopx-dependency-down")
