from django.db import migrations, models

from serving.purpose import COMPLETIONS, guess_purpose


def mark_base_models(apps, schema_editor):
    """Variants imported before the field: completions where their names mark a base model
    ("Qwen3-8B-Base", "gemma-3-1b-pt"); chat otherwise, the strict gate (serving.purpose)."""
    ModelVariant = apps.get_model("deployments", "ModelVariant")
    for variant in ModelVariant.objects.all().only("pk", "name", "repo_id", "gguf_file"):
        names = [("the file name", variant.gguf_file.rsplit("/", 1)[-1]), ("the repository id", variant.repo_id)]
        if guess_purpose([*names, ("the name", variant.name)]).purpose == COMPLETIONS:
            ModelVariant.objects.filter(pk=variant.pk).update(purpose=COMPLETIONS)


class Migration(migrations.Migration):

    dependencies = [
        ('deployments', '0020_modelvariant_chat_template_tools'),
    ]

    operations = [
        migrations.AddField(
            model_name='modelvariant',
            name='purpose',
            field=models.CharField(
                choices=[('chat', 'Chat (instruction-tuned)'), ('completions', 'Completions (base model)')],
                default='chat',
                max_length=12,
            ),
        ),
        migrations.RunPython(mark_base_models, migrations.RunPython.noop),
    ]
