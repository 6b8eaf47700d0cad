from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("hardware", "0003_engine_samples"),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="model_dirs",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
