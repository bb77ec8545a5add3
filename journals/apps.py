from django.apps import AppConfig


class JournalsConfig(AppConfig):
    name = "journals"
    default_auto_field = "django.db.models.BigAutoField"
