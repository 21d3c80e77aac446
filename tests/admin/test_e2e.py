"""End to end in a real browser: Debian's headless Chromium driven by Playwright, against a live server.

* Retry a dead letter from the list and from its page.
* The overview: the trends chart, Pause and Resume a queue; the Workers page with a registered
  worker (the registry's own statement) holding a job it claimed (the store's claim).
* Layout at 1366 px with Django's nav sidebar open (the default): the last error is readable, Age
  and Last error fit on screen, breadcrumbs are what the running Django writes.

Runs on Django 5.2 and on 6.1 (``.ci/run``'s py312-django61 env). The README's screenshots (1400 x
1000, nav sidebar open) go to ``$PGJOBS_SCREENSHOT_DIR`` (the README's images are made with
``PGJOBS_SCREENSHOT_DIR=example_project/screenshots``), else to a temp dir.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import django
import pytest
from django.db import connections
from django.utils import timezone

from django_pgjobs.fleet import Registration, register
from django_pgjobs.models import Job, QueuePause, Status, WorkerProcess
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
T = TypeVar("T")
#: The README's screenshots: a laptop screen, Django's nav sidebar open.
SCREENSHOT_VIEWPORT = {"width": 1400, "height": 1000}
#: The smallest common laptop width the lists must stay readable at, sidebar open.
NARROW_VIEWPORT = {"width": 1366, "height": 900}
WORKER = Registration(
    name="web-7f9c:4101#5e2a",
    worker_id="web-7f9c:4101",
    concurrency=8,
    queues=("billing", "mail"),
    queue_limits={"billing": 2},
    host="web-7f9c",
    pid=4101,
)

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
    JobFactory(task="billing.render_invoice_pdf", queue="billing", payload={"args": [1841], "kwargs": {}})
    JobFactory(task="search.reindex_product", queue="default")
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


def seed_history() -> None:
    """A day of finished work for the trends chart: a steady stream with a burst and some failures."""
    now = timezone.now()
    for minute in range(60):
        for n in range(2 + (minute * 7) % 5 + (6 if 20 <= minute < 26 else 0)):
            JobFactory(
                task="mail.send_receipt",
                queue="mail",
                done=True,
                finished_at=now - dt.timedelta(minutes=minute, seconds=n),
            )
        if minute % 13 == 5:
            DeadJobFactory(
                task="search.reindex_product", queue="default", finished_at=now - dt.timedelta(minutes=minute)
            )
    for hour in range(1, 24):
        for n in range(3 + (hour * 5) % 7):
            JobFactory(
                task="billing.sync_invoice",
                queue="billing",
                done=True,
                finished_at=now - dt.timedelta(hours=hour, minutes=n),
            )
        if hour % 6 == 2:
            DeadJobFactory(
                task="billing.charge_card", queue="billing", finished_at=now - dt.timedelta(hours=hour)
            )


def seed_fleet() -> tuple[Job, WorkerProcess]:
    """A live worker registered by the registry's own statement, holding a job it claimed through
    the store; and a worker that stopped beating ten minutes ago."""
    register(Job.objects.store, WORKER, live_seconds=600, in_flight=1)
    (claim,) = Job.objects.claim(["billing"], WORKER.name, limit=1, lease=600)
    now = timezone.now()
    gone = WorkerProcess.objects.create(
        name="web-3b1d:4099#77c0",
        worker_id="web-3b1d:4099",
        host="web-3b1d",
        pid=4099,
        queues=[],
        queue_limits={},
        concurrency=4,
        version="0.2.0",
        started_at=now - dt.timedelta(hours=5),
        heartbeat_at=now - dt.timedelta(minutes=10),
        expires_at=now - dt.timedelta(minutes=9),
    )
    return Job.objects.get(pk=claim.id), gone


def chromium_or_skip() -> Any:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        message = (
            f"Chromium not found at {CHROMIUM}: install Debian's browser "
            "(apt-get install -y chromium) or set PGJOBS_CHROMIUM to its path"
        )
        prerequisite_missing(message)  # .ci/run installs it, so there this fails
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("Playwright for Python is missing: pip install 'django-pgjobs[e2e]'", pytrace=False)
    return sync_api


@contextlib.contextmanager
def logged_in(base: str, viewport: dict[str, int], username: str = "ops") -> Iterator[Any]:
    """A page logged in as ``username``, Django's nav sidebar left as it starts: open."""
    sync_api = chromium_or_skip()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport=viewport)
            page.set_default_timeout(TIMEOUT_MS)
            sync_api.expect.set_options(timeout=TIMEOUT_MS)
            page.goto(f"{base}/admin/login/?next=/admin/")
            page.fill("#id_username", username)
            page.fill("#id_password", "pw")
            page.click("input[type=submit]")
            sync_api.expect(page.locator("#site-name")).to_be_visible()
            yield page
        finally:
            browser.close()


