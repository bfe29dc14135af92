"""The dashboard's SVG charts: well-formed XML, bars proportional to the fires, late fires
stacked, lateness lines broken on unknown values, every text escaped, no inline style (the
CSP forbids it), and sane output for empty, tiny, all-zero and absurd inputs."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from quartzlite.api.ui.charts import Bucket, fires_chart

NS = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 24, 13, 0, tzinfo=UTC)


def bucket(
    minute: int,
    fires: int,
    late: int = 0,
    p50: float | None = 5.0,
    p99: float | None = 50.0,
) -> Bucket:
    return Bucket(
        start=T0 + timedelta(minutes=minute), fires=fires, late_fires=late, p50_ms=p50, p99_ms=p99
    )


def parse(svg: str) -> ET.Element:
    # our own output, parsed to prove that it is well-formed XML
    return ET.fromstring(svg)


def classes(el: ET.Element) -> set[str]:
    return set(el.get("class", "").split())


def bars(root: ET.Element, *, late: bool) -> list[ET.Element]:
    out = []
    for rect in root.iter(f"{NS}rect"):
        cls = classes(rect)
        if "bar" in cls and ("late" in cls) == late:
            out.append(rect)
    return out


def polylines(root: ET.Element, kind: str) -> list[ET.Element]:
    return [p for p in root.iter(f"{NS}polyline") if {"line", kind} <= classes(p)]


def labels(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text") if "label" in classes(t)]


def height(rect: ET.Element) -> float:
    return float(rect.get("height", "nan"))


def test_root_is_an_accessible_svg_chart() -> None:
    root = parse(fires_chart([bucket(0, 3), bucket(1, 5)], title="Fires, last hour"))
    assert root.tag == f"{NS}svg"
    assert "chart" in classes(root)
    assert root.get("role") == "img"
    assert root.get("viewBox") == "0 0 720 180"
    title = root.find(f"{NS}title")
    desc = root.find(f"{NS}desc")
    assert title is not None
    assert desc is not None
    assert title.text == "Fires, last hour"
    assert (root.get("aria-labelledby") or "").split() == [title.get("id"), desc.get("id")]
    assert "8 fires" in (desc.text or "")


def test_one_bar_per_bucket_with_heights_proportional_to_fires() -> None:
    root = parse(fires_chart([bucket(0, 10), bucket(1, 20), bucket(2, 40)], title="t"))
    on_time = bars(root, late=False)
    assert len(on_time) == 3
    assert bars(root, late=True) == []
    h = [height(r) for r in on_time]
    assert h[1] == pytest.approx(2 * h[0], abs=0.2)
    assert h[2] == pytest.approx(4 * h[0], abs=0.2)
    # bars stand on one baseline and go left to right
    bottoms = {round(float(r.get("y", "0")) + height(r), 1) for r in on_time}
    assert len(bottoms) == 1
    xs = [float(r.get("x", "0")) for r in on_time]
    assert xs == sorted(xs)
    assert "40" in labels(root)  # the fires axis is labelled with its maximum


def test_late_fires_are_stacked_on_top_of_the_on_time_ones() -> None:
    root = parse(fires_chart([bucket(0, 40, late=10), bucket(1, 20)], title="t"))
    on_time, late = bars(root, late=False), bars(root, late=True)
    assert len(on_time) == 2
    assert len(late) == 1
    full = height(on_time[0]) + height(late[0])
    assert height(late[0]) == pytest.approx(full / 4, abs=0.2)
    assert height(on_time[1]) == pytest.approx(full / 2, abs=0.2)
    # the late part sits right above the on-time part
    assert float(late[0].get("y", "0")) + height(late[0]) == pytest.approx(
        float(on_time[0].get("y", "0")), abs=0.15
    )


def test_each_bar_has_a_tooltip_with_its_minute_fires_and_p99() -> None:
    root = parse(fires_chart([bucket(0, 1), bucket(2, 7, late=2, p99=1500.0)], title="t"))
    tips = [r.findtext(f"{NS}title") or "" for r in bars(root, late=False)]
    assert len(tips) == 2
    assert "2026-11-24 13:02 UTC" in tips[1]
    assert "7 fires" in tips[1]
    assert "p99 1.5 s" in tips[1]
    for rect in bars(root, late=True):
        assert rect.findtext(f"{NS}title") == tips[1]


def test_lateness_lines_break_on_unknown_values() -> None:
    series = [bucket(i, 5, p99=None if i == 2 else 100.0 * (i + 1)) for i in range(5)]
    root = parse(fires_chart(series, title="t"))
    assert len(polylines(root, "p50")) == 1
    p99 = polylines(root, "p99")
    assert len(p99) == 2
    assert all(len((p.get("points") or "").split()) == 2 for p in p99)
    # the highest p99 is drawn at the top of the plot and labels the second axis
    ys = [float(pt.split(",")[1]) for p in p99 for pt in (p.get("points") or "").split()]
    assert min(ys) == pytest.approx(24)
    assert "500 ms" in labels(root)
    for p in p99:
        assert p.get("fill") == "none"


def test_missing_minutes_leave_a_gap_on_the_time_axis() -> None:
    root = parse(fires_chart([bucket(0, 1), bucket(1, 1), bucket(5, 1)], title="t"))
    xs = [float(r.get("x", "0")) for r in bars(root, late=False)]
    step = xs[1] - xs[0]
    assert xs[2] - xs[1] == pytest.approx(4 * step, abs=0.2)
    # and the lateness line does not bridge the gap
    assert len(polylines(root, "p99")) == 2


def test_time_ticks_are_labelled_in_utc() -> None:
    root = parse(fires_chart([bucket(i, 1) for i in range(60)], title="t"))
    ticks = [t for t in labels(root) if t.endswith(" UTC")]
    assert ticks[0] == "13:00 UTC"
    assert ticks[-1] == "13:59 UTC"
    assert 2 <= len(ticks) <= 6


def test_a_hostile_title_is_escaped() -> None:
    hostile = '<script>alert("x")</script> & </title><svg onload=alert(1)>'
    svg = fires_chart([bucket(0, 1)], title=hostile)
    assert "<script" not in svg
    assert "onload" not in svg.replace("&lt;svg onload", "")
    root = parse(svg)
    assert root.findtext(f"{NS}title") == hostile
    assert len(list(root.iter(f"{NS}svg"))) == 1


def test_empty_input_says_there_were_no_runs() -> None:
    root = parse(fires_chart([], title="Fires"))
    assert bars(root, late=False) == []
    assert list(root.iter(f"{NS}polyline")) == []
    assert "no runs in this window" in labels(root)
    assert root.findtext(f"{NS}desc") == "No runs in this window."


def test_all_zero_buckets_still_say_there_were_no_runs() -> None:
    root = parse(fires_chart([bucket(i, 0, p50=None, p99=None) for i in range(10)], title="t"))
    on_time = bars(root, late=False)
    assert len(on_time) == 10
    assert all(height(r) == 0 for r in on_time)
    assert "no runs in this window" in labels(root)


CASES: dict[str, list[Bucket]] = {
    "empty": [],
    "one bucket": [bucket(0, 3, late=1)],
    "one empty bucket": [bucket(0, 0, p50=None, p99=None)],
    "all zeros": [bucket(i, 0, p50=0.0, p99=0.0) for i in range(30)],
    "no lateness known": [bucket(i, i, p50=None, p99=None) for i in range(30)],
    "huge values": [
        bucket(0, 10**15, late=10**14, p50=1e12, p99=1e300),
        bucket(1, 1, p50=float("inf"), p99=float("nan")),
        bucket(2, 10**18, late=10**18, p50=None, p99=3e9),
    ],
    "nonsense values": [bucket(0, -5, late=9, p50=-3.0, p99=-1.0), bucket(1, 2, late=7)],
    "naive and unordered": [
        Bucket(start=datetime(2026, 1, 1, 0, 5), fires=1, late_fires=0, p50_ms=1.0, p99_ms=2.0),  # noqa: DTZ001 - naive means UTC
        Bucket(start=datetime(2026, 1, 1, 0, 1), fires=2, late_fires=0, p50_ms=1.0, p99_ms=2.0),  # noqa: DTZ001
    ],
    "two days": [bucket(i * 60, 1) for i in range(48)],
    "many buckets": [bucket(i, i % 7, late=i % 2) for i in range(1440)],
    "same minute twice": [bucket(0, 1), bucket(0, 2)],
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize(("width", "height_"), [(720, 180), (300, 120), (1, 1)])
def test_any_input_renders_well_formed_svg_without_inline_style(
    name: str, width: int, height_: int
) -> None:
    svg = fires_chart(CASES[name], width=width, height=height_, title=name)
    assert "style=" not in svg
    root = parse(svg)
    _, _, vw, vh = (float(v) for v in (root.get("viewBox") or "").split())
    for el in root.iter():
        assert "style" not in el.attrib
        for attr in ("x", "y", "width", "height", "x1", "x2", "y1", "y2"):
            if attr in el.attrib:
                value = float(el.attrib[attr])
                assert math.isfinite(value), (el.tag, attr, value)
                assert -1 <= value <= max(vw, vh) + 1, (el.tag, attr, value)
        for point in (el.get("points") or "").split():
            px, py = (float(v) for v in point.split(","))
            assert 0 <= px <= vw, point
            assert 0 <= py <= vh, point
    for rect in bars(root, late=False) + bars(root, late=True):
        assert height(rect) >= 0
    assert len(bars(root, late=False)) == len(CASES[name])


def test_the_lateness_series_can_be_renamed_and_the_names_are_escaped() -> None:
    svg = fires_chart(
        [bucket(0, 2, p50=10.0, p99=900.0)], title="t", p50_label="mean", p99_label="<max>"
    )
    root = parse(svg)
    assert "mean lateness" in labels(root)
    assert "<max> lateness" in labels(root)
    tip = bars(root, late=False)[0].findtext(f"{NS}title") or ""
    assert "mean 10 ms, <max> 900 ms" in tip
    assert "<max>" not in svg
    assert len(polylines(root, "p50")) == 1  # the classes do not change


def test_rendering_is_deterministic_and_ids_differ_between_charts() -> None:
    a = fires_chart([bucket(0, 1)], title="a")
    assert a == fires_chart([bucket(0, 1)], title="a")
    b = fires_chart([bucket(0, 2)], title="a")
    title_a, title_b = parse(a).find(f"{NS}title"), parse(b).find(f"{NS}title")
    assert title_a is not None
    assert title_b is not None
    assert title_a.get("id") != title_b.get("id")
