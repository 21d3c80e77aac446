"""render_chart(): the throughput series as inline SVG; pure, so tested on its markup."""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

from django_pgjobs.admin.chart import nice_ceiling, render_chart
from django_pgjobs.throughput import Bucket

SVG = "{http://www.w3.org/2000/svg}"
START = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def series(counts: list[tuple[int, int]], step: dt.timedelta = dt.timedelta(minutes=1)) -> list[Bucket]:
    return [Bucket(START + i * step, d, x) for i, (d, x) in enumerate(counts)]


def parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)  # well-formed XML, or this raises


def test_one_bar_per_bucket_with_tooltips_and_accessible_text():
    data = series([(0, 0)] * 57 + [(40, 2), (0, 0), (7, 0)])
    markup = render_chart(data, "minute", chart_id="c1", tz=dt.UTC)
    svg = parse(markup)
    assert svg.get("role") == "img" and svg.get("aria-labelledby") == "c1-title c1-desc"
    assert svg.find(f"{SVG}title").text == "Jobs finished in the last hour, per minute"
    desc = svg.find(f"{SVG}desc").text
    assert (
        desc
        == "47 done and 2 dead in the last hour, per minute; the busiest minute began at 12:57 with 42 jobs."
    )
    bars = svg.findall(f".//{SVG}g[@class='pgjobs-bar']")
    assert len(bars) == 60
    assert bars[57].find(f"{SVG}title").text == "12:57 to 12:58: 40 done, 2 dead"
    assert (bars[57].get("data-done"), bars[57].get("data-dead")) == ("40", "2")
    heights = {r.get("class"): float(r.get("height")) for r in bars[57].findall(f"{SVG}rect")}
    assert heights["pgjobs-done"] > heights["pgjobs-dead"] > 0
    assert float(bars[58].find(f"{SVG}rect[@class='pgjobs-done']").get("height")) == 0
    assert "No jobs finished" not in markup
    # Time labels every ten minutes, ending at the last bucket.
    labels = [t.text for t in svg.findall(f"{SVG}g[@class='pgjobs-labels']/{SVG}text")]
    assert labels == ["12:09", "12:19", "12:29", "12:39", "12:49", "12:59"]


def test_zero_data_says_so_and_still_draws_the_axis():
    markup = render_chart(series([(0, 0)] * 24, dt.timedelta(hours=1)), "hour", chart_id="c2")
    svg = parse(markup)
    assert svg.find(f"{SVG}desc").text == "0 done and 0 dead in the last 24 hours, per hour."
    assert svg.find(f".//{SVG}text[@class='pgjobs-chart-empty']").text == "No jobs finished in this period."
    assert len(svg.findall(f".//{SVG}g[@class='pgjobs-bar']")) == 24
    assert [t.text for t in svg.findall(f"{SVG}g[@class='pgjobs-grid']/{SVG}text")] == ["0", "1"]
    assert render_chart([], "minute", chart_id="c3").count("No data.") == 1


def test_everything_is_escaped():
    markup = render_chart(series([(1, 0)]), "minute", chart_id='x"><script>alert(1)</script>')
    assert "<script>" not in markup
    assert 'id="x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in markup
    parse(markup)


def test_colours_follow_the_admin_theme():
    """Dark mode: every colour is an admin CSS variable (a light fallback inside var()) or
    currentColor, set through style (presentation attributes cannot hold var())."""
    markup = render_chart(series([(3, 1)] * 60), "minute", chart_id="c4")
    assert "color: var(--body-fg" in markup and "fill: currentColor" in markup
    assert "fill: var(--link-fg" in markup and "fill: var(--error-fg" in markup
    assert "stroke: var(--hairline-color" in markup
    assert not re.search(r'(fill|stroke|color)="#', markup)  # no fixed colour attribute
    assert not re.findall(r"(?<!, )#[0-9a-fA-F]{3,6}\b", markup)  # hex only as var() fallbacks


def test_nice_ceiling():
    assert [nice_ceiling(v) for v in (0, 1, 2, 3, 7, 10, 11, 42, 101, 999, 1000)] == [
        1,
        1,
        2,
        5,
        10,
        10,
        20,
        50,
        200,
        1000,
        1000,
    ]
