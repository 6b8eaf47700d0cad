"""The lab's door mode (DoorPolicy). A panel that has made a key before keeps its doors closed:
keys required, also when every key was revoked (what its Keys page promised: "Clients using it
get 401"); a panel that never made one stays open."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def keys_required_if_keys_were_made(apps, schema_editor):
    if apps.get_model("deployments", "InferenceKey").objects.exists():
        apps.get_model("deployments", "DoorPolicy").objects.create(id=1, mode="keys_required")


class Migration(migrations.Migration):

    dependencies = [
        ("deployments", "0016_measured_memory"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="DoorPolicy",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, editable=False, primary_key=True, serialize=False)),
                (
                    "mode",
                    models.CharField(
                        choices=[("open", "Open"), ("keys_required", "Keys required")],
                        default="keys_required",
                        max_length=16,
                    ),
                ),
                ("set_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "set_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [models.CheckConstraint(condition=models.Q(("id", 1)), name="door_policy_one_row")],
            },
        ),
        migrations.RunPython(keys_required_if_keys_were_made, migrations.RunPython.noop),
    ]
