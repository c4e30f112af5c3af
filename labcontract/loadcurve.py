"""Latency-vs-load curves: a cell measured at its maximum, then again rate-limited to percentages of it.

A profile's ``load_curve: [10, 25, 50, 75, 90]`` (docs/suites.md) keeps the cell's own measurement (the curve's
maximum, 100%) and adds one step per percentage after it, planned by the controller once the maximum's result is
stored (its IOPS are not known before): the same workload with fio's ``rate_iops`` set so that the step's jobs
together ask for that share of the IOPS the maximum reached. The chart then draws each point's latency against
the IOPS it *achieved* (a device that cannot keep the asked rate shows it), as vdbench's curves do.

What the step rows hold (``Step.cell``): the maximum's cell keeps the percentages under :data:`CURVE` (which
never identifies a cell: a run with a curve still compares with one without); a point's cell adds
:data:`POINT` (the percentage, which identifies it: compare matches point with point).

A read-only or write-only workload's point asks one rate (``rate_iops=N``: an agent's fio kind 2 reads it). A mixed
workload's asks one per direction, each its share of what the maximum reached in that direction (``R,W``: fio kind
3): with one rate fio caps each direction at it and switches to the other whenever one is ahead, so a 70/30 job
asked 1,000 did 1,000 reads and 1,000 writes (measured), the mix drifting to 50/50; ``700,300`` keeps it.
"""

from __future__ import annotations

from labcontract.fioextra import MAX_RATE_IOPS

CURVE = "load_curve"        # Step.cell key of the maximum: the curve's percentages
POINT = "load_pct"          # Step.cell key of a point: its percentage of the maximum
MIN_RATE, MAX_RATE = 1, MAX_RATE_IOPS


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


def rates_per_job(read_iops: float, write_iops: float, pct: int, jobs: int, *, mixed: bool) -> int | str | None:
    """A point's ``rate_iops``: one rate over both directions for a read-only or write-only workload; for a mixed
    one ``R,W``, each direction its share of what the maximum did in it. None when a rate would be under one I/O
    per second per job."""
    if not mixed:
        return rate_per_job(read_iops + write_iops, pct, jobs)
    r, w = rate_per_job(read_iops, pct, jobs), rate_per_job(write_iops, pct, jobs)
    return None if r is None or w is None else f"{r},{w}"


def point_name(name: str, pct: int) -> str:
    """A point's step name: the maximum's with ``.load<pct>`` (``4k-randread.load50``; a repeat's ``….rep2.load50``)."""
    return f"{name}.load{pct}"
