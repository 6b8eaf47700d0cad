from django.apps import AppConfig


class HardwareConfig(AppConfig):
    name = "hardware"
    default_auto_field = "django.db.models.BigAutoField"
