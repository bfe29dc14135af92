"""Live output: the output tails of running shell runs, written while they run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from quartzlite.enums import RunStatus
from quartzlite.storage.batch import update_from_rows
from quartzlite.storage.engine import RetryPolicy
from quartzlite.storage.node.base import StoreBase


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveTail:
    """The output so far of one running run (its row's id and fire id)."""

    run_id: int
    fire_id: str
    output: str


class LiveOutput(StoreBase):
    def write_output(self, tails: Sequence[LiveTail]) -> None:
        """The output so far of these running runs, in one autocommitted statement (one
        per ~2 MB of output) that takes no lock row and locks only these run rows.
        Guarded by ``status = 'running'`` and the fire id: a run whose outcome is
        recorded (its final output), or that was abandoned and taken over, is left
        alone. Tried once: the next flush writes the output again."""
        if not tails:
            return
        values = [{"id": t.run_id, "fire_id": t.fire_id, "output": t.output} for t in tails]

        def run(conn: Connection) -> None:
            update_from_rows(
                conn, "ql_runs", values, match=("id", "fire_id"), assign=("output",),
                where=f"t.status = '{RunStatus.RUNNING.value}'",
            )

        self.db.read(run, retry=RetryPolicy(deadline_s=0), name="live_output", stop=self.stop)
