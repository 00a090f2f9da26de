from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('nodes', '0003_node_floating_address'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='fenced_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
