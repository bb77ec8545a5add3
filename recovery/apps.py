from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kernel import events
        from recovery.background import prefix_moved_received

        # Intake announces a moved prefix; the assessment it owes is published from here.
        events.prefix_moved.connect(prefix_moved_received, dispatch_uid="recovery.prefix_moved")
