"""What every custom admin page of ours shares: the admin's context and version-right breadcrumbs.

Django 5.2 and 6.0 render breadcrumbs as ``<div class="breadcrumbs">`` with ``&rsaquo;`` between links;
Django 6.1 made them an ordered list (``<ol class="breadcrumbs">``, one ``<li>`` each, the current
page ``aria-current="page"``) styled by a CSS that no longer knows the ``div``. A page that
overrides ``{% block breadcrumbs %}`` must write the markup of the running version, as each
version's own templates do: ``breadcrumbs.html`` renders :func:`crumbs` either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import django
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse

if TYPE_CHECKING:
    from . import JobAdmin

#: Django >= 6.1 writes breadcrumbs (6.0 still writes the div) as ``<ol class="breadcrumbs">``.
BREADCRUMBS_AS_LIST = django.VERSION >= (6, 1)


def crumbs(
    modeladmin: JobAdmin, model: type[Model] | None = None, *tail: tuple[str, str | None]
) -> list[tuple[str, str | None]]:
    """Home, the app, the model's list, then ``tail``: (label, url) pairs, the last one the page itself
    (its url None)."""
    site = modeladmin.admin_site.name
    opts = (model or modeladmin.model)._meta
    return [
        ("Home", reverse(f"{site}:index")),
        (str(opts.app_config.verbose_name), reverse(f"{site}:app_list", args=[opts.app_label])),
        (
            str(opts.verbose_name_plural).capitalize(),
            reverse(f"{site}:{opts.app_label}_{opts.model_name}_changelist"),
        ),
        *tail,
    ]


def page_context(
    modeladmin: JobAdmin,
    request: HttpRequest,
    title: str,
    breadcrumbs: list[tuple[str, str | None]],
    **extra: Any,
) -> dict[str, Any]:
    """The admin's own context (site header, nav sidebar, user tools) plus ours."""
    opts = modeladmin.model._meta
    request.current_app = modeladmin.admin_site.name
    return {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": opts,
        "app_label": opts.app_label,
        "media": modeladmin.media,
        "pgjobs_breadcrumbs": breadcrumbs,
        "pgjobs_breadcrumbs_as_list": BREADCRUMBS_AS_LIST,
        **extra,
    }
