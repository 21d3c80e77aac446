"""End to end in a real browser: Debian's headless Chromium driven by Playwright, against a live server.

Log in, open Dead letters, select a job, Retry, and see it leave the dead list and appear ready.
Screenshots of the dead-letter list and of the job page go to ``$PGJOBS_SCREENSHOT_DIR`` (the README's
images are made with ``PGJOBS_SCREENSHOT_DIR=example_project/screenshots``), else to a temp dir.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_pgjobs.models import Job, Status
from tests.factories import DeadJobFactory, JobFactory
from tests.helpers import prerequisite_missing

from .conftest import make_user

CHROMIUM = os.environ.get("PGJOBS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/django_pgjobs/worker.py", line 212, in _run
    result = handler.call(job)
  File "/srv/app/billing/jobs.py", line 41, in charge_card
    charge = gateway.charge(invoice.customer_token, invoice.total_cents)
  File "/srv/app/billing/gateway.py", line 88, in charge
    raise CardDeclined(response["decline_code"])
billing.gateway.CardDeclined: insufficient_funds"""


def _history(attempts: int, error_class: str, message: str) -> list[dict[str, Any]]:
    start = timezone.now() - dt.timedelta(minutes=40)
    return [
        {
            "attempt": n,
            "worker": f"web-7f9c:{4100 + n}",
            "started_at": (start + dt.timedelta(minutes=7 * n)).isoformat(timespec="seconds"),
            "finished_at": (start + dt.timedelta(minutes=7 * n, seconds=1)).isoformat(timespec="seconds"),
            "outcome": "failed",
            "error_class": error_class,
            "message": message,
            "traceback": TRACEBACK.replace("insufficient_funds", message),
        }
        for n in range(1, attempts + 1)
    ]


def seed() -> Job:
    """A believable queue: a few dead letters (one is the retry target), ready and done work."""
    now = timezone.now()
    for i, (task, queue, error) in enumerate(
        [
            ("mail.send_receipt", "mail", "SMTPServerDisconnected: Connection unexpectedly closed"),
            ("search.reindex_product", "default", "ConnectionError: Elasticsearch unreachable (503)"),
            ("billing.sync_invoice", "billing", "TimeoutError: accounting API did not answer in 30 s"),
        ]
    ):
        error_class, message = error.split(": ", 1)
        DeadJobFactory(
            task=task,
            queue=queue,
            payload={"args": [], "kwargs": {"object_id": 9000 + i}},
            last_error=error,
            finished_at=now - dt.timedelta(minutes=20 + 7 * i),
            created_at=now - dt.timedelta(hours=2 + i),
            history=_history(5, error_class, message),
        )
    JobFactory.create_batch(2, task="mail.send_receipt", queue="mail")
    JobFactory(task="billing.sync_invoice", queue="billing", done=True, result={"synced": True})
    return DeadJobFactory(
        task="billing.charge_card",
        queue="billing",
        payload={"args": [], "kwargs": {"invoice_id": 1842, "amount_cents": 12900, "currency": "EUR"}},
        idempotency_key="invoice:1842:charge",
        last_error="CardDeclined: insufficient_funds",
        finished_at=now - dt.timedelta(minutes=3),
        created_at=now - dt.timedelta(minutes=34),
        history=_history(5, "billing.gateway.CardDeclined", "insufficient_funds"),
    )


@pytest.fixture
def screenshot_dir(tmp_path: Path) -> Path:
    target = Path(os.environ.get("PGJOBS_SCREENSHOT_DIR") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_retry_a_dead_letter_in_a_real_browser(live_server: Any, screenshot_dir: Path) -> None:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        message = (
            f"Chromium not found at {CHROMIUM}: install Debian's browser "
            "(apt-get install -y chromium) or set PGJOBS_CHROMIUM to its path"
        )
        prerequisite_missing(message)  # .ci/run installs it, so there this fails
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail("Playwright for Python is missing: pip install 'django-pgjobs[e2e]'", pytrace=False)

    make_user("ops", "view_job", "change_job", "operate_job", "delete_job")
    target = seed()
    other = Job.objects.filter(status=Status.DEAD).exclude(pk=target.pk).first()
    assert other is not None
    base = live_server.url

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 820})
            page.set_default_timeout(TIMEOUT_MS)
            expect.set_options(timeout=TIMEOUT_MS)

            page.goto(f"{base}/admin/login/?next=/admin/")
            page.fill("#id_username", "ops")
            page.fill("#id_password", "pw")
            page.click("input[type=submit]")
            expect(page.locator("#site-name")).to_be_visible()
            # Collapse the app sidebar (Django keeps its state in localStorage): room for the columns.
            page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")

            page.get_by_role("link", name="Dead letters").click()
            expect(page).to_have_url(f"{base}/admin/django_pgjobs/deadjob/")
            row = page.locator("#result_list tbody tr", has=page.locator(f"input[value='{target.pk}']"))
            expect(row).to_contain_text("billing.charge_card")
            expect(page.locator("#result_list tbody tr")).to_have_count(4)
            page.screenshot(path=str(screenshot_dir / "dead-letters.png"), full_page=True)

            row.get_by_role("link", name="billing.charge_card").click()
            expect(page.locator(".pgjobs-history")).to_be_visible()
            expect(page.locator("textarea#id_payload")).to_contain_text('"invoice_id": 1842')
            page.locator(".pgjobs-history details").first.locator("summary").click()
            expect(page.locator(".pgjobs-traceback").first).to_be_visible()
            expect(page.locator("button.pgjobs-operate")).to_have_text(["Retry"])
            page.screenshot(path=str(screenshot_dir / "job-page.png"), full_page=True)

            page.goto(f"{base}/admin/django_pgjobs/deadjob/")
            page.check(f"input[name=_selected_action][value='{target.pk}']")
            page.select_option("select[name=action]", "retry_jobs")
            page.click("button[name=index]")
            expect(page.locator("ul.messagelist")).to_contain_text("Retried 1 job.")
            expect(page.locator(f"input[name=_selected_action][value='{target.pk}']")).to_have_count(0)
            expect(page.locator("#result_list tbody tr")).to_have_count(3)

            page.goto(f"{base}/admin/django_pgjobs/job/?status__exact=ready")
            ready_row = page.locator("#result_list tbody tr", has=page.locator(f"input[value='{target.pk}']"))
            expect(ready_row).to_contain_text("billing.charge_card")
            expect(ready_row.locator(".pgjobs-status")).to_have_text("ready")
            expect(ready_row).to_contain_text("5/10")  # attempts kept, a fresh budget on top

            # The job page's own Retry button, on another dead letter: lands on its (now ready) page.
            page.goto(f"{base}/admin/django_pgjobs/deadjob/{other.pk}/change/")
            page.get_by_role("button", name="Retry").click()
            expect(page.locator("ul.messagelist")).to_contain_text("Retried 1 job.")
            expect(page).to_have_url(f"{base}/admin/django_pgjobs/job/{other.pk}/change/")
            expect(page.locator(".pgjobs-status")).to_have_text("ready")
            expect(page.locator("button.pgjobs-operate")).to_have_text(["Cancel"])
        finally:
            browser.close()

    other.refresh_from_db()
    assert (other.status, other.attempts, other.max_attempts) == (Status.READY, 5, 10)
    target.refresh_from_db()
    assert (target.status, target.attempts, target.max_attempts) == (Status.READY, 5, 10)
    assert target.history[-1]["outcome"] == "retried" and target.history[-1]["message"] == "retried by ops"
