"""What the views share: the client, the node (under ``quartzlite serve``) and the
metrics registry of one app, kept in ``app.extensions`` so that a process (or a test
session) can build many apps side by side.

The API never imports :mod:`quartzlite.node` (the two are siblings): it reads a node
through the small :class:`NodeView` protocol, which :class:`quartzlite.node.node.Node`
satisfies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from typing import Protocol

from flask import current_app
from prometheus_client import CollectorRegistry

from quartzlite.client import SchedulerClient

from .limits import RefusalLimiter

EXTENSION = "quartzlite"


class LockStatsView(Protocol):
    @property
    def waits(self) -> int: ...
    @property
    def wait_s(self) -> float: ...
    @property
    def by_name(self) -> Mapping[str, float]: ...


class StoreView(Protocol):
    @property
    def lock_stats(self) -> LockStatsView: ...


class HistogramView(Protocol):
    def snapshot(self) -> tuple[list[tuple[float, int]], float]: ...


class StatsView(Protocol):
    @property
    def fires(self) -> int: ...
    @property
    def runs_by_status(self) -> Mapping[str, int]: ...
    @property
    def lateness(self) -> HistogramView: ...
    @property
    def db_errors(self) -> int: ...


class NodeView(Protocol):
    """What the API reads of a running node (health and metrics)."""

    @property
    def session_id(self) -> str: ...
    @property
    def stats(self) -> StatsView: ...
    @property
    def prepared(self) -> Sized: ...
    @property
    def executing(self) -> Sized: ...
    @property
    def running(self) -> int: ...
    @property
    def store(self) -> StoreView: ...

    def is_live(self) -> bool: ...

    def heartbeat_age_s(self) -> float: ...

    def poke(self) -> None:
        """A job changed here: look for due work now, not at the next poll."""


@dataclass(slots=True, kw_only=True)
class ApiState:
    """One app's shared objects. ``node`` is replaced when ``serve``'s node rejoins
    under a new session; ``expect_node`` makes /readyz wait for one."""

    client: SchedulerClient
    node: NodeView | None = None
    expect_node: bool = False
    registry: CollectorRegistry | None = None
    #: Refused writes per token and client address (see :mod:`quartzlite.api.auth`).
    refusals: RefusalLimiter = field(default_factory=RefusalLimiter)


def get_state() -> ApiState:
    state: ApiState = current_app.extensions[EXTENSION]
    return state


def get_client() -> SchedulerClient:
    return get_state().client
