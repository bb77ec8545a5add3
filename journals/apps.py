from django.apps import AppConfig


class JournalsConfig(AppConfig):
    name = "journals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the OpenAPI extension for the bearer-token authentication, once the app registry is ready.
        from journals import schema  # noqa: F401
