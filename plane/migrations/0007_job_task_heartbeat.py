from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('console', '0006_job_node'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='task',
            field=models.CharField(blank=True, default='', max_length=128),
        ),
        migrations.AddField(
            model_name='job',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
