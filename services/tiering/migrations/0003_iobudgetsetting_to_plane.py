from django.db import migrations


class Migration(migrations.Migration):
    """IOBudgetSetting now belongs to the plane's kernel (same table); only the state moves."""

    dependencies = [
        ("tiering", "0002_tiermove_tag"),
        ("console", "0004_iobudgetsetting"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.DeleteModel(name="IOBudgetSetting"),
        ]),
    ]
