"""Prometheus metrics: a custom collector that reads a node's counters at scrape time.

Each app has a private :class:`CollectorRegistry` (never the global one), so a process
or a test session can build many apps. Without a node (``quartzlite api``) only
``quartzlite_build_info`` and ``quartzlite_node_live 0`` are exposed.

===========================================  =========  ===================================
metric                                       type       meaning
===========================================  =========  ===================================
quartzlite_fires_total                       counter    runs this node fired
quartzlite_runs_total{status}                counter    runs this node finished, by status
quartzlite_fire_lateness_seconds             histogram  fire instant minus planned instant
quartzlite_prepared_jobs                     gauge      jobs prepared (owned, not yet due)
quartzlite_executing_jobs                    gauge      runs executing now
quartzlite_heartbeat_age_seconds             gauge      since the last successful heartbeat
quartzlite_node_live                         gauge      1 while the session is live
quartzlite_lock_wait_seconds_total{lock}     counter    time spent waiting for lock rows
quartzlite_lock_waits_total                  counter    lock rows taken
quartzlite_db_errors_total                   counter    database errors seen by the node
===========================================  =========  ===================================
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from quartzlite.enums import RunStatus

from .context import ApiState, NodeView

#: Upper bounds (seconds) of the lateness histogram's buckets.
LATENESS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class _Histogram:
    """Cumulative buckets folded from the node's list of lateness values.

    The node appends each fire's lateness to a list that it trims from the front when
    it grows large, so neither its length nor an index marks what was counted already.
    We keep a reference to the newest value counted and find that very object again
    (identity, not equality) on the next scrape: everything after it is new; if it was
    trimmed away, everything in the list is new.
    """

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.node: NodeView | None = None
        self._reset()

    def _reset(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.mark: object | None = None

    def fold(self, node: NodeView) -> None:
        if node is not self.node:  # a new node (serve's node rejoined): start again
            self._reset()
            self.node = node
        snapshot = list(node.stats.lateness_s)  # the firer thread appends meanwhile
        start = 0
        if self.mark is not None:
            for index in range(len(snapshot) - 1, -1, -1):
                if snapshot[index] is self.mark:
                    start = index + 1
                    break
        for value in snapshot[start:]:
            if math.isnan(value):
                continue
            self.total += value
            for index, bound in enumerate(self.bounds):
                if value <= bound:
                    self.counts[index] += 1
                    break
            else:
                self.counts[-1] += 1
        if snapshot:
            self.mark = snapshot[-1]

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((_le(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


class NodeCollector(Collector):
    """Reads the node of an :class:`ApiState` at every scrape."""

    def __init__(self, state: ApiState, version: str) -> None:
        self.state = state
        self.version = version
        self._lock = threading.Lock()
        self._lateness = _Histogram(LATENESS_BUCKETS)

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("quartzlite_build", "quartzlite version")
        info.add_metric([], {"version": self.version})
        yield info
        node = self.state.node
        yield GaugeMetricFamily(
            "quartzlite_node_live",
            "1 while this process's node session is registered, renewed and not fenced",
            value=1.0 if node is not None and node.is_live() else 0.0,
        )
        if node is None:
            return
        stats = node.stats
        yield CounterMetricFamily(
            "quartzlite_fires", "Runs this node fired (prepared -> executing)", value=stats.fires
        )
        runs = CounterMetricFamily(
            "quartzlite_runs", "Runs this node finished, by final status", labels=["status"]
        )
        counts = dict(stats.runs_by_status)
        for status in RunStatus:
            if status.is_final:
                runs.add_metric([status.value], counts.get(status.value, 0))
        yield runs
        with self._lock:
            self._lateness.fold(node)
            buckets = self._lateness.buckets()
            total = self._lateness.total
        yield HistogramMetricFamily(
            "quartzlite_fire_lateness_seconds",
            "Seconds between a run's planned instant and its fire (database clock)",
            buckets=buckets,
            sum_value=total,
        )
        yield GaugeMetricFamily(
            "quartzlite_prepared_jobs", "Jobs this node prepared that are not yet due",
            value=len(node.prepared),
        )
        yield GaugeMetricFamily(
            "quartzlite_executing_jobs", "Runs executing on this node now",
            value=len(node.executing),
        )
        yield GaugeMetricFamily(
            "quartzlite_heartbeat_age_seconds",
            "Seconds since this node's last successful heartbeat (monotonic clock)",
            value=node.heartbeat_age_s(),
        )
        lock_stats = node.store.lock_stats
        waits = CounterMetricFamily(
            "quartzlite_lock_wait_seconds", "Seconds spent waiting for lock rows, by lock",
            labels=["lock"],
        )
        for name, seconds in sorted(dict(lock_stats.by_name).items()):
            waits.add_metric([name], seconds)
        yield waits
        yield CounterMetricFamily(
            "quartzlite_lock_waits", "Lock rows taken (SELECT ... FOR UPDATE)",
            value=lock_stats.waits,
        )
        yield CounterMetricFamily(
            "quartzlite_db_errors", "Database errors this node saw (retried or not)",
            value=stats.db_errors,
        )


def build_registry(state: ApiState, version: str) -> CollectorRegistry:
    """A private registry holding one :class:`NodeCollector` of ``state``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(state, version))
    return registry
