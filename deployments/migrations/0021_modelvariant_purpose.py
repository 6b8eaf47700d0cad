import re

from django.db import migrations, models

# A frozen copy of serving.purpose's name rule as it stood for this migration (its marker tokens and
# how a name splits into tokens), so a later change to the live rule never changes what it did.
_TUNED = frozenset({"it", "instruct", "instruction", "chat", "sft", "rlhf", "dpo"})
_BASE = frozenset({"base", "pt", "pretrained", "pretrain"})


def _names_a_base_model(names: list[str]) -> bool:
    """The first name whose tokens mark anything marks a base model (an instruction tune's counts first)."""
    for name in names:
        tokens = re.split(r"[^a-z0-9]+", (name or "").casefold())
        if any(token in _TUNED for token in tokens):
            return False
        if any(token in _BASE for token in tokens):
            return True
    return False


def mark_base_models(apps, schema_editor):
    """Variants imported before the field: completions where their names mark a base model
    ("Qwen3-8B-Base", "gemma-3-1b-pt"), or where the old agent's switch found one: its test chat was
    answered with the question itself, and it served with a warning (`chat_warning` in the operation's
    result), where the new gate would fail the chat and the host's restore or a rollback to it would
    serve nothing. Chat otherwise, the strict gate (serving.purpose)."""
    ModelVariant = apps.get_model("deployments", "ModelVariant")
    Operation = apps.get_model("deployments", "Operation")
    for variant in ModelVariant.objects.all().only("pk", "name", "repo_id", "gguf_file"):
        names = [variant.gguf_file.rsplit("/", 1)[-1], variant.repo_id, variant.name]
        if _names_a_base_model(names):
            ModelVariant.objects.filter(pk=variant.pk).update(purpose="completions")
    warned = Operation.objects.filter(result__has_key="chat_warning", revision__isnull=False)
    ModelVariant.objects.filter(pk__in=warned.values("revision__model_variant_id")).update(purpose="completions")


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
