from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .services import gates  # noqa: F401 - connects the benchmark gate to operations' ends
