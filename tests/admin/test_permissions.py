"""Who may do what: view-only staff look but cannot act; each action needs its own grant; CSRF."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from django_pgjobs.models import Job, Status
from tests.factories import DeadJobFactory, JobFactory

from .conftest import DEAD_URL, JOBS_URL, action, make_user, messages_of

pytestmark = pytest.mark.django_db


def action_choices(response) -> set[str]:
    return {c[0] for c in response.context["action_form"].fields["action"].choices} - {""}


def test_view_only_user_sees_lists_and_pages_but_no_actions(viewer, client_for):
    dead = DeadJobFactory()
    client = client_for(viewer)
    for url in (JOBS_URL, DEAD_URL):
        response = client.get(url)
        assert response.status_code == 200
        assert response.context["action_form"] is None or not action_choices(response)
    page = client.get(f"{JOBS_URL}{dead.pk}/change/")
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert "<textarea" not in page.content.decode()  # read-only
    assert client.get(f"{JOBS_URL}overview/").status_code == 200


def test_view_only_user_cannot_act_by_posting(viewer, client_for):
    dead = DeadJobFactory()
    ready = JobFactory()
    client = client_for(viewer)
    for name, url, job in (
        ("retry_jobs", DEAD_URL, dead),
        ("cancel_jobs", JOBS_URL, ready),
        ("run_jobs_now", JOBS_URL, ready),
    ):
        action(client, url, name, [job.pk])
        action(client, url, name, [job.pk], confirm=True)
    action(client, JOBS_URL, "discard_jobs", [dead.pk], confirm=True)
    dead.refresh_from_db()
    ready.refresh_from_db()
    assert dead.status == Status.DEAD and ready.status == Status.READY
    assert Job.objects.count() == 2
    # Editing and deleting through the job page are refused too.
    response = client.post(f"{JOBS_URL}{ready.pk}/change/", {"queue": "x", "priority": 1})
    assert response.status_code == 403
    assert client.post(f"{JOBS_URL}{dead.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.get(pk=ready.pk).queue == "default"
    assert not LogEntry.objects.exists()


def test_operate_permission_is_needed_for_retry_cancel_run_now(client_for):
    editor = make_user("editor", "view_job", "change_job", "delete_job")
    client = client_for(editor)
    assert action_choices(client.get(JOBS_URL)) == {"discard_jobs"}
    dead = DeadJobFactory()
    action(client, DEAD_URL, "retry_jobs", [dead.pk])
    assert Job.objects.get(pk=dead.pk).status == Status.DEAD

    operator_only = make_user("op2", "view_job", "operate_job")
    assert action_choices(client_for(operator_only).get(JOBS_URL)) == {
        "retry_jobs",
        "cancel_jobs",
        "run_jobs_now",
    }


def test_delete_permission_is_needed_for_discard(client_for):
    op = make_user("op3", "view_job", "operate_job")
    dead = DeadJobFactory()
    client = client_for(op)
    response = action(client, DEAD_URL, "discard_jobs", [dead.pk], confirm=True)
    assert "No action selected." in messages_of(response)
    assert Job.objects.filter(pk=dead.pk).exists()


def test_csrf_is_enforced_on_actions(operator, client_for):
    dead = DeadJobFactory()
    client = client_for(operator, csrf=True)
    response = action(client, DEAD_URL, "retry_jobs", [dead.pk], follow=False)
    assert response.status_code == 403
    assert Job.objects.get(pk=dead.pk).status == Status.DEAD
    # With the token from the page, the same post works.
    page = client.get(DEAD_URL)
    token = (
        page.cookies["csrftoken"].value if "csrftoken" in page.cookies else client.cookies["csrftoken"].value
    )
    response = client.post(
        DEAD_URL,
        {
            "action": "retry_jobs",
            "_selected_action": [str(dead.pk)],
            "index": "0",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert Job.objects.get(pk=dead.pk).status == Status.READY


def test_dead_letters_use_the_job_grants_and_nobody_adds_jobs(viewer, admin_user_, client_for):
    assert client_for(viewer).get(DEAD_URL).status_code == 200
    assert client_for(admin_user_).get(f"{JOBS_URL}add/").status_code == 403
    nobody = make_user("nobody")
    assert client_for(nobody).get(DEAD_URL).status_code == 403
