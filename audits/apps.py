from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AuditsConfig(AppConfig):
    name = "audits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The roles read models, which load once the app registry is ready.
        from .roles import sync_roles

        # After every migrate, so that permissions of models added later reach the role groups.
        post_migrate.connect(sync_roles, dispatch_uid="audits.sync_roles")
