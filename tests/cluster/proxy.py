"""A TCP proxy between one node and MySQL that a test controls: forward, blackhole
(connections stay open but no byte passes, like a cut cable), or reject (close all
connections and refuse new ones)."""

from __future__ import annotations

import select
import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.mode = "forward"
        self.cut_commits = 0  # how many more COMMITs to cut right after sending them
        self.commits_cut = 0
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def blackhole(self) -> None:
        self.mode = "blackhole"

    def reject(self) -> None:
        self.mode = "reject"
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def forward(self) -> None:
        self.mode = "forward"

    def cut_next_commit(self, count: int = 1) -> None:
        """Let the next ``count`` COMMITs reach the server, then cut their connection
        before the reply: the client cannot know whether they committed."""
        with self._lock:
            self.cut_commits += count

    def _is_commit(self, data: bytes) -> bool:
        # A MySQL packet: 3-byte length, 1-byte sequence, then COM_QUERY (0x03) + SQL.
        return len(data) > 5 and data[4] == 0x03 and data[5:].strip().upper().startswith(b"COMMIT")

    def close(self) -> None:
        self._closed.set()
        self.reject()
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.mode == "reject":
                client.close()
                continue
            # The upstream connect happens on the connection's own thread: one slow
            # connect to a loaded server must not hold up every other client's accept
            # (their connect timeouts looked like a database outage to the nodes).
            threading.Thread(
                target=self._connect, args=(client,), daemon=True, name="proxy-pump"
            ).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            if self.mode == "reject":
                upstream.close()
                client.close()
                return
            self._pairs.append((client, upstream))
        self._pump(client, upstream)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a.fileno(): (a, b), b.fileno(): (b, a)}
        poller = select.poll()  # not select(): descriptors above 1023 in a long test run
        for fd in peers:
            poller.register(fd, select.POLLIN)
        try:
            while not self._closed.is_set():
                try:
                    events = poller.poll(100)
                except (OSError, ValueError):
                    return
                if self.mode == "reject":
                    return
                for fd, _ in events:
                    sock, other = peers[fd]
                    data = sock.recv(65536)
                    if not data:
                        return
                    if self.mode == "blackhole":
                        continue  # swallowed: nothing reaches the other side
                    other.sendall(data)
                    if sock is a and self.cut_commits and self._is_commit(data):
                        with self._lock:
                            if self.cut_commits:
                                self.cut_commits -= 1
                                self.commits_cut += 1
                                return  # the server got it; the reply never comes back
        except OSError:
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
