"""Clocks. Code that needs "now" takes a :class:`Clock` (the node takes one; its skew
setting injects a wrong host clock for tests)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""


class SystemClock:
    """The host's clock, optionally shifted by ``skew_s`` seconds (used to inject skew)."""

    def __init__(self, skew_s: float = 0.0) -> None:
        self.skew_s = skew_s

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.skew_s)

    def monotonic(self) -> float:
        return time.monotonic()


def utc(dt: datetime) -> datetime:
    """``dt`` as aware UTC; a naive value is taken to be UTC already (as stored)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
