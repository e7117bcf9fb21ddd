import json
import secrets
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from catalog.demo_data import (
    REFUSED_IN_PRODUCTION,
    REFUSED_REAL_CATALOG,
    DemoDataRefused,
    is_demo_catalog,
    seed_demo_data,
)
from catalog.management.commands.seed_demo_data import NOT_A_WHOLE_NUMBER
from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)
from tests.support import database_url_of_tests, run_manage
from tests.factories import ProjectCardFactory

pytestmark = pytest.mark.django_db

SMALL_CATALOG = {"projects": 40, "objects_per_project": 10, "reset": True, "seed": 42}


def ages_in_days(queryset) -> list[float]:
    now = timezone.now()
    return [(now - updated_at) / timedelta(days=1) for updated_at in queryset.values_list("updated_at", flat=True)]


def count_by_status(model) -> dict[str, int]:
    return {status: model.objects.filter(status=status).count() for status in CardStatus.values}


def test_small_catalog_holds_every_kind_of_card_override_and_rule():
    seed_demo_data(**SMALL_CATALOG)

    for model in (ProjectCard, PropertyObjectCard):
        assert all(count > 0 for count in count_by_status(model).values()), model
        delisted_ages = ages_in_days(model.objects.filter(status=CardStatus.DELISTED))
        assert any(1 <= age <= 20 for age in delisted_ages), f"no recently Delisted {model.__name__}"
        assert any(31 <= age <= 400 for age in delisted_ages), f"no long-Delisted {model.__name__}"
        assert all(age < 15 for age in ages_in_days(model.objects.exclude(status=CardStatus.DELISTED)))

    live_projects = ProjectCard.objects.exclude(status=CardStatus.DELISTED).values("id")
    objects_of_live_projects = PropertyObjectCard.objects.filter(project_id__in=live_projects)
    delisted_ages = ages_in_days(objects_of_live_projects.filter(status=CardStatus.DELISTED))
    assert any(age <= 20 for age in delisted_ages) and any(age >= 31 for age in delisted_ages)

    for model in (PropertyObjectDisplayOverride, BuildingDisplayOverride):
        assert model.objects.filter(is_deleted=False).exists(), f"no live {model.__name__}"
        assert model.objects.filter(is_deleted=True).exists(), f"no soft-deleted {model.__name__}"
    assert DeveloperRankingRule.objects.filter(project_id=None).exists()
    delisted_projects = ProjectCard.objects.filter(status=CardStatus.DELISTED).values("id")
    assert DeveloperRankingRule.objects.filter(project_id__in=delisted_projects).exists()


