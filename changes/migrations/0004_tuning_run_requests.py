from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("changes", "0003_approvals_bind_their_hosts_and_revisions"),
    ]

    operations = [
        migrations.AlterField(
            model_name="changerequest",
            name="kind",
            field=models.CharField(
                choices=[
                    ("switch", "Switch"),
                    ("alias", "Alias move"),
                    ("serving", "Serving-set change"),
                    ("rollout", "Rollout across hosts"),
                    ("tuning", "Tuning run"),
                ],
                max_length=20,
            ),
        ),
    ]
