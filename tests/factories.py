"""factory-boy factories for the catalog models (all unmanaged, schema `catalog`)."""

import uuid
from datetime import timedelta

import factory
from django.utils import timezone

from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)


class ProjectCardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ProjectCard

    id = factory.LazyFunction(uuid.uuid4)
    developer_id = factory.LazyFunction(uuid.uuid4)
    title = factory.Sequence(lambda n: f"Residential complex {n}")
    status = CardStatus.PUBLISHED
    updated_at = factory.LazyFunction(timezone.now)

    class Params:
        long_delisted = factory.Trait(
            status=CardStatus.DELISTED,
            updated_at=factory.LazyFunction(lambda: timezone.now() - timedelta(days=45)),
        )


class PropertyObjectCardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PropertyObjectCard

    id = factory.LazyFunction(uuid.uuid4)
    project_id = factory.LazyAttribute(lambda _: ProjectCardFactory().id)
    title = factory.Sequence(lambda n: f"Flat {n}")
    status = CardStatus.PUBLISHED
    price = factory.Faker("pydecimal", left_digits=8, right_digits=2, positive=True)
    updated_at = factory.LazyFunction(timezone.now)

    class Params:
        long_delisted = factory.Trait(
            status=CardStatus.DELISTED,
            updated_at=factory.LazyFunction(lambda: timezone.now() - timedelta(days=45)),
        )


class PropertyObjectDisplayOverrideFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PropertyObjectDisplayOverride

    property_object_id = factory.LazyAttribute(lambda _: PropertyObjectCardFactory().id)
    field = factory.Iterator(["title", "price", "floor_plan"])
    value = factory.Faker("pydict", nb_elements=2, value_types=[str, int])
    is_deleted = False


class BuildingDisplayOverrideFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = BuildingDisplayOverride

    project_id = factory.LazyAttribute(lambda _: ProjectCardFactory().id)
    building_code = factory.Sequence(lambda n: f"B{n}")
    field = factory.Iterator(["name", "completion_quarter"])
    value = factory.Faker("pydict", nb_elements=2, value_types=[str, int])
    is_deleted = False


class DeveloperRankingRuleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeveloperRankingRule

    developer_id = factory.LazyFunction(uuid.uuid4)
    project_id = None
    weight = factory.Faker("pyint", min_value=-100, max_value=100)
