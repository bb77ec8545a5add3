from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Webhooks listen to the domain's signals, once per process (web and worker alike), once the app registry
        # is ready (the receivers import models). The tasks register their names, by which delivery publishes.
        from . import receivers, tasks  # noqa: F401

        receivers.connect()
