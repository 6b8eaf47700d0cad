from django.db import migrations, models


def engines_of_earlier_trials(apps, schema_editor):
    """Trials stored before a run could try other engines all ran the base's engine."""
    TuningTrial = apps.get_model("tuning", "TuningTrial")
    for trial in TuningTrial.objects.filter(engine="").select_related("run__base"):
        trial.engine = trial.run.base.engine
        trial.save(update_fields=["engine"])


class Migration(migrations.Migration):
    dependencies = [
        ("tuning", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="tuningrun",
            name="engines",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="Other engines tried: {engine: {knob: [values]}} ({}: at its defaults).",
            ),
        ),
        migrations.AddField(
            model_name="tuningtrial",
            name="engine",
            field=models.CharField(blank=True, max_length=20),
        ),
        migrations.RunPython(engines_of_earlier_trials, migrations.RunPython.noop),
    ]
