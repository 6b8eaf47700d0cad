import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("deployments", "0019_door_table_refused"),
        ("hardware", "0010_host_tags"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="TuningRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("space", models.JSONField(default=dict, help_text="{knob: [values]}, as the engine's knob specs normalise them.")),
                ("objective", models.JSONField(default=dict, help_text='{"metric": ..., "level": ...} (serving.tuning.Objective).')),
                ("limits", models.JSONField(default=list, help_text="[serving.tuning.Limit.to_dict()]")),
                ("profile", models.JSONField(default=dict, help_text="The benchmark profile every round runs.")),
                ("max_trials", models.PositiveSmallIntegerField(default=8, help_text="Candidates measured at most (base aside).")),
                ("max_minutes", models.PositiveIntegerField(default=60, help_text="No candidate starts after this many minutes.")),
                ("repeats", models.PositiveSmallIntegerField(default=3, help_text="Rounds the best few and the base get in all.")),
                ("repeat_best", models.PositiveSmallIntegerField(default=2, help_text="How many of the best are repeated.")),
                ("seed", models.IntegerField(default=0)),
                ("state", models.CharField(choices=[("running", "Running"), ("restoring", "Going back to the base revision"), ("succeeded", "Finished"), ("failed", "Failed"), ("cancelled", "Cancelled")], default="running", max_length=12)),
                ("stage", models.CharField(choices=[("base", "Measuring the base revision"), ("trials", "Measuring candidates"), ("repeats", "Repeating the best to rule out noise"), ("restore", "Going back to the base revision"), ("done", "Done")], default="base", max_length=10)),
                ("reason", models.TextField(blank=True, help_text="Why it failed or stopped; the verdict's summary otherwise.")),
                ("cancel_requested", models.BooleanField(default=False)),
                ("verdict", models.JSONField(blank=True, default=dict)),
                ("change_request", models.PositiveIntegerField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("approved_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                ("base", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="deployments.deploymentrevision")),
                ("created_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                ("current_op", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="tuning_runs", to="deployments.operation")),
                ("host", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="tuning_runs", to="hardware.host")),
            ],
            options={"ordering": ["-created_at"]},
        ),
        migrations.CreateModel(
            name="TuningTrial",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.PositiveSmallIntegerField()),
                ("knobs", models.JSONField(default=dict, help_text="The candidate: the knobs it sets on the base's.")),
                ("state", models.CharField(choices=[("refused", "Refused by the planner: never started"), ("switching", "Switching to it"), ("measuring", "Measuring"), ("measured", "Measured"), ("ruled_out", "Ruled out by a limit (stopped early)"), ("failed", "Failed")], default="switching", max_length=10)),
                ("reason", models.TextField(blank=True, help_text="Why the planner refused it, a limit ruled it out or it failed.")),
                ("rounds", models.JSONField(blank=True, default=list)),
                ("value", models.FloatField(blank=True, help_text="The objective, the mean of its rounds.", null=True)),
                ("passed", models.BooleanField(blank=True, help_text="Met every limit (None: not measured).", null=True)),
                ("planned_memory", models.JSONField(blank=True, default=dict, help_text="{device: bytes} the planner said.")),
                ("measured_memory", models.JSONField(blank=True, default=dict, help_text="{device: peak bytes} the host held.")),
                ("findings", models.JSONField(blank=True, default=list, help_text="The planner's findings: [{severity, code, message}].")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("revision", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="tuning_trials", to="deployments.deploymentrevision")),
                ("run", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="trials", to="tuning.tuningrun")),
            ],
            options={"ordering": ["run", "number"]},
        ),
        migrations.AddField(
            model_name="tuningrun",
            name="best",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to="tuning.tuningtrial"),
        ),
        migrations.AddField(
            model_name="tuningrun",
            name="current_trial",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to="tuning.tuningtrial"),
        ),
        migrations.AddConstraint(
            model_name="tuningtrial",
            constraint=models.UniqueConstraint(fields=("run", "number"), name="tuningtrial_unique_number"),
        ),
        migrations.AddConstraint(
            model_name="tuningrun",
            constraint=models.UniqueConstraint(condition=models.Q(("state__in", ["running", "restoring"])), fields=("host",), name="tuningrun_one_open_per_host"),
        ),
    ]
