"""``GET /pgjobs/metrics``: who may read the metrics (``PGJOBS["METRICS_AUTH"]``) and the response.

Kept apart from :mod:`django_pgjobs.metrics` so that ``django_pgjobs.urls`` imports without
``prometheus_client``: the view then answers 501 saying which extra to install (and the system check
``django_pgjobs.E009`` says it at start-up), instead of the whole URLconf failing to import.
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from .conf import get_settings


def token_matches(request: HttpRequest, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time. An empty configured token
    matches nothing (``Bearer`` with nothing after it must not open the door)."""
    if not token:
        return False
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def is_staff(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)  # None without AuthenticationMiddleware
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def allowed(request: HttpRequest) -> bool:
    s = get_settings()
    if s.METRICS_AUTH in ("token", "staff_or_token") and token_matches(request, s.METRICS_TOKEN):
        return True
    return s.METRICS_AUTH in ("staff", "staff_or_token") and is_staff(request)


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of :mod:`django_pgjobs.metrics`; 403 unless allowed."""
    if not allowed(request):
        return HttpResponse("403 Forbidden: see PGJOBS METRICS_AUTH\n", status=403, content_type="text/plain")
    try:
        from .metrics import exposition
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("prometheus_client"):
            raise
        return HttpResponse(
            "501 Not Implemented: the metrics need prometheus_client; pip install 'django-pgjobs[metrics]'\n",
            status=501,
            content_type="text/plain",
        )
    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)
