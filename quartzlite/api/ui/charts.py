"""Small SVG charts for the dashboard, rendered on the server as strings.

The page's CSP forbids inline styles, so the SVG carries no ``style=`` attribute: it is
drawn with geometry and a few presentation attributes (``fill="none"``, ``text-anchor``),
and coloured by class in ``static/style.css`` (``svg.chart .bar``, ``.bar.late``,
``.line.p50``, ``.line.p99``, ``.axis``, ``.grid``, ``.label``). Every text goes through
:func:`html.escape`. Times are shown in UTC (the page's ``<time>`` elements carry local time).

Stdlib only: this module is imported by the views but knows nothing of Flask.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

__all__ = ["LATE_THRESHOLD_MS", "Bucket", "fires_chart"]

#: A fire counts as late when it started more than this after its planned instant.
LATE_THRESHOLD_MS = 1000

_MIN_WIDTH = 240
_MIN_HEIGHT = 100
# Plot margins in user units: room for the left (fires) and right (lateness) axis
# labels, the legend above and the time ticks below.
_LEFT = 44
_RIGHT = 56
_TOP = 24
_BOTTOM = 22
_MAX_BAR = 40  # a lone bucket is a bar, not a wall


@dataclass(frozen=True, slots=True, kw_only=True)
class Bucket:
    """One time slot (typically a minute) of fires.

    ``start`` is the slot's beginning (aware, or naive meaning UTC); ``late_fires`` counts
    the fires that started more than a second late; ``p50_ms``/``p99_ms`` are lateness
    percentiles in milliseconds, ``None`` when unknown.
    """

    start: datetime
    fires: int
    late_fires: int
    p50_ms: float | None
    p99_ms: float | None


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _num(value: float) -> str:
    """A coordinate: one decimal, no ``-0.0``."""
    text = f"{value:.1f}"
    if text.endswith(".0"):
        text = text[:-2]
    return "0" if text == "-0" else text


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _finite(value: float | None) -> float | None:
    """Lateness to plot: ``None`` for unknown or non-finite values, never below zero."""
    if value is None or not math.isfinite(value):
        return None
    return max(0.0, float(value))


def _count(value: int) -> str:
    """A count, compact when large: 999, 12.3k, 4.5M."""
    value = max(0, int(value))
    if value < 10_000:
        return str(value)
    for divisor, suffix in ((10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k")):
        if value >= divisor:
            scaled = value / divisor
            return f"{scaled:.0f}{suffix}" if scaled >= 100 else f"{scaled:.1f}{suffix}"
    return str(value)  # pragma: no cover - unreachable


def _duration(ms: float | None) -> str:
    """A lateness for people: 350 ms, 1.2 s, 3.5 min, 2.0 h, 3.1 d."""
    if ms is None:
        return "n/a"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    days = seconds / 86400
    return f"{days:,.1f} d" if days < 100_000 else f"{days:.3g} d"


@dataclass(frozen=True, slots=True)
class _Point:
    bucket: Bucket
    start: datetime  # in UTC
    slot: int  # position on the time axis, in steps from the first bucket
    fires: int
    late: int
    p50: float | None
    p99: float | None


def _points(buckets: Sequence[Bucket]) -> tuple[list[_Point], int]:
    """The buckets in time order with their slot on the axis, and the number of slots.

    The step is the smallest gap between two buckets, so missing slots (no fires in
    those minutes) leave gaps instead of squeezing the time axis.
    """
    ordered = sorted(((_utc(b.start), b) for b in buckets), key=lambda pair: pair[0])
    if not ordered:
        return [], 0
    t0 = ordered[0][0]
    gaps = [(later - earlier).total_seconds() for (earlier, _), (later, _) in pairwise(ordered)]
    step = min((g for g in gaps if g > 0), default=60.0)
    points: list[_Point] = []
    for start, bucket in ordered:
        fires = max(0, int(bucket.fires))
        points.append(
            _Point(
                bucket=bucket,
                start=start,
                slot=round((start - t0).total_seconds() / step),
                fires=fires,
                late=min(fires, max(0, int(bucket.late_fires))),
                p50=_finite(bucket.p50_ms),
                p99=_finite(bucket.p99_ms),
            )
        )
    return points, points[-1].slot + 1


def _text(x: float, y: float, text: str, *, anchor: str = "start", extra: str = "") -> str:
    cls = "label" + (f" {extra}" if extra else "")
    return (
        f'<text class="{cls}" x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}">'
        f"{_esc(text)}</text>"
    )


def _polylines(cls: str, series: list[tuple[int, float, float | None]], tick: float) -> list[str]:
    """Lines through ``(slot, x, value_y)``; broken where a value is unknown or a slot is
    missing. A lone point becomes a short horizontal tick so that it stays visible."""
    runs: list[list[tuple[float, float]]] = []
    previous_slot: int | None = None
    for slot, x, y in series:
        if y is None:
            previous_slot = None
            continue
        if previous_slot is None or slot != previous_slot + 1 or not runs:
            runs.append([])
        runs[-1].append((x, y))
        previous_slot = slot
    out = []
    for run in runs:
        if len(run) == 1:
            (x, y) = run[0]
            run = [(x - tick, y), (x + tick, y)]
        coords = " ".join(f"{_num(x)},{_num(y)}" for x, y in run)
        out.append(f'<polyline class="line {cls}" fill="none" points="{coords}"/>')
    return out


def _legend(x0: float, x_max: float, p50_label: str, p99_label: str) -> list[str]:
    """Colour keys (classes ``key fires|late|p50|p99``), left out when they do not fit."""
    keys = (
        ("fires", "fires", "rect"),
        ("late", "late >1 s", "rect"),
        ("p50", f"{p50_label} lateness", "line"),
        ("p99", f"{p99_label} lateness", "line"),
    )
    out = ['<g class="legend">']
    x = x0
    for cls, text, shape in keys:
        if shape == "rect":
            out.append(f'<rect class="key {cls}" x="{_num(x)}" y="5" width="10" height="10"/>')
        else:
            out.append(
                f'<line class="key {cls}" x1="{_num(x)}" y1="10" x2="{_num(x + 10)}" y2="10"/>'
            )
        out.append(_text(x + 14, 14, text))
        x += 14 + 6 * len(text) + 14
    if x > x_max:
        return []
    out.append("</g>")
    return out


def _chart_id(title: str, points: Sequence[_Point], width: int, height: int) -> str:
    """A stable id for aria-labelledby, distinct for charts with different content."""
    digest = hashlib.sha256(
        repr(
            (
                title,
                width,
                height,
                [(p.start.isoformat(), p.fires, p.late, p.p50, p.p99) for p in points],
            )
        ).encode()
    ).hexdigest()
    return f"chart-{digest[:10]}"


def fires_chart(
    buckets: Sequence[Bucket],
    *,
    width: int = 720,
    height: int = 180,
    title: str,
    p50_label: str = "p50",
    p99_label: str = "p99",
) -> str:
    """An ``<svg class="chart">`` of fires per bucket (on-time ``rect.bar`` with the late
    ones stacked on top as ``rect.bar.late``) and the p50/p99 lateness lines on a second
    (right) axis. Each bar has a ``<title>`` tooltip; ``<desc>`` sums the window up.

    ``p50_label``/``p99_label`` name the two lateness series in the legend, the tooltips
    and the description (e.g. ``"mean"``/``"max"`` when the buckets carry those instead);
    the CSS classes stay ``p50``/``p99``."""
    width = max(_MIN_WIDTH, int(width))
    height = max(_MIN_HEIGHT, int(height))
    points, slots = _points(buckets)
    cid = _chart_id(f"{title}\0{p50_label}\0{p99_label}", points, width, height)
    left, right, top, bottom = _LEFT, width - _RIGHT, _TOP, height - _BOTTOM
    plot_w, plot_h = right - left, bottom - top

    total = sum(p.fires for p in points)
    late_total = sum(p.late for p in points)
    max_fires = max((p.fires for p in points), default=0)
    lateness = [v for p in points for v in (p.p50, p.p99) if v is not None]
    max_late = max(lateness, default=0.0)
    p50s = [p.p50 for p in points if p.p50 is not None]
    p99s = [p.p99 for p in points if p.p99 is not None]

    if not points:
        summary = "No runs in this window."
    else:
        first, last = points[0].start, points[-1].start
        plural = "" if len(points) == 1 else "s"
        summary = (
            f"{len(points)} bucket{plural} from {first:%Y-%m-%d %H:%M} "
            f"to {last:%Y-%m-%d %H:%M} UTC: "
            f"{total:,} fires, {late_total:,} of them more than "
            f"{LATE_THRESHOLD_MS / 1000:g} s late, at most {max_fires:,} in one bucket. "
            f"Highest lateness: {p50_label} {_duration(max(p50s, default=None))}, "
            f"{p99_label} {_duration(max(p99s, default=None))}."
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" '
        f'aria-labelledby="{cid}-title {cid}-desc">',
        f'<title id="{cid}-title">{_esc(title)}</title>',
        f'<desc id="{cid}-desc">{_esc(summary)}</desc>',
    ]

    # Grid (top and middle) and axes: baseline, left (fires), right (lateness).
    for frac in (0.0, 0.5):
        y = top + plot_h * frac
        parts.append(f'<line class="grid" x1="{left}" y1="{_num(y)}" x2="{right}" y2="{_num(y)}"/>')
    parts.append(f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>')
    parts.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>')
    parts.append(f'<line class="axis" x1="{right}" y1="{top}" x2="{right}" y2="{bottom}"/>')

    # The legend, above the plot.
    parts.extend(_legend(left, right, p50_label, p99_label))

    # Axis labels: maxima at the top, zeros at the baseline.
    parts.append(_text(left - 4, bottom + 4, "0", anchor="end"))
    if max_fires:
        parts.append(_text(left - 4, top + 4, _count(max_fires), anchor="end", extra="y-max"))
    if lateness:
        parts.append(_text(right + 4, bottom + 4, "0 ms"))
        parts.append(_text(right + 4, top + 4, _duration(max_late), extra="y2-max"))

    if total == 0:
        parts.append(
            _text(
                left + plot_w / 2,
                top + plot_h / 2,
                "no runs in this window",
                anchor="middle",
                extra="empty",
            )
        )

    slot_w = plot_w / slots if slots else float(plot_w)
    bar_w = min(_MAX_BAR, max(0.5, slot_w * 0.8))
    series50: list[tuple[int, float, float | None]] = []
    series99: list[tuple[int, float, float | None]] = []

    def y_late(value: float | None) -> float | None:
        if value is None:
            return None
        return bottom - (value / max_late * plot_h if max_late > 0 else 0.0)

    for p in points:
        cx = left + slot_w * (p.slot + 0.5)
        x = cx - bar_w / 2
        tooltip = _esc(
            f"{p.start:%Y-%m-%d %H:%M} UTC: {p.fires:,} fires, {p.late:,} late; "
            f"{p50_label} {_duration(p.p50)}, {p99_label} {_duration(p.p99)}"
        )
        h_all = p.fires / max_fires * plot_h if max_fires else 0.0
        h_late = p.late / max_fires * plot_h if max_fires else 0.0
        if 0 < h_all < 1:  # keep a fire visible however tall the tallest bar is
            h_late = h_late / h_all
            h_all = 1.0
        h_on = h_all - h_late
        parts.append(
            f'<rect class="bar" x="{_num(x)}" y="{_num(bottom - h_on)}" '
            f'width="{_num(bar_w)}" height="{_num(h_on)}"><title>{tooltip}</title></rect>'
        )
        if p.late:
            parts.append(
                f'<rect class="bar late" x="{_num(x)}" y="{_num(bottom - h_all)}" '
                f'width="{_num(bar_w)}" height="{_num(h_late)}"><title>{tooltip}</title></rect>'
            )
        series50.append((p.slot, cx, y_late(p.p50)))
        series99.append((p.slot, cx, y_late(p.p99)))

    tick = max(1.5, bar_w / 2)
    parts.extend(_polylines("p50", series50, tick))
    parts.extend(_polylines("p99", series99, tick))

    # Time ticks: up to one per ~140 units, at bucket positions, first and last included.
    if points:
        multi_day = points[-1].start.date() != points[0].start.date()
        fmt = "%m-%d %H:%M" if multi_day else "%H:%M"
        count = max(1, min(len(points), plot_w // 140))
        picks = sorted(
            {round(i * (len(points) - 1) / (count - 1)) for i in range(count)} if count > 1 else {0}
        )
        for n, index in enumerate(picks):
            p = points[index]
            cx = left + slot_w * (p.slot + 0.5)
            anchor, tx = "middle", cx
            if len(picks) > 1 and n == 0:
                anchor, tx = "start", max(left, cx - 4)
            elif len(picks) > 1 and n == len(picks) - 1:
                anchor, tx = "end", min(right, cx + 4)
            parts.append(
                f'<line class="axis tick" x1="{_num(cx)}" y1="{bottom}" '
                f'x2="{_num(cx)}" y2="{bottom + 3}"/>'
            )
            parts.append(
                _text(tx, bottom + 15, f"{p.start:{fmt}} UTC", anchor=anchor, extra="x-tick")
            )

    parts.append("</svg>")
    return "\n".join(parts)
