from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .services import gates, schedule_kinds  # noqa: F401 - gates connects the benchmark gate to operations' ends

        schedule_kinds.register()  # the switch and the alias move, as changes that can be scheduled
