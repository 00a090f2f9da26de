"""CHAP secrets (a host's, a host group's mutual one) are sealed in the database
(plane.secrets.SealedTextField): widen the columns, then seal the rows that hold them in plain
text (reversible: unsealed again)."""
from django.db import migrations

import plane.secrets

COLUMNS = (("block_host", "chap_secret"), ("block_hostgroup", "mutual_chap_secret"))


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
    _rewrite(schema_editor, plane.secrets.seal)


def unseal_rows(apps, schema_editor):
    _rewrite(schema_editor, plane.secrets.unseal)


class Migration(migrations.Migration):

    dependencies = [
        ("block", "0002_blockexport_allow_any"),
    ]

    operations = [
        migrations.AlterField(
            model_name="host",
            name="chap_secret",
            field=plane.secrets.SealedTextField(blank=True, default=""),
        ),
        migrations.AlterField(
            model_name="hostgroup",
            name="mutual_chap_secret",
            field=plane.secrets.SealedTextField(blank=True, default=""),
        ),
        migrations.RunPython(seal_rows, unseal_rows),
    ]
