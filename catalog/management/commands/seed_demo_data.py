"""`manage.py seed_demo_data`: fill the catalog with a realistic mix of cards (see `catalog.demo_data`).

The summary goes to stdout (text, or one JSON object with --json); progress is logged to stderr.
"""

import json
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError

from catalog.demo_data import DemoDataRefused, DemoDataSummary, seed_demo_data

COUNT_MUST_BE_POSITIVE = "--{option} must be a whole number of at least 1, got {value}"


class Command(BaseCommand):
    help = (
        "Fill the catalog with demo data: project and property object cards of every status (Delisted long ago "
        "and recently included), display overrides and ranking rules."
    )

    def add_arguments(self, parser):
        parser.add_argument("--projects", type=int, default=200, help="project cards to add (default 200)")
        parser.add_argument(
            "--objects-per-project", type=int, default=50, help="property objects per project (default 50)"
        )
        parser.add_argument(
            "--reset", action="store_true",
            help="empty the five catalog tables first (only an empty catalog or one this command made)",
        )
        parser.add_argument("--seed", type=int, help="seed random(): the same seed gives the same mix")
        parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    def handle(self, *args, **options):
        for option in ("projects", "objects_per_project"):
            if options[option] < 1:
                raise CommandError(
                    COUNT_MUST_BE_POSITIVE.format(option=option.replace("_", "-"), value=options[option])
                )
        try:
            summary = seed_demo_data(
                projects=options["projects"],
                objects_per_project=options["objects_per_project"],
                reset=options["reset"],
                seed=options["seed"],
            )
        except DemoDataRefused as refused:
            raise CommandError(str(refused)) from None
        if options["json"]:
            self.stdout.write(json.dumps(asdict(summary)))
        else:
            self.stdout.write(describe(summary))


def describe(summary: DemoDataSummary) -> str:
    def statuses(by_status: dict[str, int]) -> str:
        return ", ".join(f"{count} {status}" for status, count in by_status.items())

    return "\n".join(
        [
            f"Seeded {summary.project_cards} project cards ({statuses(summary.project_cards_by_status)}; "
            f"{summary.overdue_project_cards} overdue),",
            f"{summary.property_object_cards} property object cards "
            f"({statuses(summary.property_object_cards_by_status)}; "
            f"{summary.overdue_property_object_cards} overdue),",
            f"{summary.property_object_display_overrides} property object display overrides, "
            f"{summary.building_display_overrides} building display overrides, "
            f"{summary.ranking_rules} ranking rules.",
            "Overdue: Delisted longer than the retention period, what purge_delisted deletes on its next run.",
        ]
    )
