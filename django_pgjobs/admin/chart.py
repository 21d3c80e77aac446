"""The overview's trends chart: a throughput series as inline SVG, drawn on the server.

A pure function of the series (no query, no JavaScript, no charting library), so it is tested by
reading its markup. Colours come from the admin's own CSS variables (``--body-fg``,
``--link-fg``, ``--error-fg``, ``--hairline-color``) through ``style`` and ``currentColor``, so the
chart follows the admin's light and dark themes; SVG presentation attributes cannot hold ``var()``.
Every piece of text goes through ``format_html``/``escape``, and the SVG has a ``<title>``, a
``<desc>`` summing it up in words and a ``<title>`` per bar (the tooltip, and what a screen reader
reads for it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..throughput import Bucket, BucketSize

WIDTH = 720
HEIGHT = 180
LEFT = 44  # room for the y axis labels
RIGHT = 8
TOP = 12
BOTTOM = 22  # room for the time labels
#: A time label every this many bars.
LABEL_EVERY: dict[str, int] = {"minute": 10, "hour": 3}
SPAN: dict[str, str] = {"minute": "the last hour, per minute", "hour": "the last 24 hours, per hour"}

DONE_STYLE = "fill: var(--link-fg, #417893)"
DEAD_STYLE = "fill: var(--error-fg, #ba2121)"
GRID_STYLE = "stroke: var(--hairline-color, #e8e8e8)"


def nice_ceiling(value: int) -> int:
    """The y axis' top: ``value`` rounded up to 1, 2 or 5 times a power of ten (at least 1)."""
    if value <= 1:
        return 1
    magnitude = 1
    while magnitude * 10 <= value:
        magnitude *= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude  # pragma: no cover (the loop always returns)


def _label(start: dt.datetime, tz: dt.tzinfo | None) -> str:
    local = timezone.localtime(start, tz) if timezone.is_aware(start) else start
    return local.strftime("%H:%M")


def render_chart(
    series: Sequence[Bucket], bucket: BucketSize, *, chart_id: str, tz: dt.tzinfo | None = None
) -> SafeString:
    """``series`` (oldest first, as :func:`~django_pgjobs.throughput.throughput` returns it) as a
    stacked bar chart: done jobs at the bottom of each bar, dead ones on top. Times are labelled in
    ``tz`` (default: Django's current time zone, as the rest of the admin shows them)."""
    step = dt.timedelta(minutes=1) if bucket == "minute" else dt.timedelta(hours=1)
    done_total = sum(b.done for b in series)
    dead_total = sum(b.dead for b in series)
    top = nice_ceiling(max((b.total for b in series), default=0))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(series), 1)
    bar_w = max(slot * 0.8, 1.0)

    def y(value: float) -> float:
        return TOP + plot_h - plot_h * value / top

    bars = []
    for i, b in enumerate(series):
        x = LEFT + i * slot + (slot - bar_w) / 2
        tip = f"{_label(b.start, tz)} to {_label(b.start + step, tz)}: {b.done:,} done, {b.dead:,} dead"
        # A non-empty bucket is at least one pixel tall, so a quiet minute is not mistaken for none.
        done_h = max(plot_h * b.done / top, 1.0) if b.done else 0.0
        dead_h = max(plot_h * b.dead / top, 1.0) if b.dead else 0.0
        bars.append(
            format_html(
                '<g class="pgjobs-bar" data-start="{}" data-done="{}" data-dead="{}"><title>{}</title>'
                '<rect class="pgjobs-bar-bg" x="{}" y="{}" width="{}" height="{}" style="fill: transparent"/>'
                '<rect class="pgjobs-done" x="{}" y="{}" width="{}" height="{}" style="{}"/>'
                '<rect class="pgjobs-dead" x="{}" y="{}" width="{}" height="{}" style="{}"/></g>',
                b.start.isoformat(),
                b.done,
                b.dead,
                tip,
                f"{LEFT + i * slot:.1f}",
                TOP,
                f"{slot:.1f}",
                plot_h,  # the whole slot answers the tooltip, not only the visible bar
                f"{x:.1f}",
                f"{TOP + plot_h - done_h:.1f}",
                f"{bar_w:.1f}",
                f"{done_h:.1f}",
                DONE_STYLE,
                f"{x:.1f}",
                f"{TOP + plot_h - done_h - dead_h:.1f}",
                f"{bar_w:.1f}",
                f"{dead_h:.1f}",
                DEAD_STYLE,
            )
        )
    grid = format_html_join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" style="{}"/>'
        '<text x="{}" y="{}" text-anchor="end" dominant-baseline="middle">{}</text>',
        (
            (LEFT, WIDTH - RIGHT, f"{y(v):.1f}", f"{y(v):.1f}", GRID_STYLE, LEFT - 6, f"{y(v):.1f}", f"{v:,}")
            for v in sorted({0, top // 2, top})
        ),
    )
    every = LABEL_EVERY[bucket]
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" text-anchor="middle">{}</text>',
        (
            (f"{LEFT + i * slot + slot / 2:.1f}", HEIGHT - 6, _label(b.start, tz))
            for i, b in enumerate(series)
            if (len(series) - 1 - i) % every == 0
        ),
    )
    title = f"Jobs finished in {SPAN[bucket]}"
    if series:
        busiest = max(series, key=lambda b: b.total)
        summary = f"{done_total:,} done and {dead_total:,} dead in {SPAN[bucket]}" + (
            f"; the busiest {bucket} began at {_label(busiest.start, tz)} with {busiest.total:,} jobs."
            if busiest.total
            else "."
        )
    else:
        summary = "No data."
    empty = (
        format_html(
            '<text class="pgjobs-chart-empty" x="{}" y="{}" text-anchor="middle">{}</text>',
            LEFT + plot_w / 2,
            TOP + plot_h / 2,
            "No jobs finished in this period.",
        )
        if not (done_total or dead_total)
        else ""
    )
    return format_html(
        '<svg class="pgjobs-chart" id="{}" role="img" aria-labelledby="{}-title {}-desc" '
        'viewBox="0 0 {} {}" width="100%" preserveAspectRatio="xMinYMin meet" '
        'style="max-width: {}px; color: var(--body-fg, #333); font-size: 11px; fill: currentColor" '
        'xmlns="http://www.w3.org/2000/svg">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>'
        '<g class="pgjobs-grid">{}</g><g class="pgjobs-bars">{}</g><g class="pgjobs-labels">{}</g>{}</svg>',
        chart_id,
        chart_id,
        chart_id,
        WIDTH,
        HEIGHT,
        WIDTH,
        chart_id,
        title,
        chart_id,
        summary,
        grid,
        format_html_join("", "{}", ((bar,) for bar in bars)),
        labels,
        empty,
    )
