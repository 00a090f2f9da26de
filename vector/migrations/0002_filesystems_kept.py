"""A collection's file system is kept by the vector service: marked so (also those made
before), and its deletion refused with a 409 while the collection is there."""

import vector.models
from django.db import migrations, models


def mark_kept(apps, schema_editor):
    FileSystem = apps.get_model("storage", "FileSystem")
    FileSystem.objects.filter(vector_collection__isnull=False, kept_by="").update(
        kept_by="vector")


class Migration(migrations.Migration):

    dependencies = [
        ('storage', '0003_filesystem_kept_by'),
        ('vector', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='vectorcollection',
            name='filesystem',
            field=models.OneToOneField(on_delete=vector.models.refuse_filesystem_delete, related_name='vector_collection', to='storage.filesystem'),
        ),
        migrations.RunPython(mark_kept, migrations.RunPython.noop),
    ]
