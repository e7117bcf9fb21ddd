"""The Delisted retention page moved to the catalog's admin (catalog migration 0006): the job's app has no model."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('retention', '0001_delisted_retention_admin_page'),
    ]

    operations = [
        migrations.DeleteModel(
            name='DelistedRetention',
        ),
    ]
