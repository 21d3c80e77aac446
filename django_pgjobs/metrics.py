"""The Prometheus metrics: one :func:`django_pgjobs.stats.snapshot` per scrape, as metric families.

Needs ``prometheus_client`` (``pip install 'django-pgjobs[metrics]'``); served by
:mod:`django_pgjobs.metrics_view` at ``/pgjobs/metrics`` once ``django_pgjobs.urls`` is included.

Every value is read from the tables at scrape time; nothing is kept in the process. So every web
process answers the same, a restart loses nothing, and there is no global registry to share with
the application's own metrics (each scrape builds a private :class:`CollectorRegistry`).

Outcomes are **windowed gauges** (``pgjobs_jobs_finished_last_minute`` / ``_last_hour``), not a
``_total`` counter. A counter computed from rows would fall whenever retention prunes done jobs,
and Prometheus reads any fall of a counter as a reset, so ``rate()`` would report bursts of
throughput that never happened. A true counter would need a table of its own written by every
completion, in the hot path of the acknowledger. The window is the database's: ``statement_timestamp()``
minus a minute or an hour, through the finished-jobs index.

``pgjobs_jobs`` has the states a job waits or runs in (``scheduled``, ``ready``, ``running``),
counted exactly. The final states are in the outcome gauges instead: counting every ``done`` row of
the retention window at each scrape reads the whole table (see :mod:`django_pgjobs.stats`).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from .models import Status
from .stats import Snapshot, snapshot

#: The states ``pgjobs_jobs`` reports (exact counts; see the module docstring).
LIVE_STATES = (Status.SCHEDULED, Status.READY, Status.RUNNING)
#: ``outcome`` label values of the finished-jobs gauges: done, and failed (finished dead).
OUTCOMES = ("done", "dead")


def families() -> dict[str, GaugeMetricFamily]:
    """Every metric this exporter has, empty: the collector's description and its fill."""
    return {
        "jobs": GaugeMetricFamily(
            "pgjobs_jobs",
            "Jobs waiting or running, by queue and state (scheduled, ready, running); exact.",
            labels=["queue", "state"],
        ),
        "oldest_due": GaugeMetricFamily(
            "pgjobs_oldest_due_wait_seconds",
            "Seconds the oldest due job (ready, or scheduled past its run_at) has waited since its "
            "run_at; 0 when none is due.",
            labels=["queue"],
        ),
        "last_minute": GaugeMetricFamily(
            "pgjobs_jobs_finished_last_minute",
            "Jobs that finished in the last minute, by queue and outcome (done, dead).",
            labels=["queue", "outcome"],
        ),
        "last_hour": GaugeMetricFamily(
            "pgjobs_jobs_finished_last_hour",
            "Jobs that finished in the last hour, by queue and outcome (done, dead).",
            labels=["queue", "outcome"],
        ),
        "workers": GaugeMetricFamily(
            "pgjobs_workers_live",
            "Live worker processes that claim from the queue (naming it, or serving every queue).",
            labels=["queue"],
        ),
        "paused": GaugeMetricFamily(
            "pgjobs_queue_paused",
            "1 when the queue is paused (workers claim nothing from it).",
            labels=["queue"],
        ),
        "in_flight": GaugeMetricFamily(
            "pgjobs_worker_in_flight",
            "Jobs a live worker process held at its last heartbeat (claimed ahead, running, or "
            "finished and not yet written).",
            labels=["worker"],
        ),
        "concurrency": GaugeMetricFamily(
            "pgjobs_worker_concurrency", "Job slots of a live worker process.", labels=["worker"]
        ),
    }


def fill(snap: Snapshot) -> list[GaugeMetricFamily]:
    """The metric families of one snapshot."""
    m = families()
    for q in snap.queues:
        for state in LIVE_STATES:
            m["jobs"].add_metric([q.queue, state.value], q.counts[state.value])
        m["oldest_due"].add_metric([q.queue], q.oldest_due_wait_seconds or 0.0)
        m["last_minute"].add_metric([q.queue, "done"], q.done_last_minute)
        m["last_minute"].add_metric([q.queue, "dead"], q.failed_last_minute)
        m["last_hour"].add_metric([q.queue, "done"], q.done_last_hour)
        m["last_hour"].add_metric([q.queue, "dead"], q.failed_last_hour)
        m["workers"].add_metric([q.queue], q.live_workers)
        m["paused"].add_metric([q.queue], 1.0 if q.paused else 0.0)
    for w in snap.workers:
        m["in_flight"].add_metric([w.name], w.in_flight)
        m["concurrency"].add_metric([w.name], w.concurrency)
    return list(m.values())


class PgJobsCollector(Collector):
    """Reads one snapshot per ``collect()`` (per scrape) from the ``using`` database."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def describe(self) -> Iterator[Metric]:
        # Registering a collector asks for its names; answering from here keeps that from
        # querying the database (a registry with auto_describe would call collect()).
        yield from families().values()

    def collect(self) -> Iterator[Metric]:
        yield from fill(snapshot(self.using))


def exposition(using: str | None = None) -> tuple[bytes, str]:
    """The metrics in the Prometheus text format and its content type, from a private registry
    (the process's global one holds the application's metrics, and would keep ours between
    scrapes)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PgJobsCollector(using))
    return generate_latest(registry), CONTENT_TYPE_LATEST
