"""A counting TCP proxy in front of the MySQL server: what one node sends, by command
and by statement, whatever other clients of the shared server do.

The node connects to the proxy's port instead of the server's. Every client packet
that starts a command (sequence number 0) is counted: COM_QUERY by its SQL
(normalised: literals replaced by ``?``, ``IN (...)`` lists folded), other commands
by name (COM_PING is a ping, not a statement: ``Questions`` does not count it).

Used by the idle workload as a cross-check of the server's ``Questions`` delta, and by
:mod:`bench.profile` to say which statements a workload costs.
"""

from __future__ import annotations

import re
import select
import socket
import threading
import time
from collections import Counter
from typing import Any

COMMANDS = {0x01: "COM_QUIT", 0x02: "COM_INIT_DB", 0x03: "COM_QUERY", 0x0E: "COM_PING",
            0x11: "COM_CHANGE_USER", 0x16: "COM_STMT_PREPARE", 0x17: "COM_STMT_EXECUTE",
            0x19: "COM_STMT_CLOSE", 0x1F: "COM_RESET_CONNECTION"}
#: Commands the server does not count in Questions.
NOT_QUESTIONS = {"COM_PING", "COM_QUIT", "COM_STMT_PREPARE", "COM_STMT_CLOSE", "COM_STATISTICS"}

_STRING = re.compile(r"'(?:[^'\\]|\\.)*'")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])", re.IGNORECASE)
_LIST = re.compile(r"\((?:\s*\?\s*,)+\s*\?\s*\)")
_VALUES = re.compile(r"(VALUES\s*\([^)]*\))(\s*,\s*\([^)]*\))+", re.IGNORECASE)
_SPACE = re.compile(r"\s+")


def normalise(sql: str) -> str:
    text = _STRING.sub("?", sql)
    text = _NUMBER.sub("?", text)
    text = _LIST.sub("(?...)", text)
    text = _VALUES.sub(r"\1, ...", text)
    return _SPACE.sub(" ", text).strip()


class _Stream:
    """Client->server bytes of one connection, cut into packets."""

    def __init__(self, proxy: CountingProxy) -> None:
        self.proxy = proxy
        self.buffer = b""

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            length = int.from_bytes(self.buffer[:3], "little")
            if len(self.buffer) < 4 + length:
                return
            seq = self.buffer[3]
            payload = self.buffer[4 : 4 + length]
            self.buffer = self.buffer[4 + length :]
            if seq == 0 and payload:
                self.proxy.count(payload)


class CountingProxy:
    """Listen on 127.0.0.1:<port>; forward each connection to ``host:port``."""

    def __init__(self, host: str, port: int, keep_statements: bool = True) -> None:
        self.target = (host, port)
        self.keep_statements = keep_statements
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.commands: Counter[str] = Counter()
        self.statements: Counter[str] = Counter()
        self.connections = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._start(self._accept)

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def count(self, payload: bytes) -> None:
        name = COMMANDS.get(payload[0], f"COM_0x{payload[0]:02x}")
        with self.lock:
            self.commands[name] += 1
            if name == "COM_QUERY" and self.keep_statements:
                self.statements[normalise(payload[1:].decode("utf-8", "replace"))] += 1

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        with self.lock:
            return Counter(self.commands), Counter(self.statements)

    def _accept(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.listener], [], [], 0.2)
            if not ready:
                continue
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.connections += 1
            self._start(self._pump, client, upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        stream = _Stream(self)
        peers = {client: upstream, upstream: client}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(peers), [], [], 0.5)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        stream.feed(data)
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        deadline = time.monotonic() + 2
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def difference(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def summary(commands: dict[str, int], statements: dict[str, int], seconds: float) -> dict[str, Any]:
    """Statements (what Questions counts) per second, by command and by statement."""
    questions = sum(n for c, n in commands.items() if c not in NOT_QUESTIONS)
    top = sorted(statements.items(), key=lambda kv: -kv[1])
    return {
        "statements": questions,
        "statements_per_s": round(questions / seconds, 3) if seconds else None,
        "commands": dict(sorted(commands.items())),
        "by_statement": [{"count": n, "per_s": round(n / seconds, 3), "sql": sql[:300]}
                         for sql, n in top[:25]],
    }
