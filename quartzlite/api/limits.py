"""Rate limits of the API: refused writes (4xx) per token and per client address, so
that nobody can grow the audit trail faster than a known bound."""

from __future__ import annotations

import threading
import time

#: Refused writes allowed in a row per token and per client address ...
REFUSED_BURST = 20
#: ... and then this many a second.
REFUSED_PER_S = 1.0


class RefusalLimiter:
    """Token buckets of refused writes, one per token name and one per client address
    (in this process). Thread-safe; idle full buckets are dropped when many pile up."""

    MAX_BUCKETS = 10_000

    def __init__(self, burst: int = REFUSED_BURST, per_s: float = REFUSED_PER_S) -> None:
        self.burst = float(burst)
        self.per_s = per_s
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}  # key -> (level, at)

    def take(self, token: str, address: str) -> float:
        """Count one refusal; 0 when allowed, else the seconds until one would be."""
        now = time.monotonic()
        keys = (("token", token), ("address", address))
        with self._lock:
            levels = [self._level(key, now) for key in keys]
            if min(levels) < 1.0:
                return (1.0 - min(levels)) / self.per_s
            for key, level in zip(keys, levels, strict=True):
                self._buckets[key] = (level - 1.0, now)
            if len(self._buckets) > self.MAX_BUCKETS:
                self._buckets = {
                    k: v for k, v in self._buckets.items() if self._level(k, now) < self.burst
                }
        return 0.0

    def _level(self, key: tuple[str, str], now: float) -> float:
        level, at = self._buckets.get(key, (self.burst, now))
        return min(self.burst, level + (now - at) * self.per_s)


__all__ = ["REFUSED_BURST", "REFUSED_PER_S", "RefusalLimiter"]
