"""A host's DH-HMAC-CHAP key for NVMe-oF (sealed in the database like the CHAP secrets)."""
from django.db import migrations

import plane.secrets


class Migration(migrations.Migration):

    dependencies = [
        ("block", "0003_sealed_chap_secrets"),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="dhchap_key",
            field=plane.secrets.SealedTextField(blank=True, default=""),
        ),
    ]
