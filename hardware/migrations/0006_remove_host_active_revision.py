"""`Host.active_revision` is gone: what a host serves is `deployments.Deployment` now (deployments'
0007 copied every pointer there first, hence the dependency)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("hardware", "0005_host_credential"),
        ("deployments", "0007_deployment"),
    ]

    operations = [
        migrations.RemoveField(model_name="host", name="active_revision"),
    ]
