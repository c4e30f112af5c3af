"""Times the way engineers say them: ``22:00``, ``tonight 22:00``, ``tomorrow 06:30``, ``+2h``, ISO dates."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from labcontract.units import parse_duration

_CLOCK = re.compile(r"^(?:(tonight|today|tomorrow)\s+)?(\d{1,2}):(\d{2})\Z")
FORMS = "HH:MM, tonight HH:MM, tomorrow HH:MM, +DURATION (e.g. +2h), or YYYY-MM-DD HH:MM"


def parse_when(text: str, now: datetime) -> datetime:
    """The moment ``text`` names, in ``now``'s time zone. A bare clock time that has passed today means
    tomorrow; ``tonight``/``today`` a time that has passed is an error (it would silently be tomorrow)."""
    t = text.strip().lower()
    if t.startswith("+"):
        try:
            return now + timedelta(seconds=parse_duration(t[1:]))
        except ValueError as e:
            raise ValueError(f"{text!r}: {e}") from e
    m = _CLOCK.match(t)
    if m:
        day, hh, mm = m.group(1), int(m.group(2)), int(m.group(3))
        if hh > 23 or mm > 59:
            raise ValueError(f"{text!r}: not a time of day")
        at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if day == "tomorrow":
            return at + timedelta(days=1)
        if at <= now:
            if day in ("tonight", "today"):
                raise ValueError(f"{text!r}: {hh:02d}:{mm:02d} today has passed (say tomorrow {hh:02d}:{mm:02d})")
            at += timedelta(days=1)
        return at
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r}: not a time ({FORMS})") from None
    if at.tzinfo is None and now.tzinfo is not None:
        at = at.replace(tzinfo=now.tzinfo)
    return at
