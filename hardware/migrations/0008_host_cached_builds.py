"""`Host.cached_builds`: the engine builds a host's agent reports in its pip cache (they install
in seconds, so the host page offers them before a compile)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("hardware", "0007_host_install_dirs"),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="cached_builds",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
