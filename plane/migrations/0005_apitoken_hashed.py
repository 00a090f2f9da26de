"""API tokens are kept as SHA-256 digests (plane.tokens): each existing key of DRF's authtoken
table becomes the digest of that same key, so every token in use (credentials.json, scripts)
keeps working; then the clear keys are deleted."""
import hashlib

from django.conf import settings
from django.db import migrations, models
import django.db.models.deletion


def hash_existing_tokens(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("console", "ApiToken")
    for token in Token.objects.all():
        ApiToken.objects.create(user_id=token.user_id, prefix=token.key[:8],
                                digest=hashlib.sha256(token.key.encode()).hexdigest())
        ApiToken.objects.filter(user_id=token.user_id).update(created=token.created)
    Token.objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("authtoken", "0003_tokenproxy"),
        ("console", "0004_iobudgetsetting"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("digest", models.CharField(max_length=64, unique=True)),
                ("prefix", models.CharField(max_length=8)),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("user", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE,
                                              related_name="api_token",
                                              to=settings.AUTH_USER_MODEL)),
            ],
            options={"ordering": ["user__username"]},
        ),
        migrations.RunPython(hash_existing_tokens, migrations.RunPython.noop),
    ]
