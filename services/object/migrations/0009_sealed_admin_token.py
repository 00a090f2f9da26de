"""The S3 gateway's admin token is sealed in the database (plane.secrets.SealedTextField):
widen the column, then seal the row's token (reversible: unsealed again)."""
from django.db import migrations

import plane.secrets


def _rewrite(schema_editor, change) -> None:
    # raw SQL: the field itself would try to unseal the plain value on the way in
    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT id, admin_token FROM object_gateway")
        for pk, value in cur.fetchall():
            if value:
                cur.execute("UPDATE object_gateway SET admin_token = %s WHERE id = %s",
                            [change(value), pk])


def seal_rows(apps, schema_editor):
    _rewrite(schema_editor, plane.secrets.seal)


def unseal_rows(apps, schema_editor):
    _rewrite(schema_editor, plane.secrets.unseal)


class Migration(migrations.Migration):

    dependencies = [
        ("object", "0008_kms_keys"),
    ]

    operations = [
        migrations.AlterField(
            model_name="gateway",
            name="admin_token",
            field=plane.secrets.SealedTextField(),
        ),
        migrations.RunPython(seal_rows, unseal_rows),
    ]
