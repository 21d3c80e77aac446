"""Users with different grants, and helpers to post admin actions like the changelist form does."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

JOBS_URL = "/admin/django_pgjobs/job/"
DEAD_URL = "/admin/django_pgjobs/deadjob/"


def make_user(username: str, *codenames: str, superuser: bool = False) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True, is_superuser=superuser)
    if codenames:
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="django_pgjobs", codename__in=codenames)
        )
    return user


@pytest.fixture
def admin_user_(db: Any) -> User:
    return make_user("root", superuser=True)


@pytest.fixture
def operator(db: Any) -> User:
    """Can look, operate (retry/cancel/run now), edit and discard."""
    return make_user("ops", "view_job", "change_job", "operate_job", "delete_job")


@pytest.fixture
def viewer(db: Any) -> User:
    return make_user("viewer", "view_job")


@pytest.fixture
def client_for() -> Any:
    def build(user: User, *, csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user)
        return client

    return build


def action(
    client: Client,
    url: str,
    name: str,
    ids: list[int],
    *,
    select_across: bool = False,
    confirm: bool = False,
    query: str = "",
    follow: bool = True,
) -> Any:
    """POST the changelist action form (``index`` present) or its confirmation (``post=yes``)."""
    data: dict[str, Any] = {
        "action": name,
        "_selected_action": [str(i) for i in ids],
        "select_across": "1" if select_across else "0",
    }
    if confirm:
        data["post"] = "yes"
    else:
        data["index"] = "0"
    return client.post(url + query, data, follow=follow)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


@pytest.fixture
def no_wakeups(settings: Any) -> None:
    """Resuming a queue wakes its workers through the process's notifier thread, whose own
    connection lingers a second after the last NOTIFY: at the end of the run it would keep the test
    database from being dropped. The admin tests check the pause table, not the wake-up."""
    settings.PGJOBS = {**getattr(settings, "PGJOBS", {}), "LISTEN": False}
