"""The Delisted retention page's place in the admin index, moved here from the retention app with the page (a proxy
model: no table, nothing in the database but its content type)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0005_projects_with_property_objects'),
    ]

    operations = [
        migrations.CreateModel(
            name='DelistedRetention',
            fields=[
            ],
            options={
                'verbose_name': 'Delisted retention',
                'verbose_name_plural': 'Delisted retention',
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('catalog.projectcard',),
        ),
    ]
