"""Each admin action through the Django test client: what changes, what is refused, what is logged."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.utils import timezone

from django_pgjobs.models import Job, Status
from tests.factories import DeadJobFactory, JobFactory

from .conftest import DEAD_URL, JOBS_URL, action, messages_of

pytestmark = pytest.mark.django_db


def test_retry_dead_jobs_back_to_ready_with_fresh_budget_and_history_kept(operator, client_for):
    dead = DeadJobFactory.create_batch(3)
    client = client_for(operator)
    response = action(client, DEAD_URL, "retry_jobs", [j.pk for j in dead])
    assert response.status_code == 200
    assert "Retried 3 jobs." in messages_of(response)
    for job in dead:
        job.refresh_from_db()
        assert job.status == Status.READY
        assert (job.attempts, job.max_attempts) == (5, 10)  # the count kept, a fresh budget on top
        assert job.run_at <= timezone.now()
        assert job.finished_at is None
        assert [e["outcome"] for e in job.history] == ["failed", "retried"]
        assert job.history[-1]["message"] == "retried by ops"
    entry = LogEntry.objects.get()
    assert entry.user == operator
    assert entry.action_flag == CHANGE
    ids = sorted(j.pk for j in dead)
    assert entry.change_message == f"Retried 3 jobs: #{ids[0]}, #{ids[1]}, #{ids[2]}"
    assert entry.object_repr == "3 jobs"


def test_retry_refuses_running_jobs_with_a_message(operator, client_for):
    running = JobFactory(running=True)
    dead = DeadJobFactory()
    client = client_for(operator)
    response = action(client, JOBS_URL, "retry_jobs", [running.pk, dead.pk])
    msgs = messages_of(response)
    assert "Retried 1 job." in msgs
    assert any(m.startswith("1 running job was skipped") for m in msgs)
    running.refresh_from_db()
    assert running.status == Status.RUNNING and running.locked_by == "worker-test" and running.attempts == 1


def test_action_only_on_running_jobs_changes_nothing_and_logs_nothing(operator, client_for):
    running = JobFactory.create_batch(2, running=True)
    client = client_for(operator)
    for name in ("retry_jobs", "run_jobs_now"):
        response = action(client, JOBS_URL, name, [j.pk for j in running])
        assert any("2 running jobs were skipped" in m for m in messages_of(response)), name
    response = action(client, JOBS_URL, "discard_jobs", [j.pk for j in running], confirm=True)
    assert any("2 running jobs were skipped" in m for m in messages_of(response))
    assert Job.objects.filter(status=Status.RUNNING).count() == 2
    assert not LogEntry.objects.exists()


def test_cancel_asks_running_jobs_to_stop_once_and_logs_it(operator, client_for):
    running = JobFactory.create_batch(2, running=True)
    client = client_for(operator)
    response = action(client, JOBS_URL, "cancel_jobs", [j.pk for j in running])
    assert messages_of(response) == [
        "2 running jobs were asked to stop (their workers end them as cancelled)."
    ]
    for job in running:
        stored = Job.objects.get(pk=job.pk)
        assert (stored.status, stored.cancel_requested_by) == ("running", "ops")
        assert stored.cancel_requested_at is not None
    assert LogEntry.objects.get().change_message.startswith("Cancelled 2 jobs:")
    again = action(client, JOBS_URL, "cancel_jobs", [j.pk for j in running])
    assert messages_of(again) == ["2 running jobs were already asked to stop, and left unchanged."]
    assert LogEntry.objects.count() == 1


def test_cancel_waiting_jobs_with_reason(operator, client_for):
    ready = JobFactory()
    delayed = JobFactory(delayed=True)
    done = JobFactory(done=True)
    client = client_for(operator)
    response = action(client, JOBS_URL, "cancel_jobs", [ready.pk, delayed.pk, done.pk])
    msgs = messages_of(response)
    assert "Cancelled 2 jobs." in msgs
    assert "1 job was finished already and was left unchanged." in msgs
    for job in (ready, delayed):
        job.refresh_from_db()
        assert job.status == Status.CANCELLED
        assert job.last_error == "cancelled by ops"
    done.refresh_from_db()
    assert done.status == Status.DONE
    assert LogEntry.objects.get().change_message.startswith("Cancelled 2 jobs:")


def test_run_now_makes_delayed_jobs_due(operator, client_for):
    delayed = JobFactory(delayed=True)
    client = client_for(operator)
    response = action(client, JOBS_URL, "run_jobs_now", [delayed.pk])
    assert "Ran now 1 job." in messages_of(response)
    delayed.refresh_from_db()
    assert delayed.status == Status.READY and delayed.run_at <= timezone.now()
    entry = LogEntry.objects.get()
    assert entry.object_id == str(delayed.pk) and entry.object_repr == f"job #{delayed.pk}"


def test_discard_shows_a_confirmation_page_then_deletes_through_the_manager(operator, client_for):
    dead = DeadJobFactory.create_batch(2)
    running = JobFactory(running=True)
    ids = [j.pk for j in dead] + [running.pk]
    client = client_for(operator)
    page = action(client, JOBS_URL, "discard_jobs", ids)
    assert page.status_code == 200
    assert page.templates[0].name == "admin/django_pgjobs/action_confirmation.html"
    html = page.content.decode()
    assert 'id="pgjobs-confirm-count">3<' in html
    assert "1 of them is running and will be skipped" in html
    assert Job.objects.count() == 3  # nothing deleted yet

    response = action(client, JOBS_URL, "discard_jobs", ids, confirm=True)
    msgs = messages_of(response)
    assert "Discarded 2 jobs." in msgs
    assert any("1 running job was skipped" in m for m in msgs)
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]
    entry = LogEntry.objects.get()
    assert entry.action_flag == DELETION and entry.change_message.startswith("Discarded 2 jobs:")


def test_django_delete_selected_is_not_offered(admin_user_, client_for):
    client = client_for(admin_user_)
    response = client.get(JOBS_URL)
    choices = [c[0] for c in response.context["action_form"].fields["action"].choices]
    assert "delete_selected" not in choices
    assert {"retry_jobs", "cancel_jobs", "run_jobs_now", "discard_jobs"} <= set(choices)
    response = client.get(DEAD_URL)
    choices = [c[0] for c in response.context["action_form"].fields["action"].choices]
    assert set(choices) - {""} == {"retry_jobs", "discard_jobs"}


def test_select_across_confirms_with_n_then_applies_to_the_filtered_set_only(operator, client_for):
    mail = DeadJobFactory.create_batch(4, queue="mail")
    other = DeadJobFactory.create_batch(2, queue="other")
    client = client_for(operator)
    page = action(client, DEAD_URL, "retry_jobs", [mail[0].pk], select_across=True, query="?queue=mail")
    assert 'id="pgjobs-confirm-count">4<' in page.content.decode()
    assert "matching the current filter" in page.content.decode()
    assert Job.objects.filter(status=Status.DEAD).count() == 6

    response = action(
        client, DEAD_URL, "retry_jobs", [mail[0].pk], select_across=True, confirm=True, query="?queue=mail"
    )
    assert "Retried 4 jobs." in messages_of(response)
    assert set(Job.objects.filter(status=Status.READY).values_list("pk", flat=True)) == {j.pk for j in mail}
    assert set(Job.objects.filter(status=Status.DEAD).values_list("pk", flat=True)) == {j.pk for j in other}


def test_dead_letters_list_only_dead_jobs_newest_failure_first(operator, client_for):
    now = timezone.now()
    old = DeadJobFactory(finished_at=now - dt.timedelta(hours=2))
    new = DeadJobFactory(finished_at=now)
    JobFactory()
    JobFactory(done=True)
    response = client_for(operator).get(DEAD_URL)
    assert [j.pk for j in response.context["cl"].result_list] == [new.pk, old.pk]


def test_jobs_list_columns_filters_and_search(operator, client_for):
    JobFactory(task="billing.send_receipt", queue="mail", idempotency_key="invoice:1842")
    dead = DeadJobFactory(
        task="billing.charge", queue="payments", last_error="CardDeclined: insufficient funds"
    )
    client = client_for(operator)
    response = client.get(JOBS_URL)
    html = response.content.decode()
    for heading in ("Task", "Queue", "Status", "Priority", "Attempts", "Run at", "Age", "Last error"):
        assert heading in html
    assert "5/5" in html and "CardDeclined: insufficient funds" in html
    assert response.context["cl"].result_list[0].pk == dead.pk  # newest first

    def found(query: str) -> list[str]:
        return [j.task for j in client.get(JOBS_URL + query).context["cl"].result_list]

    assert found("?q=invoice:1842") == ["billing.send_receipt"]
    assert found(f"?q={dead.pk}") == ["billing.charge"]
    assert found("?q=insufficient") == ["billing.charge"]
    assert found("?q=send_receipt") == ["billing.send_receipt"]
    assert found("?status__exact=dead") == ["billing.charge"]
    assert found("?queue=mail") == ["billing.send_receipt"]
    assert found("?task=billing.charge") == ["billing.charge"]
    filters = response.context["cl"].filter_specs
    queues = [c["display"] for c in filters[1].choices(response.context["cl"])][1:]
    # The jobs' queues and the registered handlers' (no index lists every row's: see distinct_values).
    assert {"mail", "payments", "default", "sig"} <= set(queues) and queues == sorted(queues)
    tasks = [c["display"] for c in filters[2].choices(response.context["cl"])][1:]
    assert {"billing.charge", "billing.send_receipt", "tests.echo"} <= set(tasks)


def test_filter_values_include_old_jobs_only_through_the_newest_sample(operator, client_for, monkeypatch):
    from django_pgjobs.admin import views

    JobFactory(task="old.task", queue="old-queue", done=True)
    JobFactory(task="new.task", queue="new-queue", done=True)
    assert {"old-queue", "new-queue"} <= set(views.distinct_values("queue", "default"))
    monkeypatch.setattr(views, "FILTER_SAMPLE_ROWS", 1)  # only the newest job is sampled
    assert "new.task" in views.distinct_values("task", "default")
    assert "old.task" not in views.distinct_values("task", "default")
    # Still filterable by URL, and then listed.
    response = client_for(operator).get(JOBS_URL, {"task": "old.task"})
    assert [j.task for j in response.context["cl"].result_list] == ["old.task"]
    choices = [c["display"] for c in response.context["cl"].filter_specs[2].choices(response.context["cl"])]
    assert "old.task" in choices


def test_search_with_a_unicode_digit_is_not_an_error(operator, client_for):
    JobFactory(task="billing.charge")
    response = client_for(operator).get(JOBS_URL, {"q": "²"})  # "²".isdigit() is True, int() refuses it
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


@pytest.mark.parametrize("url", [JOBS_URL, DEAD_URL])
@pytest.mark.parametrize("param", ["q", "queue", "task", "status__exact", "lease"])
def test_a_nul_in_a_list_parameter_redirects_with_the_error_flag(operator, client_for, url, param):
    """PostgreSQL text cannot hold NUL: psycopg would raise DataError (a 500)."""
    DeadJobFactory()
    response = client_for(operator).get(url, {param: "a\x00b"})
    assert response.status_code == 302
    assert response["Location"] == f"{url}?e=1"


def test_discard_reports_a_job_a_worker_claimed_meanwhile(operator, client_for, monkeypatch):
    """Read as ready, claimed before the DELETE: the message must read correctly (it said "was not
    not running")."""
    # Due before the test transaction began (the claim compares run_at with now()).
    job = JobFactory(run_at=timezone.now() - dt.timedelta(minutes=1))
    real_discard = Job.objects.discard

    def claim_then_discard(ids: list[int], **kwargs: Any) -> list[int]:
        # A real worker claim through the manager (the only job in the table), not a mock.
        assert [j.id for j in Job.objects.claim(None, "w-race")] == [job.pk]
        return real_discard(ids, **kwargs)

    monkeypatch.setattr(Job.objects, "discard", claim_then_discard)
    response = action(client_for(operator), JOBS_URL, "discard_jobs", [job.pk], confirm=True)
    assert messages_of(response) == ["1 job was running or already gone by then and was left unchanged."]
    assert Job.objects.get(pk=job.pk).status == Status.RUNNING
    assert not LogEntry.objects.exists()
