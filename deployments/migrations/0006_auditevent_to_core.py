"""`AuditEvent` now belongs to `core` (its 0001 takes over the model's state); deployments lets go
of it in state only. The table `deployments_auditevent` and its rows stay where they are."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0005_revision_port_default"),
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
            database_operations=[],
        ),
    ]
