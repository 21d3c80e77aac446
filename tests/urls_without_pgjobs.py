"""A URLconf that does not include django_pgjobs.urls (for the metrics system check)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