def expect_sidebar_open(page: Any) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#nav-sidebar")).to_be_visible()
    expect(page.locator("#main")).to_have_class(re.compile(r"\bshifted\b"))


def outside_the_browser_loop(query: Callable[[], T]) -> T:
    """Run an ORM ``query`` in a thread of its own, and close that thread's connection.

    Inside ``sync_playwright()`` this thread runs an event loop, where Django refuses ORM calls;
    allowing them (DJANGO_ALLOW_ASYNC_UNSAFE) gives the loop's context a connection of its own that
    nothing closes, and the leftover session keeps the test database from being dropped."""
    result: list[T] = []

    def run() -> None:
        try:
            result.append(query())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="e2e-orm")
    thread.start()
    thread.join(TIMEOUT_MS / 1000)
    assert result, "the query did not answer in time (or raised: see above)"
    return result[0]


@pytest.fixture
def screenshot_dir(tmp_path: Path) -> Path:
    target = Path(os.environ.get("PGJOBS_SCREENSHOT_DIR") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_retry_a_dead_letter_in_a_real_browser(live_server: Any, screenshot_dir: Path) -> None:
    from playwright.sync_api import expect

    make_user("ops", "view_job", "change_job", "operate_job", "delete_job")
    target = seed()
    other = Job.objects.filter(status=Status.DEAD).exclude(pk=target.pk).first()
    assert other is not None
    base = live_server.url

    with logged_in(base, SCREENSHOT_VIEWPORT) as page:
        page.get_by_role("link", name="Dead letters").first.click()
        expect(page).to_have_url(f"{base}/admin/django_pgjobs/deadjob/")
        expect_sidebar_open(page)
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

    other.refresh_from_db()
    assert (other.status, other.attempts, other.max_attempts) == (Status.READY, 5, 10)
    target.refresh_from_db()
    assert (target.status, target.attempts, target.max_attempts) == (Status.READY, 5, 10)
    assert target.history[-1]["outcome"] == "retried" and target.history[-1]["message"] == "retried by ops"


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_wakeups")
def test_overview_chart_pause_resume_and_workers_in_a_real_browser(
    live_server: Any, screenshot_dir: Path
) -> None:
    from playwright.sync_api import expect

    make_user("ops", "view_job", "change_job", "operate_job", "delete_job")
    seed()
    seed_history()
    running, gone = seed_fleet()
    base = live_server.url
    overview = f"{base}/admin/django_pgjobs/job/overview/"

    with logged_in(base, SCREENSHOT_VIEWPORT) as page:
        page.goto(f"{base}/admin/django_pgjobs/")  # the app index links our pages
        page.get_by_role("link", name="Queue overview").click()
        expect(page).to_have_url(overview)
        expect_sidebar_open(page)

        # The chart: server-side SVG, one bar per minute, some of them drawn.
        minutes = page.locator("svg#pgjobs-chart-minute")
        expect(minutes).to_be_visible()
        expect(minutes.locator("g.pgjobs-bar")).to_have_count(60)
        expect(page.locator("svg#pgjobs-chart-hour g.pgjobs-bar")).to_have_count(24)
        assert minutes.locator("title").first.text_content() == "Jobs finished in the last hour, per minute"
        drawn = minutes.locator("rect.pgjobs-done").evaluate_all(
            "rects => rects.filter(r => r.getBoundingClientRect().height > 0).length"
        )
        assert drawn >= 55, drawn
        assert (
            minutes.locator("rect.pgjobs-dead").evaluate_all(
                "rects => rects.filter(r => r.getBoundingClientRect().height > 0).length"
            )
            >= 4
        )
        box = minutes.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 60
        # Dark mode (the admin follows the system's preference): the bars and labels take the
        # theme's colours, as the admin's own text does.
        colours = (
            "() => { const svg = document.querySelector('#pgjobs-chart-minute');"
            " const bar = svg.querySelector('rect.pgjobs-done');"
            " return [getComputedStyle(bar).fill, getComputedStyle(svg).color,"
            " getComputedStyle(document.querySelector('#content')).color]; }"
        )
        light = page.evaluate(colours)
        page.emulate_media(color_scheme="dark")
        dark = page.evaluate(colours)
        page.emulate_media(color_scheme="light")
        assert light[0] != dark[0] and light[1] != dark[1], (light, dark)
        assert light[1] == light[2] and dark[1] == dark[2], (light, dark)  # the admin's body text colour

        # Live workers per queue: the registered worker claims from billing and mail.
        mail = page.locator("#pgjobs-overview tr[data-queue='mail']")
        expect(mail.locator("td.workers")).to_have_text("1 (8 slots)")
        expect(page.locator("#pgjobs-overview tr[data-queue='billing'] td.workers")).to_have_text(
            "1 (2 slots)"
        )
        expect(page.locator("#pgjobs-overview tr[data-queue='default'] td.workers")).to_have_text("none")

        # Pause: a POST (with the page's CSRF token), a message, the row marked, the table row written.
        mail.get_by_role("button", name="Pause").click()
        expect(page.locator("ul.messagelist")).to_contain_text("Paused queue mail")
        expect(page).to_have_url(overview)
        paused = outside_the_browser_loop(lambda: list(QueuePause.objects.values_list("queue", "paused_by")))
        assert paused == [("mail", "ops")]
        expect(mail).to_have_class("pgjobs-paused")
        expect(mail.locator(".pgjobs-paused-badge")).to_have_text("paused")
        expect(mail.get_by_role("button", name="Resume")).to_be_visible()
        page.screenshot(path=str(screenshot_dir / "overview.png"), full_page=True)

        mail.get_by_role("button", name="Resume").click()
        expect(page.locator("ul.messagelist")).to_contain_text("Resumed queue mail")
        assert not outside_the_browser_loop(QueuePause.objects.exists)
        expect(mail).not_to_have_class("pgjobs-paused")
        expect(mail.get_by_role("button", name="Pause")).to_be_visible()

        # Workers: the live one with its running job, the gone one marked.
        page.get_by_role("link", name="Workers (1 live)").click()
        expect(page).to_have_url(f"{base}/admin/django_pgjobs/job/workers/")
        live_row = page.locator(f"#pgjobs-live-workers tr[data-worker='{WORKER.name}']")
        expect(live_row.locator("td.host")).to_have_text("web-7f9c")
        expect(live_row.locator("td.pid")).to_have_text("4101")
        expect(live_row.locator("td.queues li")).to_have_text(["billing (max 2)", "mail"])
        expect(live_row.locator("td.concurrency")).to_have_text("8")
        expect(live_row.locator("td.in-flight")).to_have_text("1")
        expect(
            page.locator(f"#pgjobs-gone-workers tr[data-worker='{gone.name}'] .pgjobs-gone-badge")
        ).to_have_text("gone")
        page.screenshot(path=str(screenshot_dir / "workers.png"), full_page=True)
        live_row.get_by_role("link", name=f"#{running.pk}").click()
        expect(page).to_have_url(f"{base}/admin/django_pgjobs/job/{running.pk}/change/")
        expect(page.locator(".pgjobs-status")).to_have_text("running")
        expect(page.locator(".object-tools")).to_contain_text(f"running on {WORKER.name}")

    assert Job.objects.get(pk=running.pk).locked_by == WORKER.name


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_layout_at_1366_px_with_the_nav_sidebar_open(live_server: Any) -> None:
    """What the issue saw: a 90 px "Last error" column with a letter per line (dead letters), Age
    and Last error pushed off screen (jobs), breadcrumbs the running Django does not style."""
    from playwright.sync_api import expect

    make_user("ops", "view_job", "change_job", "operate_job", "delete_job")
    seed()
    base = live_server.url
    width = NARROW_VIEWPORT["width"]

    with logged_in(base, NARROW_VIEWPORT) as page:
        for url in ("/admin/django_pgjobs/deadjob/", "/admin/django_pgjobs/job/"):
            page.goto(base + url)
            expect_sidebar_open(page)
            cells = page.locator("#result_list tbody td.field-error_excerpt").filter(has=page.locator("span"))
            expect(cells.first).to_be_visible()
            for i in range(cells.count()):
                box = cells.nth(i).bounding_box()
                assert box is not None and box["width"] > 150, (url, i, box)
                assert box["x"] + box["width"] <= width, (url, i, box)
                text = cells.nth(i).locator("span").bounding_box()
                assert text is not None and text["height"] < 24, (url, i, text)  # one line
            span = cells.first.locator("span.pgjobs-error-excerpt")
            assert (span.get_attribute("title") or "").split(":")[0] in {
                "CardDeclined",
                "SMTPServerDisconnected",
                "ConnectionError",
                "TimeoutError",
            }
            # Inside the list's own box (it scrolls sideways when the table is wider, and a
            # column under the filters is as good as gone) and so on screen.
            results = page.locator(".results").bounding_box()
            assert results is not None and results["x"] + results["width"] <= width
            widths = page.evaluate(
                "() => [...document.querySelectorAll('#result_list thead th')]"
                ".map(t => t.className + ' ' + Math.round(t.getBoundingClientRect().width)).join(', ')"
            )
            for column in ("age", "error_excerpt"):
                header = page.locator(f"#result_list thead th.column-{column}")
                box = header.bounding_box()
                assert box is not None, (url, column)
                assert box["x"] + box["width"] <= results["x"] + results["width"] + 0.5, (url, column, widths)
            has_scroll = page.evaluate(
                "() => { const r = document.querySelector('.results');"
                " return r.scrollWidth > r.clientWidth; }"
            )
            assert not has_scroll, f"{url} scrolls sideways at {width} px: {widths}"

        for url in ("/admin/django_pgjobs/job/overview/", "/admin/django_pgjobs/job/workers/"):
            page.goto(base + url)
            crumbs = page.locator("nav[aria-label='Breadcrumbs'] .breadcrumbs")
            expect(crumbs).to_have_count(1)
            tag = crumbs.evaluate("e => e.tagName")
            if django.VERSION >= (6, 1):
                assert tag == "OL"
                expect(crumbs.locator("li")).to_have_count(4 if url.endswith("overview/") else 5)
                expect(crumbs.locator("li[aria-current='page']")).to_have_count(1)
                # Django 6's CSS draws the separators; the list is laid out on one line.
                assert (
                    crumbs.locator("li").first.evaluate("e => getComputedStyle(e).display") == "inline-block"
                )
            else:
                assert tag == "DIV"
                expect(crumbs).to_contain_text("\u203a")
            box = crumbs.bounding_box()
            assert box is not None and box["height"] < 60, box  # one line
