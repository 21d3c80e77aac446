"""``/pgjobs/metrics``: who may read it, what it says (parsed as Prometheus parses it), its settings
and system checks."""

from __future__ import annotations

import sys

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

# The metrics extra (tox and the bootstrap install it); without it the rest of the suite still runs.
pytest.importorskip("prometheus_client", reason="pip install 'django-pgjobs[metrics]'")
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from django_pgjobs import queue_control
from django_pgjobs.checks import check_pgjobs
from django_pgjobs.conf import get_settings
from tests import settings as test_settings
from tests.factories import JobFactory
from tests.test_stats import ago, worker

URL = "/pgjobs/metrics"
TOKEN = "s3cret-token-for-tests"


def pgjobs(**extra: object) -> dict:
    return {**test_settings.PGJOBS, **extra}


def token_auth(scheme: str = "token") -> override_settings:
    return override_settings(PGJOBS=pgjobs(METRICS_AUTH=scheme, METRICS_TOKEN=TOKEN))


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def staff_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("staff", password="pw", is_staff=True))
    return client


@pytest.fixture
def user_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("user", password="pw"))
    return client


def samples(response) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, by metric name and sorted labels, as Prometheus's own parser reads them."""
    assert response.status_code == 200, response.content
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# -- who may read it --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_is_refused_by_default(client):
    assert client.get(URL).status_code == 403


def test_staff_session_by_default(staff_client):
    response = staff_client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST


def test_logged_in_non_staff_is_refused(user_client):
    assert user_client.get(URL).status_code == 403


def test_inactive_staff_is_refused(staff_client):
    User.objects.filter(username="staff").update(is_active=False)
    assert staff_client.get(URL).status_code == 403


