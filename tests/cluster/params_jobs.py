"""Job bodies of the trigger-parameter tests (imported by the node processes)."""

from __future__ import annotations

import json
import os
from typing import Any

from quartzlite.executors import current_run


def show(path: str, **kwargs: Any) -> str:
    """Append one JSON line: the keyword arguments it was called with, the run's params
    and attempt; fail the first attempt when called with ``fail_first=True``."""
    run = current_run()
    assert run is not None
    line = json.dumps({"kwargs": {"path": path, **kwargs}, "params": dict(run.params),
                       "attempt": run.attempt, "slot_at": run.slot_at.isoformat()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    if kwargs.get("fail_first") and run.attempt == 1:
        raise RuntimeError("first attempt fails")
    return "shown"