def test_delisted_projects_have_only_delisted_objects_with_the_projects_moment():
    seed_demo_data(**SMALL_CATALOG)

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*)
              FROM catalog.project_cards AS p
              JOIN catalog.property_object_cards AS o ON o.project_id = p.id
             WHERE p.status = 'Delisted' AND (o.status <> 'Delisted' OR o.updated_at <> p.updated_at)
            """
        )
        assert cursor.fetchone() == (0,)
    assert PropertyObjectCard.objects.filter(project_id__in=ProjectCard.objects.values("id")).count() == 400


def test_summary_counts_match_the_tables():
    summary = seed_demo_data(**SMALL_CATALOG)

    cutoff = timezone.now() - timedelta(days=30)
    assert summary.project_cards == ProjectCard.objects.count() == 40
    assert summary.property_object_cards == PropertyObjectCard.objects.count() == 400
    assert summary.project_cards_by_status == count_by_status(ProjectCard)
    assert summary.property_object_cards_by_status == count_by_status(PropertyObjectCard)
    assert summary.overdue_project_cards == ProjectCard.objects.filter(
        status=CardStatus.DELISTED, updated_at__lt=cutoff
    ).count()
    assert summary.overdue_property_object_cards == PropertyObjectCard.objects.filter(
        status=CardStatus.DELISTED, updated_at__lt=cutoff
    ).count()
    assert summary.property_object_display_overrides == PropertyObjectDisplayOverride.objects.count()
    assert summary.building_display_overrides == BuildingDisplayOverride.objects.count()
    assert summary.ranking_rules == DeveloperRankingRule.objects.count()


def test_the_same_seed_gives_the_same_mix():
    assert seed_demo_data(**SMALL_CATALOG) == seed_demo_data(**SMALL_CATALOG)


def test_reset_empties_a_demo_catalog_first():
    seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)
    seed_demo_data(projects=2, objects_per_project=1, reset=False, seed=None)
    old_projects = set(ProjectCard.objects.values_list("id", flat=True))

    seed_demo_data(projects=3, objects_per_project=2, reset=True, seed=None)

    assert not ProjectCard.objects.filter(id__in=old_projects).exists()
    assert ProjectCard.objects.count() == 3
    assert PropertyObjectCard.objects.count() == 6


def test_an_empty_catalog_and_a_seeded_one_are_demo_catalogs_whose_ids_are_demo_ids():
    assert is_demo_catalog()

    seed_demo_data(projects=20, objects_per_project=3, reset=True, seed=None)

    assert is_demo_catalog()
    ids = [*ProjectCard.objects.values_list("id", "developer_id"), *PropertyObjectCard.objects.values_list("id")]
    assert {uuid.version for row in ids for uuid in row} == {8}  # RFC 9562's custom uuids


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "no reset"])
def test_a_catalog_the_demo_did_not_make_is_refused_and_unchanged(reset):
    real_card = ProjectCardFactory()

    with pytest.raises(DemoDataRefused) as refused:
        seed_demo_data(projects=2, objects_per_project=1, reset=reset, seed=None)

    assert str(refused.value) == REFUSED_REAL_CATALOG.format(database=connection.settings_dict["NAME"])
    assert list(ProjectCard.objects.values_list("id", flat=True)) == [real_card.id]
    assert not PropertyObjectCard.objects.exists()
    assert not is_demo_catalog()


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "no reset"])
def test_production_refuses_demo_data_even_on_an_empty_catalog(settings, reset):
    settings.PRODUCTION = True

    with pytest.raises(DemoDataRefused) as refused:
        seed_demo_data(projects=2, objects_per_project=1, reset=reset, seed=None)

    assert str(refused.value) == REFUSED_IN_PRODUCTION
    assert not ProjectCard.objects.exists()


DEMO_RESET = ("seed_demo_data", "--reset", "--projects", "3", "--objects-per-project", "2")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_make_demo_runs_on_a_fresh_database_and_again_on_one_the_demo_seeded_and_purged():
    for make_demo in ("on an empty catalog", "on the catalog the first make demo left"):
        for command in (DEMO_RESET, ("purge_delisted", "--dry-run"), ("purge_delisted",)):
            completed = run_manage(*command)
            assert completed.returncode == 0, (make_demo, command, completed.stderr)
        overdue = ProjectCard.objects.filter(
            status=CardStatus.DELISTED, updated_at__lt=timezone.now() - timedelta(days=30)
        )
        assert ProjectCard.objects.exists() and not overdue.exists(), make_demo


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_reset_of_a_real_catalog_fails_in_one_line_and_keeps_the_card():
    real_card = ProjectCardFactory()

    refused = run_manage(*DEMO_RESET)

    assert refused.returncode == 1
    assert refused.stdout == ""
    database = database_url_of_tests().rsplit("/", 1)[1]
    assert refused.stderr.strip().splitlines() == [
        f"CommandError: {REFUSED_REAL_CATALOG.format(database=database)}"
    ]
    assert list(ProjectCard.objects.values_list("id", flat=True)) == [real_card.id]


@pytest.mark.slow
def test_the_command_refuses_in_production_in_one_line():
    refused = run_manage(
        "seed_demo_data", "--reset", APP_ENV="production", DJANGO_SECRET_KEY=secrets.token_urlsafe(64)
    )

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [f"CommandError: {REFUSED_IN_PRODUCTION}"]


def test_without_reset_seeding_adds_to_a_demo_catalog():
    seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)
    old_projects = set(ProjectCard.objects.values_list("id", flat=True))

    summary = seed_demo_data(projects=3, objects_per_project=2, reset=False, seed=None)

    assert summary.project_cards == 3
    assert ProjectCard.objects.filter(id__in=old_projects).count() == 2
    assert ProjectCard.objects.count() == 5


# Full-width digits and digit separators are numbers to Python's int(), typos to an operator.
NOT_COUNTS = ["0", "-3", "３", "1_0", "", "ten", "1.5"]


@pytest.mark.parametrize("option", ["--projects", "--objects-per-project"])
@pytest.mark.parametrize("value", NOT_COUNTS)
def test_command_rejects_counts_that_are_not_plain_whole_numbers_of_at_least_one(option, value):
    with pytest.raises(CommandError) as raised:
        call_command("seed_demo_data", option, value)

    assert str(raised.value) == NOT_A_WHOLE_NUMBER.format(
        option=option.removeprefix("--"), expected="a whole number of at least 1", value=value
    )
    assert not ProjectCard.objects.exists()


@pytest.mark.parametrize("value", ["３", "1_0", "", "1.5"])
def test_command_rejects_a_seed_that_is_not_a_plain_whole_number(value):
    with pytest.raises(CommandError) as raised:
        call_command("seed_demo_data", "--seed", value)

    assert str(raised.value) == NOT_A_WHOLE_NUMBER.format(option="seed", expected="a whole number", value=value)
    assert not ProjectCard.objects.exists()


@pytest.mark.slow
def test_a_full_width_count_is_refused_in_one_line_on_the_command_line():
    refused = run_manage("seed_demo_data", "--projects", "３")

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "CommandError: "
        + NOT_A_WHOLE_NUMBER.format(option="projects", expected="a whole number of at least 1", value="３")
    ]


def test_command_json_prints_one_object_on_stdout():
    out = StringIO()

    call_command(
        "seed_demo_data", "--projects", "5", "--objects-per-project", "4", "--reset", "--seed", "1", "--json",
        stdout=out,
    )

    summary = json.loads(out.getvalue())
    assert out.getvalue().count("\n") == 1
    assert summary["project_cards"] == 5
    assert summary["property_object_cards"] == 20
    assert summary["project_cards_by_status"] == count_by_status(ProjectCard)


def test_command_prints_a_human_summary():
    out = StringIO()

    call_command("seed_demo_data", "--projects", "5", "--objects-per-project", "4", stdout=out)

    assert out.getvalue().startswith("Seeded 5 project cards (")
    assert "20 property object cards" in out.getvalue()
