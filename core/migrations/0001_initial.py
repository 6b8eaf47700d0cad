"""`AuditEvent` moves here from `deployments`: state only. The table stays
`deployments_auditevent` (created by deployments' first migrations), so no row is copied."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        # The table exists once deployments' initial migrations ran (the host column is 0002's).
        ("deployments", "0005_revision_port_default"),
        ("hardware", "0005_host_credential"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("action", models.CharField(max_length=60)),
                        ("object_type", models.CharField(blank=True, max_length=60)),
                        ("object_id", models.CharField(blank=True, max_length=64)),
                        ("summary", models.CharField(blank=True, max_length=300)),
                        ("data", models.JSONField(blank=True, default=dict)),
                        ("source", models.CharField(default="web", max_length=20)),
                        ("remote_addr", models.GenericIPAddressField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "host",
                            models.ForeignKey(
                                blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to="hardware.host"
                            ),
                        ),
                    ],
                    options={"ordering": ["-created_at"], "db_table": "deployments_auditevent"},
                ),
            ],
            database_operations=[],
        ),
    ]
