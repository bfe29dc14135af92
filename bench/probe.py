"""A quartzlite node with wall-clock spans: where a node's time goes, by thread and
function, down to each SQL statement. For profiling only (:mod:`bench.profile`); the
measured runs start plain ``python -m quartzlite`` nodes.

    python -m bench.probe OUT.json --database-url URL node [options]   ({pid} in OUT: the pid)

Wraps (when this checkout has them) the node store's transactions, the node's
execution hand-off and the executors, times every statement through SQLAlchemy's
cursor events, and on exit writes to OUT.json: per (thread, span) counts and seconds,
the raw spans (capped), and CPU seconds per thread from /proc/self/task.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import re
import sys
import threading
import time
from collections import defaultdict
from typing import Any, NoReturn

#: module:Class.method to time; missing ones are skipped (the node is being reworked).
TARGETS = (
    "quartzlite.storage.node:NodeStore.prepare_due",
    "quartzlite.storage.node:NodeStore.fire",
    "quartzlite.storage.node:NodeStore.start_check",
    "quartzlite.storage.node:NodeStore.complete",
    "quartzlite.storage.node:NodeStore.watch",
    "quartzlite.storage.node:NodeStore.heartbeat",
    "quartzlite.storage.node:NodeStore.hand_back",
    "quartzlite.storage.node:NodeStore.expire_sessions",
    "quartzlite.storage.node:NodeStore.compensate",
    "quartzlite.storage.node:NodeStore.owned",
    "quartzlite.storage.node:NodeStore.kill_requests",
    "quartzlite.storage.node:NodeStore.lock",
    "quartzlite.storage.engine:Database.transaction",
    "quartzlite.storage.engine:Database.read",
    "quartzlite.node.node:Node.start_execution",
    "quartzlite.node.node:Node.finish",
    "quartzlite.node.workers:WorkerPool.submit",
    "quartzlite.executors:run_callable",
    "quartzlite.executors:run_shell",
)
MAX_SPANS = 300_000

_spans: list[tuple[str, str, float, float]] = []
_lock = threading.Lock()
_SQL_WORD = re.compile(r"^\s*\(?\s*(\w+)")


def _thread() -> str:
    return re.sub(r"-\d+$", "-*", threading.current_thread().name)


def _add(name: str, started: float, seconds: float) -> None:
    if len(_spans) < MAX_SPANS:
        with _lock:
            _spans.append((_thread(), name, started, seconds))


def _wrap(target: str) -> None:
    module_name, _, path = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return
    owner: Any = module
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return
    original = getattr(owner, parts[-1], None)
    if original is None:
        return
    label = path

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.time()
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _add(label, started, time.perf_counter() - t0)

    setattr(owner, parts[-1], timed)
    if owner is module:
        # Modules that imported the function by name get the timed one too.
        for other in list(sys.modules.values()):
            if other is not None and getattr(other, parts[-1], None) is original:
                try:
                    setattr(other, parts[-1], timed)
                except (AttributeError, TypeError):
                    pass


def _statements() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Connection, Engine

    starts: dict[int, float] = {}

    @event.listens_for(Engine, "before_cursor_execute")
    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        starts[id(cursor)] = time.perf_counter()

    @event.listens_for(Engine, "after_cursor_execute")
    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        t0 = starts.pop(id(cursor), None)
        if t0 is not None:
            seconds = time.perf_counter() - t0
            match = _SQL_WORD.match(statement)
            word = (match[1] if match else "?").upper()
            table = re.search(r"\b(?:FROM|INTO|UPDATE)\s+(\w+)", statement, re.IGNORECASE)
            _add(f"sql {word} {table.group(1) if table else ''}".rstrip(), time.time() - seconds,
                 seconds)

    commit = Connection.commit

    def timed_commit(self: Any) -> None:
        started = time.time()
        t0 = time.perf_counter()
        try:
            commit(self)
        finally:
            _add("sql COMMIT", started, time.perf_counter() - t0)

    Connection.commit = timed_commit  # type: ignore[method-assign]


#: native thread id -> (thread name, CPU seconds last seen); threads that ended keep theirs.
_cpu_seen: dict[int, tuple[str, float]] = {}


def _sample_cpu(every_thread: bool = True) -> None:
    """CPU seconds of our threads; between dumps only of the named service threads (the
    pool's run-* workers live until exit and are read then)."""
    names = {t.native_id: re.sub(r"-\d+$", "-*", t.name) for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    tids = os.listdir("/proc/self/task") if every_thread else [
        str(tid) for tid, name in names.items() if tid is not None and not name.startswith("run-")]
    for tid in tids:
        try:
            # schedstat: nanoseconds on the CPU (stat's utime/stime are whole ticks,
            # which round a short-lived worker's share to 0).
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                seconds = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / tick
            except OSError:
                continue
        name = names.get(int(tid)) or _cpu_seen.get(int(tid), ("other", 0.0))[0]
        _cpu_seen[int(tid)] = (name, seconds)


def _cpu_sampler() -> None:
    while True:
        _sample_cpu(every_thread=False)
        time.sleep(0.5)


def _thread_cpu() -> dict[str, float]:
    _sample_cpu()
    found: dict[str, float] = defaultdict(float)
    for name, seconds in _cpu_seen.values():
        found[name] += seconds
    return {k: round(v, 3) for k, v in sorted(found.items(), key=lambda kv: -kv[1])}


class TimedRLock:
    """The node's process mutex, with the time each thread waited for it."""

    def __init__(self, name: str) -> None:
        self._lock = threading.RLock()
        self._name = name

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        started = time.time()
        t0 = time.perf_counter()
        got = self._lock.acquire(blocking, timeout)
        _add(f"wait {self._name}", started, time.perf_counter() - t0)
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _time_gc() -> None:
    """Garbage collections, as spans ``gc gen N`` on the thread that triggered them
    (every thread is stopped meanwhile)."""
    import gc

    began: list[tuple[float, float]] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began.append((time.time(), time.perf_counter()))
        elif began:
            started, t0 = began.pop()
            _add(f"gc gen {info.get('generation')}", started, time.perf_counter() - t0)

    gc.callbacks.append(callback)


def _time_mutex() -> None:
    try:
        ownership = importlib.import_module("quartzlite.node.ownership")
    except ImportError:
        return
    init = ownership.Ownership.__init__

    @functools.wraps(init)
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.mutex = TimedRLock("node.mutex")

    ownership.Ownership.__init__ = patched


def _dump(path: str) -> None:
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    with _lock:
        spans = list(_spans)
    for thread, name, _, seconds in spans:
        entry = totals[(thread, name)]
        entry[0] += 1
        entry[1] += seconds
        entry[2] = max(entry[2], seconds)
    data = {
        "pid": os.getpid(),
        "thread_cpu_s": _thread_cpu(),
        "totals": [{"thread": t, "span": n, "count": int(c), "seconds": round(s, 4),
                    "max_s": round(m, 4)}
                   for (t, n), (c, s, m) in sorted(totals.items(), key=lambda kv: -kv[1][1])],
        "spans": spans,
        "spans_capped": len(spans) >= MAX_SPANS,
    }
    with open(path, "w") as out:
        json.dump(data, out)


def main() -> None:
    out = sys.argv[1].replace("{pid}", str(os.getpid()))
    sys.argv = ["quartzlite", *sys.argv[2:]]
    importlib.import_module("quartzlite.node.runtime")
    _statements()
    for target in TARGETS:
        _wrap(target)
    _time_mutex()
    _time_gc()
    threading.Thread(target=_cpu_sampler, name="probe-cpu", daemon=True).start()
    atexit.register(_dump, out)
    exit_now = os._exit

    def dump_then_exit(status: int) -> NoReturn:  # the CLI leaves with os._exit: no atexit
        _dump(out)
        exit_now(status)

    os._exit = dump_then_exit
    from quartzlite.cli import main as cli

    try:
        cli()
    finally:
        _dump(out)


if __name__ == "__main__":
    main()
