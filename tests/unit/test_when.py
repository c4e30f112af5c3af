from __future__ import annotations

from datetime import datetime

import pytest

from labcontract.when import parse_when

NOW = datetime(2026, 11, 21, 17, 30)


@pytest.mark.parametrize(("text", "expect"), [
    ("22:00", datetime(2026, 11, 21, 22, 0)),
    ("tonight 22:00", datetime(2026, 11, 21, 22, 0)),
    ("06:00", datetime(2026, 11, 22, 6, 0)),            # passed today: tomorrow
    ("tomorrow 06:30", datetime(2026, 11, 22, 6, 30)),
    ("+2h", datetime(2026, 11, 21, 19, 30)),
    ("+90m", datetime(2026, 11, 21, 19, 0)),
    ("2026-11-23 01:15", datetime(2026, 11, 23, 1, 15)),
])
def test_forms(text: str, expect: datetime) -> None:
    assert parse_when(text, NOW) == expect


@pytest.mark.parametrize(("text", "why"), [
    ("tonight 06:00", "today has passed"), ("25:00", "not a time of day"), ("soonish", "not a time"),
    ("+2x", "not a duration"),
])
def test_errors(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_when(text, NOW)
