"""The units a reader picks for compare and export (``--units``): ``decimal``, the default, prints bandwidth in MB/s
(10^6 bytes per second, what reviews and drive data sheets print); ``binary`` in MiB/s (2^20 bytes per second, the
family of fio's own KiB/s). Rates stay IOPS, latencies µs (stored in ns), whatever the choice.

A bandwidth figure carries its unit in its name wherever it leaves the lab (``mb_s`` / ``mib_s``, a column, a JSON
field, a compare metric), so a name never changes meaning with the option.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from labcontract.errors import ReportError
from orchestrator.cellbase import Metric

UNITS = ("decimal", "binary")
DECIMAL_SUFFIX, BINARY_SUFFIX = "mb_s", "mib_s"
MIB_PER_MB = 1e6 / 2**20       # a figure in MB/s times this is the same figure in MiB/s


def check_units(units: str, option: str = "--units") -> str:
    if units not in UNITS:
        raise ReportError(f"{option}: unknown units {units!r} (choose from {', '.join(UNITS)})")
    return units


_BANDWIDTH = re.compile(rf"(^|_){DECIMAL_SUFFIX}(_per_w)?$")


def is_bandwidth(name: str) -> bool:
    """Whether a figure's name is a bandwidth in MB/s (``mb_s``, ``read_mb_s``, ...), or one per watt
    (``mb_s_per_w``)."""
    return _BANDWIDTH.search(name) is not None


def named(name: str, units: str) -> str:
    """The name of figure ``name`` (decimal) in ``units``: ``read_mb_s`` -> ``read_mib_s`` in binary."""
    return _BANDWIDTH.sub(rf"\1{BINARY_SUFFIX}\2", name) if units == "binary" and is_bandwidth(name) else name


def value(name: str, v: float | None, units: str) -> float | None:
    """Figure ``name``'s value ``v`` (decimal) in ``units``."""
    return v * MIB_PER_MB if v is not None and units == "binary" and is_bandwidth(name) else v


def metrics_in(metrics: Iterable[Metric], units: str) -> list[Metric]:
    """The metrics as headed in ``units`` (``MB/s`` -> ``MiB/s``)."""
    return [Metric(named(m.name, units), m.title.replace("MB/s", "MiB/s"), m.fmt, m.diff)
            if units == "binary" and is_bandwidth(m.name) else m for m in metrics]
