from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class PeopleConfig(AppConfig):
    name = "people"
    label = "people"
    verbose_name = "People"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A mistyped role map stops every process at start, naming the bad pair, rather than
        # refusing people one by one at their sign-in.
        from controlpanel.roles import parse_role_map

        from .oidc import end_session_problem

        try:
            parse_role_map(settings.CONTROLPANEL_OIDC_ROLE_MAP)
        except ValueError as exc:
            raise ImproperlyConfigured(f"CONTROLPANEL_OIDC_ROLE_MAP: {exc}") from None
        problem = end_session_problem(settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT)
        if problem:
            raise ImproperlyConfigured(f"CONTROLPANEL_OIDC_END_SESSION_ENDPOINT {problem}")
