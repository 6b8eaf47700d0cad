"""What each host serves moves from `hardware_host.active_revision_id` to a row of its own in
`deployments_deployment`, so hardware knows nothing of revisions. The pointer is copied here;
hardware's 0006 drops the old column after it."""

import django.db.models.deletion
from django.db import migrations, models


def copy_pointers(apps, schema_editor):
    Host = apps.get_model("hardware", "Host")
    Deployment = apps.get_model("deployments", "Deployment")
    served = Host.objects.filter(active_revision__isnull=False).values_list("pk", "active_revision_id")
    Deployment.objects.bulk_create(
        [Deployment(host_id=host_id, active_revision_id=revision_id) for host_id, revision_id in served]
    )


def copy_back(apps, schema_editor):
    Host = apps.get_model("hardware", "Host")
    Deployment = apps.get_model("deployments", "Deployment")
    for host_id, revision_id in Deployment.objects.values_list("host_id", "active_revision_id"):
        Host.objects.filter(pk=host_id).update(active_revision_id=revision_id)


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0006_auditevent_to_core"),
        ("hardware", "0005_host_credential"),
    ]

    operations = [
        migrations.CreateModel(
            name="Deployment",
            fields=[
                (
                    "host",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="deployment",
                        serialize=False,
                        to="hardware.host",
                    ),
                ),
                (
                    "active_revision",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="deployments.deploymentrevision",
                    ),
                ),
            ],
        ),
        migrations.RunPython(copy_pointers, copy_back),
    ]
