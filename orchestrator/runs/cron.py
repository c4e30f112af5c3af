"""Cron expressions of schedules and canaries: the one reading the scheduler fires by, and the one check every
way in (labctl, the web API, the controller's ScheduleAdd) makes of it.

The form is the classic five fields, ``minute hour day-of-month month day-of-week`` (local time of the
controller), in croniter's dialect (``*/5``, ``1-5``, ``L``, ``5#3``...). croniter also reads a sixth field
(seconds) and a seventh (a year): a year lets a schedule fire once and then never again, and computing the
next firing of such a schedule raised an exception nothing caught (the controller exited and every restart
died the same way). So the check is made with the scheduler's own function, :func:`next_fire`, on the
expression exactly as stored: it must hold five fields and its next :data:`CHECKED_FIRINGS` firings must be
computable; an expression that never fires (``0 0 30 2 *``) is refused too, with the reason.
"""

from __future__ import annotations

from datetime import datetime

from croniter import croniter

FIELDS = 5
FIELD_NAMES = "minute hour day-of-month month day-of-week"
CHECKED_FIRINGS = 3          # a schedule accepted fires at least this often (a firing is followed by another)
MAX_CRON_CHARS = 256         # labcontract.protocol.ScheduleAdd.cron's bound


def next_fire(cron: str, after: float) -> float:
    """The first time after ``after`` that the cron expression names (local time). Raises ValueError (croniter's
    errors are ValueErrors) when there is none."""
    start = datetime.fromtimestamp(after).astimezone()
    return float(croniter(cron, start).get_next(datetime).timestamp())


def cron_problem(cron: str, now: float) -> str | None:
    """Why ``cron`` cannot be a schedule's expression (None: it can): not five fields, not a cron expression, or
    its next firings cannot be computed by :func:`next_fire` (it never fires, or stops firing)."""
    fields = cron.split()
    if len(cron) > MAX_CRON_CHARS:
        return f"{len(cron)} characters, over {MAX_CRON_CHARS}"
    if len(fields) != FIELDS:
        return (f"{cron!r} is not a cron expression of {FIELDS} fields ({FIELD_NAMES}): it has {len(fields)} "
                "(a schedule takes no seconds and no year)")
    try:
        if not croniter.is_valid(cron):
            return f"{cron!r} is not a cron expression ({FIELDS} fields: {FIELD_NAMES})"
        at = now
        for _ in range(CHECKED_FIRINGS):
            nxt = next_fire(cron, at)
            if not nxt > at:
                return f"{cron!r}: its next firing does not advance past {at:.0f}"
            at = nxt
    except (ValueError, OverflowError, KeyError, IndexError, TypeError) as e:
        return f"{cron!r} never fires, or stops firing: its next {CHECKED_FIRINGS} firings cannot be computed ({e})"
    return None
