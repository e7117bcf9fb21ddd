# Model state only: the models are unmanaged, the tables come from 0001 (SQL).

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('catalog', '0001_catalog_schema'),
    ]

    operations = [
        migrations.CreateModel(
            name='BuildingDisplayOverride',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('project_id', models.UUIDField()),
                ('building_code', models.TextField(blank=True, default='')),
                ('field', models.TextField()),
                ('value', models.JSONField(blank=True, null=True)),
                ('is_deleted', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'db_table': '"catalog"."building_display_overrides"',
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='DeveloperRankingRule',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('developer_id', models.UUIDField()),
                ('project_id', models.UUIDField(blank=True, null=True)),
                ('weight', models.IntegerField(default=0)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'db_table': '"catalog"."ranking_rules"',
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='ProjectCard',
            fields=[
                ('id', models.UUIDField(primary_key=True, serialize=False)),
                ('developer_id', models.UUIDField()),
                ('title', models.TextField()),
                ('status', models.TextField(choices=[('Published', 'Published'), ('Hidden', 'Hidden'), ('Delisted', 'Delisted')])),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'db_table': '"catalog"."project_cards"',
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='PropertyObjectCard',
            fields=[
                ('id', models.UUIDField(primary_key=True, serialize=False)),
                ('project_id', models.UUIDField()),
                ('title', models.TextField()),
                ('status', models.TextField(choices=[('Published', 'Published'), ('Hidden', 'Hidden'), ('Delisted', 'Delisted')])),
                ('price', models.DecimalField(blank=True, decimal_places=2, max_digits=20, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'db_table': '"catalog"."property_object_cards"',
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='PropertyObjectDisplayOverride',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('property_object_id', models.UUIDField()),
                ('field', models.TextField()),
                ('value', models.JSONField(blank=True, null=True)),
                ('is_deleted', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'db_table': '"catalog"."property_object_display_overrides"',
                'managed': False,
            },
        ),
    ]
