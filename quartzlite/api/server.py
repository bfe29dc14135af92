"""Serving the app with waitress (pure Python, threads, in-process), and the rule that
keeps the API closed: no listening beyond loopback while no API token exists.

:class:`ApiServer` binds when it is built (so a taken port fails before anything else
starts), serves in a daemon thread, and stops in order: stop accepting, let requests in
flight finish (a few seconds at most), close every connection, stop the workers.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from typing import Any

from flask import Flask
from waitress.server import create_server

from quartzlite.client import SchedulerClient
from quartzlite.config import ApiConfig
from quartzlite.errors import QuartzliteError, ValidationError

log = logging.getLogger("quartzlite.api")


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, client: SchedulerClient) -> None:
    """Refuse a non-loopback address while no API token exists (the API can make the
    cluster run shell commands: it is never open to the network without a token)."""
    if is_loopback(host):
        return
    if not client.has_tokens():
        raise ValidationError(
            "host",
            f"refusing to listen on {host} while no API token exists: create one with "
            "`quartzlite token create --name NAME --role admin` (or listen on 127.0.0.1)",
        )


class ApiServer:
    """A waitress server for ``app`` in a daemon thread."""

    def __init__(self, app: Flask, config: ApiConfig) -> None:
        self.config = config
        try:
            self._server: Any = create_server(
                app,
                host=config.host,
                port=config.port,
                threads=config.threads,
                ident="quartzlite",
                clear_untrusted_proxy_headers=True,
                # Our own error shape covers bodies too large for Flask; waitress's own
                # limit only guards against absurd uploads.
                max_request_body_size=16 * 1024 * 1024,
            )
        except OSError as error:
            raise QuartzliteError(
                f"cannot listen on {config.host}:{config.port}: {error.strerror or error}"
            ) from error
        self._map: dict[int, Any] = getattr(self._server, "_map", None) or self._server.map
        self._thread: threading.Thread | None = None

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where it listens (host, port): the real port when the config said 0."""
        if hasattr(self._server, "effective_listen"):
            return [(str(h), int(p)) for h, p in self._server.effective_listen]
        return [(str(self._server.effective_host), int(self._server.effective_port))]

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    @property
    def url(self) -> str:
        host, port = self.addresses[0]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="api-server", daemon=True)
        self._thread.start()
        log.info(
            "API listening on %s", ", ".join(f"{h}:{p}" for h, p in self.addresses),
            extra={"action": "api_listening"},
        )

    def _run(self) -> None:
        try:
            self._server.run()
        except Exception:
            log.exception("the API server stopped with an error", extra={"action": "api_crashed"})

    def _trigger(self) -> Any:
        return next(d for d in list(self._map.values()) if hasattr(d, "pull_trigger"))

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, wait up to ``grace_s`` for requests in flight, close all."""
        if self._thread is None or not self._thread.is_alive():
            self._close_now()
            return
        # Closing a listener (in the loop's thread, through its trigger) closes the
        # trigger too; the loop then runs on while connections remain.
        self._trigger().pull_trigger(self._close_listeners)
        dispatcher = self._server.task_dispatcher
        deadline = time.monotonic() + grace_s
        idle = threading.Event()  # never set: a bounded, interruptible poll
        while time.monotonic() < deadline and (dispatcher.active_count or dispatcher.queue):
            idle.wait(0.05)
        # Ask the remaining connections to close: the loop does it at its next round
        # (waitress's own maintenance uses the same flag), then ends with an empty map.
        for channel in list(self._map.values()):
            channel.will_close = True
        self._thread.join(grace_s + 2)
        if self._thread.is_alive():
            log.warning("the API server loop did not end in time", extra={"action": "api_stop_slow"})
        dispatcher.shutdown(cancel_pending=True, timeout=grace_s)
        log.info("API stopped", extra={"action": "api_stopped"})

    def _close_listeners(self) -> None:
        for dispatcher in list(self._map.values()):
            if getattr(dispatcher, "accepting", False):
                dispatcher.close()

    def _close_now(self) -> None:
        for dispatcher in list(self._map.values()):
            dispatcher.close()
        self._map.clear()
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
