"""URLs to include in a project: ``path("pgjobs/", include("django_pgjobs.urls"))``.

Serves ``pgjobs/metrics`` (Prometheus; see :mod:`django_pgjobs.metrics_view` for who may read it).
"""

from django.urls import path

from . import metrics_view

app_name = "django_pgjobs"

urlpatterns = [path("metrics", metrics_view.metrics, name="metrics")]
