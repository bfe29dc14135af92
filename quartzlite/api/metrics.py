"""Prometheus metrics: a custom collector that reads a node's counters at scrape time.

Each app has a private :class:`CollectorRegistry` (never the global one), so a process
or a test session can build many apps. Without a node (``quartzlite api``) only
``quartzlite_build_info`` and ``quartzlite_node_live 0`` are exposed.

===========================================  =========  ===================================
metric                                       type       meaning
===========================================  =========  ===================================
quartzlite_fires_total                       counter    runs this node fired
quartzlite_runs_total{status}                counter    runs this node finished, by status
quartzlite_fire_lateness_seconds             histogram  run start minus planned instant
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
from collections.abc import Iterator

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

from .context import ApiState


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class NodeCollector(Collector):
    """Reads the node of an :class:`ApiState` at every scrape."""

    def __init__(self, state: ApiState, version: str) -> None:
        self.state = state
        self.version = version

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
        cumulative, total = stats.lateness.snapshot()
        buckets = [(_le(bound), float(count)) for bound, count in cumulative]
        yield HistogramMetricFamily(
            "quartzlite_fire_lateness_seconds",
            "Seconds between a run's planned instant and its start on a worker (database clock)",
            buckets=buckets,
            sum_value=total,
        )
        yield GaugeMetricFamily(
            "quartzlite_prepared_jobs", "Jobs this node prepared that are not yet due",
            value=len(node.prepared),
        )
        yield GaugeMetricFamily(
            "quartzlite_executing_jobs",
            "Runs fired on this node whose result is not recorded yet (waiting for their "
            "instant or a place, running, or ended)",
            value=len(node.executing),
        )
        yield GaugeMetricFamily(
            "quartzlite_running_runs",
            "Runs holding one of this node's places now (at most its capacity)",
            value=node.running,
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
