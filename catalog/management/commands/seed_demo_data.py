"""`manage.py seed_demo_data`: fill the catalog with a realistic mix of cards (see `catalog.demo_data`).

The summary goes to stdout (text, or one JSON object with --json); progress is logged to stderr.
"""

import json
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError

from catalog.demo_data import DemoDataRefused, DemoDataSummary, seed_demo_data
from config.numbers import whole_number

NOT_A_WHOLE_NUMBER = "--{option} must be {expected} in plain digits (0-9), got {value!r}"


class Command(BaseCommand):
    help = (
        "Fill the catalog with demo data: project and property object cards of every status (Delisted long ago "
        "and recently included), display overrides and ranking rules."
    )

    def add_arguments(self, parser):
        # Parsed by handle(), not by argparse's int(): that takes full-width digits and digit separators.
        parser.add_argument("--projects", default="200", help="project cards to add (default 200)")
        parser.add_argument("--objects-per-project", default="50", help="property objects per project (default 50)")
        parser.add_argument(
            "--reset", action="store_true",
            help="empty the five catalog tables first (refused unless every row in them is demo data)",
        )
        parser.add_argument("--seed", help="seed random(): the same seed gives the same mix")
        parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    def handle(self, *args, **options):
        projects = number_option(options, "projects", minimum=1)
        objects_per_project = number_option(options, "objects_per_project", minimum=1)
        seed = None if options["seed"] is None else number_option(options, "seed")
        try:
            summary = seed_demo_data(
                projects=projects, objects_per_project=objects_per_project, reset=options["reset"], seed=seed
            )
        except DemoDataRefused as refused:
            raise CommandError(str(refused)) from None
        if options["json"]:
            self.stdout.write(json.dumps(asdict(summary)))
        else:
            self.stdout.write(describe(summary))


def number_option(options: dict, name: str, *, minimum: int | None = None) -> int:
    """The option's value as a whole number in plain digits, at least `minimum`; else one line (CommandError)."""
    text = str(options[name])  # call_command() passes an int as it is
    try:
        value = whole_number(text)
    except ValueError:
        value = None
    if value is None or (minimum is not None and value < minimum):
        expected = "a whole number" if minimum is None else f"a whole number of at least {minimum}"
        raise CommandError(NOT_A_WHOLE_NUMBER.format(option=name.replace("_", "-"), expected=expected, value=text))
    return value


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
