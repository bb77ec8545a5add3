from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready (they import models). The tasks register their names, by which
        # the services publish them (recovery/publish.py).
        from kernel import events
        from recovery import tasks  # noqa: F401
        from recovery.background import prefix_moved_received

        # Intake announces a moved prefix; the assessment it owes is published from here.
        events.prefix_moved.connect(prefix_moved_received, dispatch_uid="recovery.prefix_moved")
