"""SSO accounts keyed by the ID token's issuer and subject together (`iss`, `sub`), not by `sub`
alone. The links that exist get the issuer of the provider the panel is configured with (its
CONTROLPANEL_OIDC_DISCOVERY_URL, the issuer URL); where only the endpoints are set, the issuer is
unknown here and stays empty, and each such account takes the issuer of its next sign-in."""

from django.conf import settings
from django.db import migrations, models

WELL_KNOWN = "/.well-known/openid-configuration"


def configured_issuer() -> str:
    """The configured provider's issuer: its discovery URL without `/.well-known/openid-configuration`
    (OpenID Connect Discovery 1.0, section 4), without a trailing slash (sso.issuer_normal)."""
    url = (getattr(settings, "CONTROLPANEL_OIDC_DISCOVERY_URL", "") or "").strip().rstrip("/")
    if url.endswith(WELL_KNOWN):
        url = url[: -len(WELL_KNOWN)]
    return url.rstrip("/")


def fill_issuer(apps, schema_editor):
    issuer = configured_issuer()
    if issuer:
        apps.get_model("people", "SsoAccount").objects.filter(issuer="").update(issuer=issuer)


class Migration(migrations.Migration):
    dependencies = [
        ("people", "0001_sso_account"),
    ]

    operations = [
        migrations.AddField(
            model_name="ssoaccount",
            name="issuer",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The issuer (`iss`) of the ID tokens that sign them in; empty: linked before issuers were kept.",
                max_length=500,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(fill_issuer, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="ssoaccount",
            name="subject",
            field=models.CharField(max_length=255),
        ),
        migrations.AddConstraint(
            model_name="ssoaccount",
            constraint=models.UniqueConstraint(fields=("issuer", "subject"), name="sso_account_issuer_subject"),
        ),
    ]