@pytest.mark.django_db
def test_token(client):
    with token_auth():
        assert client.get(URL).status_code == 403
        assert client.get(URL, **bearer("wrong")).status_code == 403
        assert client.get(URL, **bearer(TOKEN[:-1])).status_code == 403
        assert client.get(URL, HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 403
        assert client.get(URL, **bearer(TOKEN)).status_code == 200
        assert client.get(URL, HTTP_AUTHORIZATION=f"bearer {TOKEN}").status_code == 200


def test_token_scheme_refuses_staff_sessions(staff_client):
    with token_auth():
        assert staff_client.get(URL).status_code == 403


def test_staff_or_token(staff_client, user_client, client):
    with token_auth("staff_or_token"):
        assert staff_client.get(URL).status_code == 200
        assert client.get(URL, **bearer(TOKEN)).status_code == 200
        assert user_client.get(URL).status_code == 403
        assert client.get(URL, **bearer("wrong")).status_code == 403


@pytest.mark.django_db
def test_an_empty_token_opens_nothing(client):
    with override_settings(PGJOBS=pgjobs(METRICS_AUTH="token", METRICS_TOKEN="")):
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 403
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer").status_code == 403


def test_only_get_and_head(staff_client):
    assert staff_client.post(URL).status_code == 405
    assert staff_client.head(URL).status_code == 200


# -- what it says ------------------------------------------------------------------------------------


def test_metrics_content(staff_client):
    JobFactory.create_batch(2, queue="mail", run_at=ago(100))
    JobFactory(queue="mail", delayed=True)
    JobFactory(queue="mail", running=True)
    JobFactory(queue="mail", done=True, finished_at=ago(10))
    JobFactory(queue="mail", done=True, finished_at=ago(1200))
    JobFactory(queue="mail", dead=True, finished_at=ago(1800))
    JobFactory(queue="mail", done=True, finished_at=ago(3 * 3600))  # outside every window
    queue_control.pause("reports", by="tester")
    worker("all", [], in_flight=3)
    worker("mailer", ["mail"])
    worker("gone", ["mail"], live=False)

    got = samples(staff_client.get(URL))

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert value("pgjobs_jobs", queue="mail", state="ready") == 2
    assert value("pgjobs_jobs", queue="mail", state="scheduled") == 1
    assert value("pgjobs_jobs", queue="mail", state="running") == 1
    assert value("pgjobs_jobs", queue="reports", state="ready") == 0
    assert not any(name == "pgjobs_jobs" and ("state", "done") in labels for name, labels in got)
    assert 95 < value("pgjobs_oldest_due_wait_seconds", queue="mail") < 160
    assert value("pgjobs_oldest_due_wait_seconds", queue="reports") == 0
    assert value("pgjobs_jobs_finished_last_minute", queue="mail", outcome="done") == 1
    assert value("pgjobs_jobs_finished_last_minute", queue="mail", outcome="dead") == 0
    assert value("pgjobs_jobs_finished_last_hour", queue="mail", outcome="done") == 2
    assert value("pgjobs_jobs_finished_last_hour", queue="mail", outcome="dead") == 1
    assert value("pgjobs_workers_live", queue="mail") == 2
    assert value("pgjobs_workers_live", queue="reports") == 1
    assert value("pgjobs_queue_paused", queue="reports") == 1
    assert value("pgjobs_queue_paused", queue="mail") == 0
    assert value("pgjobs_worker_in_flight", worker="all#1") == 3
    assert value("pgjobs_worker_in_flight", worker="mailer#1") == 0
    assert value("pgjobs_worker_concurrency", worker="all#1") == 4
    assert ("pgjobs_worker_in_flight", (("worker", "gone#1"),)) not in got


def test_empty_database_still_describes_every_metric(staff_client):
    body = staff_client.get(URL).content.decode()
    for name in (
        "pgjobs_jobs",
        "pgjobs_oldest_due_wait_seconds",
        "pgjobs_jobs_finished_last_minute",
        "pgjobs_jobs_finished_last_hour",
        "pgjobs_workers_live",
        "pgjobs_queue_paused",
        "pgjobs_worker_in_flight",
        "pgjobs_worker_concurrency",
    ):
        assert f"# TYPE {name} gauge" in body


def test_each_scrape_reads_fresh_figures_from_a_private_registry(staff_client):
    from prometheus_client import REGISTRY

    JobFactory(queue="mail")
    first = samples(staff_client.get(URL))
    JobFactory(queue="mail")
    second = samples(staff_client.get(URL))
    key = ("pgjobs_jobs", (("queue", "mail"), ("state", "ready")))
    assert (first[key], second[key]) == (1, 2)
    assert REGISTRY.get_sample_value("pgjobs_jobs", {"queue": "mail", "state": "ready"}) is None


def test_without_prometheus_client_the_view_says_what_to_install(staff_client, monkeypatch):
    for name in [m for m in sys.modules if m == "prometheus_client" or m.startswith("prometheus_client.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "django_pgjobs.metrics", raising=False)
    response = staff_client.get(URL)
    assert response.status_code == 501
    assert "django-pgjobs[metrics]" in response.content.decode()


# -- settings and checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"METRICS_AUTH": "open"}, "METRICS_AUTH must be one of"),
        ({"METRICS_AUTH": None}, "METRICS_AUTH must be str"),
        ({"METRICS_TOKEN": 1234}, "METRICS_TOKEN must be str"),
    ],
)
def test_bad_metrics_settings(extra, message):
    with override_settings(PGJOBS=pgjobs(**extra)):
        with pytest.raises(ImproperlyConfigured, match=message):
            get_settings()
        assert [m.id for m in check_pgjobs()] == ["django_pgjobs.E001"]


@pytest.mark.parametrize("scheme", ["token", "staff_or_token"])
def test_check_a_token_scheme_needs_a_token(scheme):
    with override_settings(PGJOBS=pgjobs(METRICS_AUTH=scheme)):
        assert [m.id for m in check_pgjobs()] == ["django_pgjobs.E008"]
    with override_settings(PGJOBS=pgjobs(METRICS_AUTH=scheme, METRICS_TOKEN=TOKEN)):
        assert check_pgjobs() == []


def test_check_urls_included_without_prometheus_client(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert [m.id for m in check_pgjobs()] == ["django_pgjobs.E009"]
    with override_settings(ROOT_URLCONF="tests.urls_without_pgjobs"):
        assert check_pgjobs() == []
    with override_settings(ROOT_URLCONF=None):  # a worker-only settings module
        assert check_pgjobs() == []
