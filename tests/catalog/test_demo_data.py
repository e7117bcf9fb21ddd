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
    REFUSED_RESET_OF_REAL_CATALOG,
    DemoDataRefused,
    is_demo_catalog,
    seed_demo_data,
)
from catalog.management.commands.seed_demo_data import COUNT_MUST_BE_POSITIVE
from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)
from tests.support import database_url_of_tests, run_manage
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

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
    seed_demo_data(projects=2, objects_per_project=1, reset=False, seed=None)
    old_project = ProjectCardFactory()
    old_object = PropertyObjectCardFactory(project_id=old_project.id)

    seed_demo_data(projects=3, objects_per_project=2, reset=True, seed=None)

    assert not ProjectCard.objects.filter(id=old_project.id).exists()
    assert not PropertyObjectCard.objects.filter(id=old_object.id).exists()
    assert ProjectCard.objects.count() == 3
    assert PropertyObjectCard.objects.count() == 6


def with_cursor(function):
    with connection.cursor() as cursor:
        return function(cursor)


def test_seeding_an_empty_catalog_marks_it_as_a_demo_catalog():
    assert not with_cursor(is_demo_catalog)

    seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)

    assert with_cursor(is_demo_catalog)


def test_reset_refuses_a_catalog_the_demo_did_not_make_and_changes_nothing():
    real_card = ProjectCardFactory()

    with pytest.raises(DemoDataRefused) as refused:
        seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)

    assert str(refused.value) == REFUSED_RESET_OF_REAL_CATALOG.format(database=connection.settings_dict["NAME"])
    assert list(ProjectCard.objects.values_list("id", flat=True)) == [real_card.id]
    assert not with_cursor(is_demo_catalog)


def test_demo_cards_added_to_a_real_catalog_do_not_make_it_a_demo_catalog():
    ProjectCardFactory()
    seed_demo_data(projects=2, objects_per_project=1, reset=False, seed=None)

    with pytest.raises(DemoDataRefused):
        seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)

    assert ProjectCard.objects.count() == 3


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "no reset"])
def test_production_refuses_demo_data_even_on_an_empty_catalog(settings, reset):
    settings.PRODUCTION = True

    with pytest.raises(DemoDataRefused) as refused:
        seed_demo_data(projects=2, objects_per_project=1, reset=reset, seed=None)

    assert str(refused.value) == REFUSED_IN_PRODUCTION
    assert not ProjectCard.objects.exists()


@pytest.fixture
def committed_catalog_unmarked_afterwards(django_db_blocker):
    """For tests whose manage.py processes commit: the conftest empties the tables, this removes the mark."""
    yield
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("COMMENT ON SCHEMA catalog IS NULL")


DEMO_RESET = ("seed_demo_data", "--reset", "--projects", "3", "--objects-per-project", "2")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("committed_catalog_unmarked_afterwards")
def test_make_demo_resets_on_a_fresh_database_and_again_on_a_rerun():
    assert run_manage(*DEMO_RESET).returncode == 0  # an empty catalog: seeded and marked
    rerun = run_manage(*DEMO_RESET)  # the catalog it made

    assert rerun.returncode == 0, rerun.stderr
    assert ProjectCard.objects.count() == 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_reset_of_a_real_catalog_fails_in_one_line_and_keeps_the_card():
    real_card = ProjectCardFactory()

    refused = run_manage(*DEMO_RESET)

    assert refused.returncode == 1
    assert refused.stdout == ""
    database = database_url_of_tests().rsplit("/", 1)[1]
    assert refused.stderr.strip().splitlines() == [
        f"CommandError: {REFUSED_RESET_OF_REAL_CATALOG.format(database=database)}"
    ]
    assert list(ProjectCard.objects.values_list("id", flat=True)) == [real_card.id]


@pytest.mark.slow
def test_the_command_refuses_in_production_in_one_line():
    refused = run_manage(
        "seed_demo_data", "--reset", APP_ENV="production", DJANGO_SECRET_KEY=secrets.token_urlsafe(64)
    )

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [f"CommandError: {REFUSED_IN_PRODUCTION}"]


def test_without_reset_seeding_adds_to_the_catalog():
    old_project = ProjectCardFactory()

    summary = seed_demo_data(projects=3, objects_per_project=2, reset=False, seed=None)

    assert summary.project_cards == 3
    assert ProjectCard.objects.filter(id=old_project.id).exists()
    assert ProjectCard.objects.count() == 4


@pytest.mark.parametrize(
    ("option", "value"), [("--projects", "0"), ("--projects", "-3"), ("--objects-per-project", "0")]
)
def test_command_rejects_counts_below_one(option, value):
    with pytest.raises(CommandError) as raised:
        call_command("seed_demo_data", option, value)

    assert str(raised.value) == COUNT_MUST_BE_POSITIVE.format(option=option.removeprefix("--"), value=value)
    assert not ProjectCard.objects.exists()


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
