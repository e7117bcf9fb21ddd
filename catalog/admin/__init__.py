"""The catalog's admin, all of it read-only: the card and override lists (cards) and the Delisted retention page
(retention_page), which shows staff what waits for the retention job."""

from catalog.admin import cards, retention_page  # noqa: F401  (each registers its pages)
