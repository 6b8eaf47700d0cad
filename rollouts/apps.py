from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rollouts"
    verbose_name = "Rollouts across hosts"

    def ready(self) -> None:
        from . import receivers  # noqa: F401 - connects to operation_ended and gate_ended
