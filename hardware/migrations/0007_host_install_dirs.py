"""`Host.install_dirs`: the folders a host's agent lets an install read a wheelhouse or a source
checkout from (CONTROLPANEL_INSTALL_DIRS), as it reports them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("hardware", "0006_remove_host_active_revision"),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="install_dirs",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
