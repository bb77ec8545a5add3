from django.apps import AppConfig


class TrailConfig(AppConfig):
    """The operator trail: who did what, when and why. It sits above journals and below recovery, so every
    service that acts records its row with a direct call downward, in its own transaction."""

    name = "trail"
    default_auto_field = "django.db.models.BigAutoField"
