"""`/metrics` for Prometheus, not for the world: with METRICS_BEARER_TOKEN set, a scrape must send
`Authorization: Bearer <token>` (Prometheus: `authorization: {credentials_file: …}` in the scrape config). Without
a token /metrics is open in development and closed in production."""

import hmac
from functools import wraps

from django.conf import settings
from django.http import HttpResponse


def scrape_allowed(request) -> bool:
    token = settings.METRICS_BEARER_TOKEN
    if not token:
        return not settings.PRODUCTION
    offered = request.headers.get("Authorization", "")
    return hmac.compare_digest(offered.encode(), f"Bearer {token}".encode())


def bearer_token_required(view):
    @wraps(view)
    def guarded_view(request, *args, **kwargs):
        if not scrape_allowed(request):
            refused = HttpResponse("401 Unauthorized\n", status=401, content_type="text/plain")
            refused["WWW-Authenticate"] = "Bearer"
            return refused
        return view(request, *args, **kwargs)

    return guarded_view
