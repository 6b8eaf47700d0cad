from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import schedule_kinds
        from .services import gates  # noqa: F401 - connects the benchmark gate to operations' ends

        schedule_kinds.register()  # the switch and the alias move, as changes that can be scheduled
