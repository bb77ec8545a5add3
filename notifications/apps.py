from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ops has no app of its own: its receivers are connected here, once per process, in the
        # web server and the Celery worker alike (both load INSTALLED_APPS).
        from ops import celery_signals, metrics

        from . import receivers

        celery_signals.connect()
        metrics.connect()
        receivers.connect()
