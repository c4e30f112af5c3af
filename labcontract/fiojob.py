"""Render a resolved workload into the fio job file an agent runs.

The same function renders for ``labctl suite render`` and on the agent, so what an
engineer reads is byte for byte what fio gets.
"""

from __future__ import annotations

from labcontract.suite import Workload
from labcontract.units import format_size

# fio reports total latency (submission + completion) percentiles and json+ bins for it.
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)
DUT_PLACEHOLDER = "${LAB_DUT}"


def _flag(v: bool) -> str:
    return "1" if v else "0"


def render_job(workload: Workload, filename: str = DUT_PLACEHOLDER) -> str:
    w = workload
    lines = [
        "[global]",
        f"filename={filename}",
        f"ioengine={w.ioengine}",
        f"direct={_flag(w.direct)}",
        "time_based=1",
        f"runtime={w.runtime}",
    ]
    if w.ramp_time:
        lines.append(f"ramp_time={w.ramp_time}")
    if w.footprint:
        size = w.footprint if w.footprint.endswith("%") else format_size(int(w.footprint))
        lines.append(f"size={size}")
    lines += [
        "group_reporting=1",
        "lat_percentiles=1",
        "percentile_list=" + ":".join(f"{p:g}" for p in PERCENTILES),
        "",
        f"[{w.name}]",
        f"rw={w.rw}",
        f"bs={format_size(w.bs)}",
    ]
    if w.rwmixread is not None:
        lines.append(f"rwmixread={w.rwmixread}")
    if w.percentage_random is not None:
        lines.append(f"percentage_random={w.percentage_random}")
    lines += [f"iodepth={w.iodepth}", f"numjobs={w.numjobs}"]
    if w.refill_buffers:
        lines.append("refill_buffers=1")
    if w.norandommap:
        lines.append("norandommap=1")
    if not w.randrepeat:
        lines.append("randrepeat=0")
    return "\n".join(lines) + "\n"
