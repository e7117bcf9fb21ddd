from catalog.models import ProjectCard


class DelistedRetention(ProjectCard):
    """No table and no data of its own: the Django admin lists pages by model, and this proxy gives the
    "Delisted retention" backlog page (retention/admin.py) its place in the admin index."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = "Delisted retention"
