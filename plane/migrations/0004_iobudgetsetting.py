import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    """IOBudgetSetting moves from the tiering app to the plane's kernel; its table stays."""

    dependencies = [
        ("console", "0003_job_bytes"),
        ("tiering", "0002_tiermove_tag"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name="IOBudgetSetting",
                fields=[
                    ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                               serialize=False, verbose_name="ID")),
                    ("rate_mbps", models.PositiveIntegerField(default=0)),
                    ("burst_mb", models.PositiveIntegerField(default=0)),
                    ("class_rates_mbps", models.JSONField(blank=True, default=dict)),
                    ("foreground_share", models.FloatField(default=0.1, validators=[
                        django.core.validators.MinValueValidator(0.0),
                        django.core.validators.MaxValueValidator(1.0)])),
                    ("updated_at", models.DateTimeField(auto_now=True)),
                ],
                options={"db_table": "tiering_iobudgetsetting"},
            ),
        ]),
    ]
