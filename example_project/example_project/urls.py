from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # /pgjobs/metrics for Prometheus (pip install 'django-pgjobs[metrics]'; PGJOBS METRICS_AUTH)
    path("pgjobs/", include("django_pgjobs.urls")),
]
