"""Running a node in this process: signal handlers, and a new session after a fence
when ``rejoin`` is set. The node itself is :class:`quartzlite.node.node.Node`."""

from __future__ import annotations

import faulthandler
import logging
import signal
from collections.abc import Callable
from types import FrameType

from quartzlite.clock import Clock
from quartzlite.config import NodeConfig
from quartzlite.errors import StoreError
from quartzlite.node.node import EXIT_FENCED, Node, StopRequest
from quartzlite.storage import migrate
from quartzlite.storage.engine import Database

log = logging.getLogger("quartzlite.node")


def _wait_for_database(config: NodeConfig, stop: StopRequest) -> bool:
    db = Database(config.database_url, io_timeout_s=2)
    try:
        while stop.level == 0:
            try:
                migrate.check_ready(db)
                return True
            except StoreError as error:
                log.info("waiting for the database to rejoin: %s", error.message,
                         extra={"action": "rejoin_wait"})
            stop.wait(1.0)
        return False
    finally:
        db.dispose()


def run_node(
    config: NodeConfig,
    *,
    clock: Clock | None = None,
    on_started: Callable[[Node], None] | None = None,
    stop: StopRequest | None = None,
) -> int:
    """Run a node in this process (signal handlers on the main thread) until it stops;
    returns the exit code. ``on_started`` is called with each new Node once its
    session is registered (again after a rejoin)."""
    stop = stop or StopRequest()
    if not faulthandler.is_enabled():
        # A crash of the interpreter (a C extension, a signal) leaves every thread's
        # stack in the node's log instead of a bare exit status.
        faulthandler.enable()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.request()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while True:
        node = Node(config, clock=clock, stop_request=stop, on_started=on_started)
        code = node.run()
        if code == EXIT_FENCED:
            log.error("node fenced: %s", node.fence_reason, extra={"action": "exit_fenced"})
            if config.rejoin and node.unkillable_left:
                # Threads cannot be killed; only this process's exit ends them. Joining
                # again beside them could overlap with a peer's rerun.
                log.error("not rejoining: %d Python run(s) of the fenced session still "
                          "execute; exiting so that they end", node.unkillable_left,
                          extra={"action": "no_rejoin"})
                return code
            if config.rejoin and stop.level == 0 and _wait_for_database(config, stop):
                log.info("rejoining under a new session", extra={"action": "rejoin"})
                continue
        return code
