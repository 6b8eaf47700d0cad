"""`HostSample`: a host's CPU busy share, load average, RAM and swap as its agent read them from
/proc, kept like GPU samples (raw for a day, one-minute rollups for a month)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("hardware", "0008_host_cached_builds"),
    ]

    operations = [
        migrations.CreateModel(
            name="HostSample",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("ts", models.DateTimeField()),
                ("resolution_s", models.PositiveIntegerField(default=0)),
                ("cpu_pct", models.FloatField(null=True)),
                ("load_1", models.FloatField(null=True)),
                ("load_5", models.FloatField(null=True)),
                ("load_15", models.FloatField(null=True)),
                ("mem_total_bytes", models.BigIntegerField(null=True)),
                ("mem_available_bytes", models.BigIntegerField(null=True)),
                ("swap_total_bytes", models.BigIntegerField(null=True)),
                ("swap_used_bytes", models.BigIntegerField(null=True)),
                (
                    "host",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="usage_samples",
                        to="hardware.host",
                    ),
                ),
            ],
            options={
                "ordering": ["host", "ts"],
                "indexes": [models.Index(fields=["host", "resolution_s", "ts"], name="hostsample_host_res_ts")],
            },
        ),
    ]
