from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0009_engine_log_runs"),
    ]

    operations = [
        migrations.AddField(
            model_name="secret",
            name="hub_token",
            field=models.BooleanField(default=False, help_text="An admin marked it as a Hugging Face token."),
        ),
    ]
