"""Replication peer tokens and backup target secret keys are sealed in the database
(services.protection.fields.SealedTextField): widen the columns, then seal the rows that
hold them in plain text (reversible: unsealed again)."""
from django.db import migrations

import services.protection.fields

COLUMNS = (("protection_replicationpeer", "token"), ("protection_backuptarget", "secret_key"))


def _rewrite(schema_editor, change) -> None:
    # raw SQL: the field itself would try to unseal the plain values on the way in
    with schema_editor.connection.cursor() as cur:
        for table, column in COLUMNS:
            cur.execute(f"SELECT id, {column} FROM {table}")
            for pk, value in cur.fetchall():
                if value:
                    cur.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s",
                                [change(value), pk])


def seal_rows(apps, schema_editor):
    from plane.secrets import seal

    _rewrite(schema_editor, seal)


def unseal_rows(apps, schema_editor):
    from plane.secrets import unseal

    _rewrite(schema_editor, unseal)


class Migration(migrations.Migration):

    dependencies = [
        ("protection", "0004_replication_failback"),
    ]

    operations = [
        migrations.AlterField(
            model_name="backuptarget",
            name="secret_key",
            field=services.protection.fields.SealedTextField(),
        ),
        migrations.AlterField(
            model_name="replicationpeer",
            name="token",
            field=services.protection.fields.SealedTextField(),
        ),
        migrations.RunPython(seal_rows, unseal_rows),
    ]
