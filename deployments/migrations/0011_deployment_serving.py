from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0010_secret_hub_token"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="serving",
            field=models.BooleanField(default=True),
        ),
    ]
