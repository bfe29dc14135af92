"""The node's counters for logs and metrics: fires, runs by status, fire lateness."""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

#: Upper bounds (seconds) of the fire-lateness histogram's buckets.
LATENESS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class Histogram:
    """Counts of observations per bucket (fixed upper bounds) and their sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self.bounds) + 1)  # the last bucket is +Inf
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, value)] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative counts ``[(upper bound, count <= bound), ..., (inf, total)]`` and
        the sum of all observations."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[tuple[float, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, total


@dataclass(slots=True)
class NodeStats:
    """Counters for logs and metrics."""

    fires: int = 0
    runs_by_status: dict[str, int] = field(default_factory=dict)
    lateness: Histogram = field(default_factory=lambda: Histogram(LATENESS_BUCKETS))
    db_errors: int = 0
