from django.apps import AppConfig


class TuningConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tuning"
    verbose_name = "Tuning runs"

    def ready(self) -> None:
        from . import receivers  # noqa: F401 - the next step when an operation of a run ends
