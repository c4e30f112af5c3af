"""Number formats of the report's tables and axes: one place, so a table says what its chart drew.

Units as the reviews print them: IOPS as integers with thousands separators, latency in ms (µs below
1 ms when a chart is all sub-millisecond is the caller's choice via ``us``), bandwidth in MB/s (decimal)
or GB/s, network throughput in Gbps. A missing value is "-" in a table (a chart leaves a gap).
"""

from __future__ import annotations

MISSING = "-"


def iops(v: float | None) -> str:
    return MISSING if v is None else f"{v:,.0f}"


def ms(ns: float | None) -> str:
    """Nanoseconds shown in milliseconds (3 decimals)."""
    return MISSING if ns is None else f"{ns / 1e6:,.3f}"


def us(ns: float | None) -> str:
    """Nanoseconds shown in microseconds (1 decimal)."""
    return MISSING if ns is None else f"{ns / 1e3:,.1f}"


def mbs(bytes_per_s: float | None) -> str:
    return MISSING if bytes_per_s is None else f"{bytes_per_s / 1e6:,.1f}"


def gbs(bytes_per_s: float | None) -> str:
    return MISSING if bytes_per_s is None else f"{bytes_per_s / 1e9:,.3f}"


def gbps(bits_per_s_in_gbps: float | None) -> str:
    """A value already in Gbps."""
    return MISSING if bits_per_s_in_gbps is None else f"{bits_per_s_in_gbps:,.3f}"


def pct(v: float | None) -> str:
    return MISSING if v is None else f"{v:+.1f}%"
