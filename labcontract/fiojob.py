"""Render a resolved workload into the fio job file an agent runs.

The same function renders for ``labctl suite render`` and on the agent, so what an
engineer reads is byte for byte what fio gets (the job artifact's sha256 equals the plan's).

One device: ``[global]`` holds the device-independent options and one job section holds the
workload. A device group: the workload goes into ``[global]`` and each device gets its own
section with ``new_group=1``, so fio reports one result per device (``group_reporting``
folds each device's ``numjobs`` clones together) and the parser aggregates them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from labcontract.suite import Workload
from labcontract.units import format_size

# fio reports total latency (submission + completion) percentiles and json+ bins for it.
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)
DUT_PLACEHOLDER = "${LAB_DUT}"


def _flag(v: bool) -> str:
    return "1" if v else "0"


def job_section(name: str) -> str:
    """A fio job name: no brackets or spaces."""
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", name)


def device_section(name: str, index: int) -> str:
    return f"{job_section(name)}.dev{index}"


def workload_lines(w: Workload) -> list[str]:
    """A workload's own options (pattern, block size, mix, threads, depth, buffers), engine- and target-free."""
    lines = [f"rw={w.rw}", f"bs={format_size(w.bs)}"]
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
    return lines


def render_job(workload: Workload, devices: str | Sequence[str] = DUT_PLACEHOLDER) -> str:
    w = workload
    devs = [devices] if isinstance(devices, str) else list(devices)
    lines = ["[global]"]
    if len(devs) == 1:
        lines.append(f"filename={devs[0]}")
    lines += [f"ioengine={w.ioengine}", f"direct={_flag(w.direct)}"]
    if w.time_based:
        lines.append("time_based=1")
    lines.append(f"runtime={w.runtime}")
    if w.ramp_time:
        lines.append(f"ramp_time={w.ramp_time}")
    if w.footprint:
        size = w.footprint if w.footprint.endswith("%") else format_size(int(w.footprint))
        lines.append(f"size={size}")
    lines += [
        "group_reporting=1",
        "lat_percentiles=1",
        "percentile_list=" + ":".join(f"{p:g}" for p in PERCENTILES),
    ]
    if len(devs) == 1:
        lines += ["", f"[{job_section(w.name)}]", *workload_lines(w)]
    else:
        lines += workload_lines(w)
        for i, dev in enumerate(devs):
            lines += ["", f"[{device_section(w.name, i)}]", "new_group=1", f"filename={dev}"]
    return "\n".join(lines) + "\n"
