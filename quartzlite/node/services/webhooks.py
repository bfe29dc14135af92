"""The webhooks thread: fans new events out into deliveries, claims the due ones and
hands each to one of ``webhook_concurrency`` delivery threads, which POSTs it (outside
any transaction, with ``webhook_timeout_s``) and records the answer.

It has connections of its own (``Node.webhooks_db``) and takes no scheduler lock and no
node mutex: a slow, failing or dead receiver holds delivery threads, never a scan, a
fire or a result. The watch schedules it when a delivery is due or an event waits; a
failed attempt schedules it at its retry. A fenced node claims and records nothing (its
store stops at the fence); the claims it held lapse, and other nodes attempt them again.
"""

from __future__ import annotations

import functools
import http.client
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from quartzlite import __version__
from quartzlite.errors import QuartzliteError
from quartzlite.models import ClaimedDelivery
from quartzlite.node.services.base import NodeService
from quartzlite.node.workers import WorkerPool
from quartzlite.storage.webhooks import DeliveryStore
from quartzlite.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    backoff_s,
    signature,
)

if TYPE_CHECKING:
    from quartzlite.node.node import Node

log = logging.getLogger("quartzlite.node.webhooks")

#: Most bytes of a receiver's answer read (the rest is dropped with the connection).
MAX_ANSWER_BYTES = 64 * 1024
#: Most characters of an error answer's body kept in the delivery log.
ERROR_SNIPPET = 200


@dataclass(frozen=True, slots=True)
class Answer:
    """What one attempt got: delivered (a 2xx), or why not."""

    delivered: bool
    status_code: int | None
    error: str | None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer like any non-2xx (a POST is not re-sent elsewhere)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


#: HTTP(S)_PROXY and NO_PROXY from the environment apply, as for any urllib client.
_OPENER = urllib.request.build_opener(_NoRedirects)


def post(item: ClaimedDelivery, *, timeout_s: float, now: Callable[[], float] = time.time) -> Answer:
    """POST one delivery attempt, signed at ``now()``; never raises."""
    body = item.body.encode()
    request = urllib.request.Request(item.url, data=body, method="POST", headers={
        "Content-Type": "application/json",
        "User-Agent": f"quartzlite/{__version__}",
        EVENT_HEADER: item.event.value,
        DELIVERY_HEADER: str(item.id),
        SIGNATURE_HEADER: signature(item.secret, body, int(now())),
    })
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            code = int(response.status)
            response.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as error:
        try:
            snippet = error.read(ERROR_SNIPPET).decode("utf-8", "replace").strip()
        except (OSError, http.client.HTTPException):
            snippet = ""
        finally:
            error.close()
        return Answer(False, error.code, f"HTTP {error.code}" + (f": {snippet}" if snippet else ""))
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            return Answer(False, None, f"timed out after {timeout_s:g}s")
        return Answer(False, None, f"{type(reason).__name__}: {reason}")
    if 200 <= code < 300:
        return Answer(True, code, None)
    return Answer(False, code, f"HTTP {code}")


class Webhooks(NodeService):
    name = "webhooks"
    #: A failed round is logged and tried again; deliveries never stop a node.
    critical = False
    #: Events fanned out per transaction, and transactions per round at most.
    FAN_OUT_BATCH = 200
    FAN_OUT_ROUNDS = 10
    #: A claim lasts the attempt's timeout plus this: past it, the delivery is due again.
    LEASE_MARGIN_S = 30.0

    def __init__(self, node: Node) -> None:
        # Scheduled by the watch and by its own retries; the interval is a net.
        super().__init__(node, 60.0)
        self.store = DeliveryStore(node.webhooks_db, stop=node.fenced)
        self.workers = WorkerPool("webhook")
        self._lock = threading.Lock()
        self._busy = 0

    @property
    def busy(self) -> int:
        """Deliveries being attempted now."""
        return self._busy

    def run_once(self) -> float | None:
        node = self.node
        config = node.config
        if not node.working or config.webhook_concurrency == 0:
            return None
        for _ in range(self.FAN_OUT_ROUNDS):
            if self.store.fan_out(limit=self.FAN_OUT_BATCH) < self.FAN_OUT_BATCH:
                break
        with self._lock:
            free = config.webhook_concurrency - self._busy
        if free <= 0:
            return None  # each delivery that ends wakes this thread
        claimed = self.store.claim(
            session_id=node.session_id, limit=free,
            lease_s=config.webhook_timeout_s + self.LEASE_MARGIN_S,
            max_attempts=config.webhook_max_attempts,
        )
        for item in claimed:
            with self._lock:
                self._busy += 1
            self.workers.submit(functools.partial(self._deliver, item))
        # All places taken: the next round comes as one frees. Else nothing more is due
        # now: the watch (or a retry) says when.
        return 0.0 if len(claimed) == free else None

    def _deliver(self, item: ClaimedDelivery) -> None:
        """On a delivery thread: one attempt, and its answer recorded."""
        node = self.node
        config = node.config
        try:
            if node.fenced.is_set():
                return  # its claim lapses: another node attempts it
            answer = post(item, timeout_s=config.webhook_timeout_s)
            retry = None
            if not answer.delivered and item.attempt < config.webhook_max_attempts:
                retry = backoff_s(item.attempt)
            host = urlsplit(item.url).hostname
            if answer.delivered:
                log.info("delivered %s %d to %s (attempt %d)", item.event.value, item.id, host,
                         item.attempt, extra={"action": "webhook_delivered", "delivery": item.id})
            else:
                log.warning(
                    "delivery %d (%s) to %s failed (attempt %d): %s; %s", item.id,
                    item.event.value, host, item.attempt, answer.error,
                    "giving up" if retry is None else f"retrying in {retry:g}s",
                    extra={"action": "webhook_failed" if retry is None else "webhook_retry",
                           "delivery": item.id},
                )
            try:
                self.store.record(item, session_id=node.session_id, delivered=answer.delivered,
                                  status_code=answer.status_code, error=answer.error,
                                  retry_in_s=retry)
            except QuartzliteError as error:
                # Its claim lapses and the delivery is attempted again (at least once).
                log.warning("could not record the answer of delivery %d: %s", item.id,
                            error.message, extra={"action": "webhook_record_failed"})
            if retry is not None:
                self.schedule(retry)
        finally:
            with self._lock:
                self._busy -= 1
            self.wake()
