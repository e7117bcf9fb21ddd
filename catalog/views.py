"""Public read endpoints. Only Published cards are visible: Hidden, Delisted and unknown ids answer 404,
which is how favorites and selections in other services learn that a card is gone."""

from django.http import Http404, JsonResponse
from django.views.decorators.http import require_safe

from catalog.models import CardStatus, ProjectCard, PropertyObjectCard


def published_or_404(model, card_id):
    card = model.objects.filter(id=card_id, status=CardStatus.PUBLISHED).first()
    if card is None:
        raise Http404("No such card")
    return card


@require_safe
def property_object_detail(request, card_id):
    card = published_or_404(PropertyObjectCard, card_id)
    return JsonResponse(
        {
            "id": str(card.id),
            "project_id": str(card.project_id),
            "title": card.title,
            "status": card.status,
            "price": None if card.price is None else str(card.price),
            "updated_at": card.updated_at.isoformat(),
        }
    )


@require_safe
def project_detail(request, card_id):
    card = published_or_404(ProjectCard, card_id)
    return JsonResponse(
        {
            "id": str(card.id),
            "developer_id": str(card.developer_id),
            "title": card.title,
            "status": card.status,
            "updated_at": card.updated_at.isoformat(),
        }
    )
