#!/usr/bin/env python3
"""A worked example of an external workload: I/O latency of the raw DUT with ioping (read-only).

Declared on the lab host in the agent's ``--app-workloads`` file (see ``workloads.yaml`` next to this file and
docs/external-workloads.md). The agent runs it as::

    ioping_workload.py --dut PATH --params PARAMS_JSON --result RESULT_JSON --workdir DIR

``PARAMS_JSON`` is a file holding the suite's parameters, already checked against the declared schema and with
the declared defaults filled in (count, size, interval, direct). It runs ``ioping -q -p 1`` (one raw statistics
line per request; the first request is ioping's warm-up and is not counted) and writes ``RESULT_JSON`` in the
shape of ``labcontract.apps.AppResult``: metrics ``iops``, ``lat_avg_ms``, ``lat_p99_ms``, ``lat_min_ms``,
``lat_max_ms``, ``lat_stdev_ms``, ``requests``; series ``lat_ms`` (per request) and ``iops`` (requests per
wall-clock second).

Standard library only; never a shell: ioping gets an argv list, values from the checked parameters.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIZE_RE = re.compile(r"^[0-9]{1,6}[kKmM]?$")
INTERVAL_RE = re.compile(r"^[0-9]{1,6}(us|ms|s)?$")
MAX_REQUESTS = 100_000


def fail(msg: str) -> None:
    print(f"ioping_workload: {msg}", file=sys.stderr)
    sys.exit(2)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def raw_unit_s(fields: list[int]) -> float:
    """Seconds per unit of ioping's raw times: microseconds in old releases, nanoseconds since 1.0. Derived
    from the line itself: iops = count / time."""
    count, elapsed, iops = fields[0], fields[1], fields[2]
    if count <= 0 or elapsed <= 0 or iops <= 0:
        return 1e-9
    unit = count / (iops * elapsed)
    return 1e-6 if abs(math.log10(unit) + 6) < abs(math.log10(unit) + 9) else 1e-9


def version(ioping: str) -> str:
    try:
        out = subprocess.run([ioping, "-v"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0][:128] if out.strip() else "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dut", action="append", required=True)
    p.add_argument("--params", type=Path, required=True)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--workdir", type=Path, required=True)
    ns = p.parse_args(argv)
    if len(ns.dut) != 1:
        fail(f"runs on exactly one DUT (got {len(ns.dut)})")
    dut = ns.dut[0]
    params: dict[str, Any] = json.loads(ns.params.read_text())
    count, size = params.get("count", 200), str(params.get("size", "4k"))
    interval, direct = str(params.get("interval", "0")), params.get("direct", True)
    # the agent checked these against the declaration; checked again here (a wrapper trusts nothing either)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_REQUESTS:
        fail(f"count must be an int in 1..{MAX_REQUESTS}")
    if not SIZE_RE.match(size) or not INTERVAL_RE.match(interval) or not isinstance(direct, bool):
        fail("size / interval / direct malformed")
    ioping = shutil.which("ioping")
    if ioping is None:
        fail("ioping is not installed (Debian: apt-get install ioping)")
    assert ioping is not None
    # count + 1: ioping's first request is a warm-up it leaves out of its statistics
    cmd = [ioping, "-q", "-p", "1", "-c", str(count + 1), "-s", size, "-i", interval]
    if direct:
        cmd.append("-D")
    cmd.append(dut)
    print("running:", " ".join(cmd), flush=True)
    lat_s: list[float] = []
    per_second: dict[int, int] = {}
    t0 = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ns.workdir) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            fields = line.split()
            if len(fields) < 6 or not all(f.isdigit() for f in fields):
                continue
            nums = [int(f) for f in fields]
            lat_s.append(nums[5] * raw_unit_s(nums))       # field 6: the request's (average) time
            second = int(time.monotonic() - t0)
            per_second[second] = per_second.get(second, 0) + 1
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        fail(f"ioping exited {proc.returncode}")
    if not lat_s:
        fail("ioping reported no request")
    mean = sum(lat_s) / len(lat_s)
    stdev = math.sqrt(sum((x - mean) ** 2 for x in lat_s) / len(lat_s))
    ms = 1000.0
    iops = len(lat_s) / sum(lat_s)
    result = {
        "tool": "ioping", "tool_version": version(ioping),
        "metrics": {"iops": iops, "lat_avg_ms": mean * ms, "lat_p99_ms": percentile(lat_s, 99) * ms,
                    "lat_min_ms": min(lat_s) * ms, "lat_max_ms": max(lat_s) * ms, "lat_stdev_ms": stdev * ms,
                    "requests": float(len(lat_s))},
        "series": {"lat_ms": [x * ms for x in lat_s],
                   "iops": [float(per_second.get(s, 0)) for s in range(max(per_second) + 1)]},
        "seconds": round(seconds, 3),
        "notes": {"dut": dut[:1024], "size": size, "interval": interval, "direct": str(direct).lower()},
    }
    tmp = ns.result.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, ns.result)
    print(f"{len(lat_s)} requests: {iops:.0f} iops, avg {mean * ms:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
