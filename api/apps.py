from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Automation API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import signals

        signals.connect()
