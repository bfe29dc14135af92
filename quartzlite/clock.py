"""Clocks. Code that needs "now" takes a :class:`Clock` so that tests can move time."""

from __future__ import annotations

import threading
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


class SettableClock:
    """A clock that moves only when told to (db-scheduler's ``SettableClock``)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self._now = start.astimezone(UTC)
        self._mono = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds


def utc(dt: datetime) -> datetime:
    """``dt`` as aware UTC; a naive value is taken to be UTC already (as stored)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
