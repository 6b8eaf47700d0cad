from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rollouts"
    verbose_name = "Rollouts across hosts"

    def ready(self) -> None:
        from . import receivers, schedule_kinds  # noqa: F401 - receivers connect to operation_ended and gate_ended

        schedule_kinds.register()  # a rollout, as a change that can be scheduled
