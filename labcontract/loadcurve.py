"""Latency-vs-load curves: a cell measured at its maximum, then again rate-limited to percentages of it.

A profile's ``load_curve: [10, 25, 50, 75, 90]`` (docs/suites.md) keeps the cell's own measurement (the curve's
maximum, 100%) and adds one step per percentage after it, planned by the controller once the maximum's result is
stored (its IOPS are not known before): the same workload with fio's ``rate_iops`` set so that the step's jobs
together ask for that share of the IOPS the maximum reached. The chart then draws each point's latency against
the IOPS it *achieved* (a device that cannot keep the asked rate shows it), as vdbench's curves do.

What the step rows hold (``Step.cell``): the maximum's cell keeps the percentages under :data:`CURVE` (which
never identifies a cell: a run with a curve still compares with one without); a point's cell adds
:data:`POINT` (the percentage, which identifies it: compare matches point with point).

Only read-only and write-only workloads take a curve: fio's single ``rate_iops`` caps reads and writes each,
and when both directions are ahead of their rate fio switches direction, so a mixed job drifts toward 50/50
(the suite refuses a mixed workload with that reason).
"""

from __future__ import annotations

from labcontract.fioextra import INTS

CURVE = "load_curve"        # Step.cell key of the maximum: the curve's percentages
POINT = "load_pct"          # Step.cell key of a point: its percentage of the maximum
MIN_RATE, MAX_RATE = INTS["rate_iops"]


def rate_per_job(max_iops: float, pct: int, jobs: int) -> int | None:
    """fio's ``rate_iops`` for each of ``jobs`` jobs (numjobs x the step's devices: the option caps each job) so that
    together they ask for ``pct``% of ``max_iops``; None when that is below one I/O per second per job (the device
    reached too little to draw a curve from) or ``max_iops`` is not a positive finite number."""
    if not (max_iops > 0 and max_iops != float("inf")) or jobs < 1 or not 1 <= pct <= 99:
        return None
    rate = round(max_iops * pct / 100 / jobs)
    if rate < MIN_RATE:
        return None
    return min(rate, MAX_RATE)


def point_name(name: str, pct: int) -> str:
    """A point's step name: the maximum's with ``.load<pct>`` (``4k-randread.load50``; a repeat's ``….rep2.load50``)."""
    return f"{name}.load{pct}"
