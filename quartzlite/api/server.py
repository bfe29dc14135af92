"""Serving the app with waitress (pure Python, threads, in-process), and the rule that
keeps the API closed: no listening beyond loopback while no API token exists.

:class:`ApiServer` binds when it is built (so a taken port fails before anything else
starts), serves in a daemon thread, and stops in order: stop accepting, let requests in
flight finish (a few seconds at most), close every connection, stop the workers.
"""

from __future__ import annotations

import ipaddress
import logging
import resource
import threading
import time
from typing import Any

from flask import Flask
from waitress.server import BaseWSGIServer, create_server

from quartzlite.client import SchedulerClient
from quartzlite.config import ApiConfig
from quartzlite.errors import QuartzliteError, ValidationError

from .waitress_errors import JsonErrorChannel

log = logging.getLogger("quartzlite.api")

#: File descriptors kept out of the API's connection limit: the database pools, the
#: node's journal and logs, the pipes of running jobs. A node out of descriptors cannot
#: heartbeat and fences itself, so connections never get them all.
FD_RESERVE = 256
#: Connections the kernel queues while the server is at its connection limit (waitress's
#: default, stated: the kernel caps it at net.core.somaxconn).
BACKLOG = 1024


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def fit_connection_limit(wanted: int) -> int:
    """The connection limit the process's descriptor limit (RLIMIT_NOFILE) has room for,
    with ``FD_RESERVE`` kept free: the soft limit is raised toward the hard one when
    needed; past what it allows, the limit is lowered (at least half the descriptors
    stay for connections). Beyond it accept() would fail with EMFILE, and so would
    the node's database connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as error:
            log.warning("cannot raise the file descriptor limit from %d to %d: %s", soft,
                        target, error, extra={"action": "api_fd_limit"})
        else:
            log.info("file descriptor limit raised from %d to %d for %d API connections",
                     soft, target, wanted, extra={"action": "api_fd_limit"})
            soft = target
    if soft >= needed:
        return wanted
    fitted = max(soft - FD_RESERVE, soft // 2)
    log.warning(
        "API connection limit lowered from %d to %d: the file descriptor limit is %d (hard "
        "%s); raise it (ulimit -n, LimitNOFILE=) for more", wanted, fitted, soft,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
        extra={"action": "api_connection_limit"},
    )
    return fitted


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


def _proxy(address: str) -> dict[str, Any]:
    """waitress's settings for a trusted TLS-terminating proxy (none: no settings)."""
    if not address.strip():
        return {}
    return {"trusted_proxy": address.strip(), "trusted_proxy_count": 1,
            "trusted_proxy_headers": {"x-forwarded-proto", "x-forwarded-for"}}


class ApiServer:
    """A waitress server for ``app`` in a daemon thread."""

    def __init__(self, app: Flask, config: ApiConfig) -> None:
        self.config = config
        self.connection_limit = fit_connection_limit(config.connection_limit)
        try:
            self._server: Any = create_server(
                app,
                host=config.host,
                port=config.port,
                threads=config.threads,
                ident="quartzlite",
                clear_untrusted_proxy_headers=True,
                **_proxy(config.trusted_proxy),
                # Our own error shape covers bodies too large for Flask; waitress's own
                # limit only guards against absurd uploads.
                max_request_body_size=16 * 1024 * 1024,
                max_request_header_size=config.max_header_bytes,
                connection_limit=self.connection_limit,
                channel_timeout=config.channel_timeout_s,
                cleanup_interval=config.cleanup_interval_s,
                backlog=BACKLOG,
                # poll(), not select(): select() fails on descriptors past 1023, which
                # a thousand connections (plus the node's own) reach.
                asyncore_use_poll=True,
            )
        except OSError as error:
            raise QuartzliteError(
                f"cannot listen on {config.host}:{config.port}: {error.strerror or error}"
            ) from error
        self._map: dict[int, Any] = getattr(self._server, "_map", None) or self._server.map
        # One listener (the server itself) or several (a MultiSocketServer): each makes
        # its connections with its channel_class. Nothing is accepted before run().
        for dispatcher in self._map.values():
            if isinstance(dispatcher, BaseWSGIServer):
                dispatcher.channel_class = JsonErrorChannel
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
            "API listening on %s (at most %d connections, silent ones closed after %d s)",
            ", ".join(f"{h}:{p}" for h, p in self.addresses), self.connection_limit,
            self.config.channel_timeout_s, extra={"action": "api_listening"},
        )
        first_host, first_port = self.addresses[0]
        host = f"[{first_host}]" if ":" in first_host else first_host
        log.info("dashboard at http://%s:%d/ui/", host, first_port, extra={"action": "ui_listening"})

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
        try:
            self._trigger().pull_trigger(self._close_listeners)
        except (OSError, StopIteration):
            # Its trigger is closed already (seen on a loaded machine: EBADF): the loop
            # is ending; close the listeners from here.
            self._close_listeners()
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
