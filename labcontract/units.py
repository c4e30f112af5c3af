"""Sizes and durations the way fio writes them (``4k``, ``128K``, ``1g``, ``30s``, ``2m``)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*\Z", re.IGNORECASE)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*\Z", re.IGNORECASE)
_DUR_MULT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TEXT = 32                      # characters of a size or duration string (a bound before any arithmetic)
MAX_VALUE = 1 << 62                # sizes and durations beyond this are no value, whatever their unit


def parse_size(value: object) -> int:
    """Bytes from ``4096``, ``"4k"``, ``"4KiB"``, ``"1.5g"`` (binary multiples, as fio uses them)."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size must not be negative: {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"not a size: {value!r}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"not a size: {value[:MAX_TEXT]!r}... is over {MAX_TEXT} characters")
    m = _SIZE.match(value)
    if not m or (m.group(3) and m.group(3).lower() not in ("b", "ib")):
        raise ValueError(f"not a size: {value!r} (use bytes or a number with k, m, g, t suffix, e.g. 4k)")
    number = float(m.group(1)) * _MULT[m.group(2).lower()]
    if not number < MAX_VALUE:
        raise ValueError(f"not a size: {value!r} is far too large")
    if number != int(number):
        raise ValueError(f"not a whole number of bytes: {value!r}")
    return int(number)


def parse_duration(value: object) -> int:
    """Whole seconds from ``60``, ``"60s"``, ``"2m"``, ``"6h"``."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"not a duration: {value[:MAX_TEXT]!r}... is over {MAX_TEXT} characters")
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"not a duration: {value!r} (use seconds or a number with s, m, h suffix)")
    seconds = float(m.group(1)) * _DUR_MULT[(m.group(2) or "s").lower()]
    if not seconds < MAX_VALUE:
        raise ValueError(f"not a duration: {value!r} is far too long")
    if seconds != int(seconds):
        raise ValueError(f"not a whole number of seconds: {value!r}")
    return int(seconds)


def format_size(n: int) -> str:
    """The shortest exact fio spelling of a size: 4096 -> ``4k``, 131072 -> ``128k``."""
    for suffix, mult in (("p", 1 << 50), ("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)
