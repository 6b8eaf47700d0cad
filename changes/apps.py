from django.apps import AppConfig


class ChangesConfig(AppConfig):
    name = "changes"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Change requests"

    def ready(self) -> None:
        """Install the review gate into the gated services (hardware.review)."""
        from hardware.review import review_install

        from .services import approval_recheck, approval_targets, change_open_from, host_requires_review

        review_install(
            required=host_requires_review, open=change_open_from, recheck=approval_recheck, targets=approval_targets
        )
