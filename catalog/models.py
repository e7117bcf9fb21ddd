"""Unmanaged models of schema `catalog`; the DDL lives in migration 0001 (SQL)."""

from django.db import models


class CardStatus(models.TextChoices):
    PUBLISHED = "Published"
    HIDDEN = "Hidden"
    DELISTED = "Delisted"


class ProjectCard(models.Model):
    id = models.UUIDField(primary_key=True)
    developer_id = models.UUIDField()
    title = models.TextField()
    status = models.TextField(choices=CardStatus.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = '"catalog"."project_cards"'

    def __str__(self):
        return f"project {self.id} ({self.status})"


class PropertyObjectCard(models.Model):
    id = models.UUIDField(primary_key=True)
    # A logical reference with no foreign key (INV-2, docs/contract.md): no ORM relation, so no cascade collector
    # either.
    project_id = models.UUIDField()
    title = models.TextField()
    status = models.TextField(choices=CardStatus.choices)
    price = models.DecimalField(max_digits=20, decimal_places=2, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = '"catalog"."property_object_cards"'

    def __str__(self):
        return f"property object {self.id} ({self.status})"


class PropertyObjectDisplayOverride(models.Model):
    id = models.BigAutoField(primary_key=True)
    property_object_id = models.UUIDField()
    field = models.TextField()
    value = models.JSONField(null=True, blank=True)
    is_deleted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        managed = False
        db_table = '"catalog"."property_object_display_overrides"'

    def __str__(self):
        return f"override {self.id} of property object {self.property_object_id}"


class BuildingDisplayOverride(models.Model):
    id = models.BigAutoField(primary_key=True)
    project_id = models.UUIDField()
    building_code = models.TextField(blank=True, default="")
    field = models.TextField()
    value = models.JSONField(null=True, blank=True)
    is_deleted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        managed = False
        db_table = '"catalog"."building_display_overrides"'

    def __str__(self):
        return f"building override {self.id} of project {self.project_id}"


class DeveloperRankingRule(models.Model):
    id = models.BigAutoField(primary_key=True)
    developer_id = models.UUIDField()
    project_id = models.UUIDField(null=True, blank=True)
    weight = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        managed = False
        db_table = '"catalog"."ranking_rules"'

    def __str__(self):
        return f"ranking rule {self.id} of developer {self.developer_id}"


class DelistedRetention(ProjectCard):
    """No table and no data of its own: the Django admin lists pages by model, and this proxy gives the
    "Delisted retention" backlog page (catalog/admin/retention_page.py) its place in the admin index."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = "Delisted retention"
