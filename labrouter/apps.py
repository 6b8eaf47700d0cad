from django.apps import AppConfig


class RouterConfig(AppConfig):
    """The lab router's app: its command only (`manage.py router`); no models."""

    name = "labrouter"
    label = "router"
    verbose_name = "Lab router"
