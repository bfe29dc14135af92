"""The node's scheduling decisions: misfire, next slot after a run (and its overrun),
retries with backoff and jitter, recovery of abandoned runs, and a job's bounds
(``start_at``, ``end_at``, ``max_runs``), its exclusion calendars and slot jitter
wherever a new slot is chosen. Pure: each takes ``now``; the calendars are the ones the
node read last (:meth:`SchedulePlanner.use_calendars`)."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import lru_cache

from quartzlite import schedule as schedules
from quartzlite.enums import MisfirePolicy, OverrunPolicy, RecoveryPolicy, RunStatus
from quartzlite.errors import ValidationError
from quartzlite.models import Calendar, Finished, JobSpec, Reschedule

log = logging.getLogger("quartzlite.node")

#: How many times a slot is rerun after its node died, beyond its retry attempts.
RECOVERY_RERUNS = 2


@lru_cache(maxsize=4096)
def parsed(expression: str, timezone: str) -> schedules.Schedule:
    return schedules.parse_schedule(expression, timezone)


def backoff_s(spec: JobSpec, attempt: int, rng: random.Random) -> float:
    """Delay before attempt ``attempt + 1``: exponential, capped, with equal jitter
    (between half and all of the exponential value)."""
    base = min(spec.retry_backoff_s * 2.0 ** (attempt - 1), spec.retry_max_backoff_s)
    return base * (0.5 + rng.random() / 2)


def planned_at(spec: JobSpec, slot: datetime) -> datetime:
    """The instant a slot of the job is planned for: the slot plus its stable jitter
    (``spec.jitter_s``; see :func:`quartzlite.schedule.jitter_offset`)."""
    return schedules.jittered(spec.name, slot, spec.jitter_s)


def runs_left(spec: JobSpec, runs_done: int) -> bool:
    """Whether the job may run another slot (``max_runs``)."""
    return spec.max_runs is None or runs_done < spec.max_runs


class SchedulePlanner:
    """Implements :class:`quartzlite.storage.node.Planner` with :mod:`quartzlite.schedule`:
    every decision of where a job goes next (misfire and coalescing, retries and their
    backoff, recovery of a lost run, a refused duplicate) is made here.

    Every new slot chosen here lies within the job's bounds (none before ``start_at``,
    none after ``end_at``: slots outside them are neither fired nor recorded missed) and
    is planned at the slot plus its jitter; once the job's ``max_runs``-th slot is done
    it has no next fire. Retries and reruns keep their own timing (no jitter).

    A job's calendars exclude slots: an excluded slot is neither fired nor recorded
    missed, whichever way it passed (misfire, overrun, a lost node). The calendars are
    the node's copy (:meth:`use_calendars`, an atomic swap of one dict: readers never
    lock); a job naming a calendar the copy lacks makes the store read them again
    first (:meth:`knows_calendars`)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        #: Calendar name -> its engine, or the reason it cannot be used (a row edited
        #: by hand): a job naming it cannot be planned (quarantined).
        self.calendars: Mapping[str, schedules.Calendar | str] = {}

    # -- calendars -------------------------------------------------------------------

    def use_calendars(self, calendars: Iterable[Calendar]) -> None:
        """Use these calendars from now on (all of them: the table as read)."""
        engines: dict[str, schedules.Calendar | str] = {}
        for c in calendars:
            try:
                engines[c.name] = schedules.compile_calendar(c.name, c.timezone, c.rules)
            except ValidationError as error:
                log.error("calendar %s cannot be used: %s", c.name, error.message,
                          extra={"action": "calendar_invalid", "calendar": c.name})
                engines[c.name] = error.message
        self.calendars = engines

    def knows_calendars(self, names: Iterable[str]) -> bool:
        """Whether every calendar named is in the node's copy."""
        known = self.calendars
        return all(n in known for n in names)

    def _calendars(self, spec: JobSpec) -> Sequence[schedules.Calendar]:
        if not spec.calendars:
            return ()
        known = self.calendars
        found: list[schedules.Calendar] = []
        for name in spec.calendars:
            engine = known.get(name)
            if engine is None:
                raise schedules.ExclusionError(f"calendar {name!r} does not exist")
            if isinstance(engine, str):
                raise schedules.ExclusionError(f"calendar {name!r} cannot be used: {engine}")
            found.append(engine)
        return found

    def excluded(self, spec: JobSpec, slot_at: datetime, now: datetime) -> Reschedule | None:
        """None when the slot ``slot_at`` (planned earlier) is not excluded by the job's
        calendars as the node knows them now; else where the job goes instead (its next
        slot that is not excluded; the slots that passed meanwhile follow the misfire
        policy). A calendar replaced after the slot was planned excludes it here."""
        calendars = self._calendars(spec)
        if not calendars or not any(c.excluded(slot_at) for c in calendars):
            return None
        reason = f"misfired: not fired within misfire_grace_s ({spec.misfire_grace_s:g}s)"
        return self._next(spec, slot_at, now, reason)

    def _next(
        self, spec: JobSpec, after: datetime, now: datetime, reason: str,
        overrun: OverrunPolicy = OverrunPolicy.CATCH_UP, *, counted: bool = False,
        runs_done: int = 0,
    ) -> Reschedule:
        """The next slot after ``after``. ``overrun`` is the job's overrun policy when
        the job's own run held it until ``now`` (after a run); every other way here
        (a lost node, a refused duplicate, a misfire) leaves the slots that passed to
        the misfire policy. ``counted``: the job leaves the slot ``after`` as one of its
        runs, its ``runs_done`` before this one; at ``max_runs`` there is no next slot
        (and the slots that passed meanwhile are no longer the job's: none is missed)."""
        if not runs_left(spec, runs_done + (1 if counted else 0)):
            return Reschedule(planned_at=None, slot_at=None, counted=counted)
        plan = schedules.plan_next(
            parsed(spec.schedule, spec.timezone),
            after=after,
            now=now,
            policy=spec.misfire_policy,
            grace_s=spec.misfire_grace_s,
            overrun=overrun,
            start_at=spec.start_at,
            end_at=spec.end_at,
            calendars=self._calendars(spec),
        )
        if overrun is OverrunPolicy.SKIP:
            missed_reason = f"overrun: {reason}; overrun policy {overrun.value}"
        else:
            missed_reason = f"{reason}; misfire policy {spec.misfire_policy.value}"
        slot = plan.next_fire_at
        return Reschedule(
            planned_at=None if slot is None else planned_at(spec, slot),
            slot_at=slot,
            attempt=1,
            missed=tuple(plan.missed),
            missed_more=plan.missed_more,
            missed_reason=missed_reason,
            counted=counted,
        )

    def misfire(
        self, spec: JobSpec, slot_at: datetime, now: datetime, planned: datetime | None = None
    ) -> Reschedule:
        """``slot_at`` was found later than the grace: it and any later misfired slots
        are coalesced into one fire now (fire_once) or all skipped (skip).

        A ``@manual`` job never misfires: its slots are explicit requests (a trigger, or
        an upstream job's end), each to run once however late it is found (a downstream
        job that waited for its own previous run, for a node, or to be resumed). It
        fires at ``planned``, the instant its slot was planned for (the slot when not
        given)."""
        if spec.manual:
            return Reschedule(planned_at=planned or slot_at, slot_at=slot_at)
        reason = f"misfired: not fired within misfire_grace_s ({spec.misfire_grace_s:g}s)"
        later = self._next(spec, slot_at, now, reason)
        cutoff = now - timedelta(seconds=spec.misfire_grace_s)
        # Passed slots are judged by their slot instant (as plan_next does): with jitter,
        # a slot's planned instant is later still.
        later_misfired = later.slot_at is not None and later.slot_at <= cutoff
        if spec.misfire_policy is MisfirePolicy.FIRE_ONCE:
            if later_misfired:
                return Reschedule(
                    planned_at=later.planned_at, slot_at=later.slot_at,
                    missed=(slot_at, *later.missed), missed_more=later.missed_more,
                    missed_reason=later.missed_reason,
                )
            return Reschedule(planned_at=planned_at(spec, slot_at), slot_at=slot_at)
        return Reschedule(
            planned_at=later.planned_at, slot_at=later.slot_at,
            missed=(slot_at, *later.missed), missed_more=later.missed_more,
            missed_reason=later.missed_reason,
        )

    def after_run(
        self, spec: JobSpec, finished: Finished, now: datetime, runs_done: int = 0
    ) -> Reschedule:
        """Where the job goes once this run ended; ``runs_done``: the slots it ran
        before this one. The slot counts as a run when the job moves on from it (its
        last attempt, whatever the outcome, but ``cancelled``: fired ahead, then the
        job was paused or deleted before the instant)."""
        prepared = finished.fired.prepared
        status = finished.outcome.status
        if status is RunStatus.ABANDONED:
            # Its node gave it up (fenced): one that never started is simply run again
            # (the same attempt of the same slot); one cut short follows its recovery
            # policy, as when a peer expires a dead node's run.
            if finished.started_at is None:
                return Reschedule(planned_at=now, slot_at=prepared.slot_at, attempt=prepared.attempt)
            return self.recover(spec, prepared.slot_at, prepared.attempt, now, runs_done)
        if status in (RunStatus.FAILED, RunStatus.TIMED_OUT) and prepared.attempt < spec.max_attempts:
            delay = backoff_s(spec, prepared.attempt, self.rng)
            return Reschedule(
                planned_at=now + timedelta(seconds=delay),
                slot_at=prepared.slot_at,
                attempt=prepared.attempt + 1,
            )
        # The slots that came due while this run ran, from its start until it ended,
        # follow the overrun policy: skipped, or caught up. Slots due before it started
        # (the job was behind: a late start) or since it ended (a result recorded late,
        # say after a database outage) are late, not overrun: the misfire policy has
        # them, and a late start leaves them all to it (no run claims an overrun of a
        # slot that came due before it began).
        counted = status is not RunStatus.CANCELLED
        if spec.overrun_policy is OverrunPolicy.SKIP and finished.started_at is not None:
            began = max(prepared.slot_at, finished.started_at)
            following = schedules.next_slot(
                parsed(spec.schedule, spec.timezone), prepared.slot_at,
                calendars=self._calendars(spec),
            )
            if following is None or following > began:
                return self._next(
                    spec, prepared.slot_at, max(began, min(finished.ended_at, now)),
                    "came due while the previous run ran", overrun=OverrunPolicy.SKIP,
                    counted=counted, runs_done=runs_done,
                )
        return self._next(spec, prepared.slot_at, now, "came due while the previous run ran",
                          counted=counted, runs_done=runs_done)

    def recover(
        self, spec: JobSpec, slot_at: datetime, attempt: int, now: datetime, runs_done: int = 0
    ) -> Reschedule:
        """A run abandoned (its node died): the slot again (``rerun``, no jitter), or
        the next slot, the abandoned one counted as a run."""
        if (
            spec.recovery_policy is RecoveryPolicy.RERUN
            and attempt < spec.max_attempts + RECOVERY_RERUNS
        ):
            return Reschedule(planned_at=now, slot_at=slot_at, attempt=attempt + 1)
        return self._next(spec, slot_at, now, "came due while its node was lost",
                          counted=True, runs_done=runs_done)

    def skip(self, spec: JobSpec, slot_at: datetime, now: datetime) -> Reschedule:
        return self._next(spec, slot_at, now, "came due while a duplicate was refused")

    def assigned(
        self, spec: JobSpec, slot_at: datetime, now: datetime, runs_done: int = 0
    ) -> Reschedule:
        """A concurrent or broadcast job gave its slot ``slot_at`` to its lanes: its next
        slot, the one given counted as one of its runs (``max_runs``). The slots that
        passed meanwhile (its lanes were all busy) follow the misfire policy."""
        return self._next(spec, slot_at, now, "came due while every lane of the job was busy",
                          counted=True, runs_done=runs_done)


__all__ = ["RECOVERY_RERUNS", "SchedulePlanner", "backoff_s", "parsed", "planned_at", "runs_left"]
