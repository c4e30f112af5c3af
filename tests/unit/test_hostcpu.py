"""The host's CPU over a step from two /proc/stat readings (labcontract.hostcpu): figures by the documented formula on
hand numbers and on this machine's own /proc/stat around real work, and untrusted readings refused with a reason."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from labcontract.hostcpu import MAX_BYTES, host_cpu, reading

START = b"cpu  100 10 50 1000 40 5 5 0 0 0\ncpu0 50 5 25 500 20 3 2 0 0 0\ncpu1 50 5 25 500 20 2 3 0 0 0\n"
END = b"cpu  400 10 150 1300 140 25 25 10 0 0\ncpu0 200 5 75 650 70 13 12 5 0 0\ncpu1 200 5 75 650 70 12 13 5 0 0\n"


def test_the_documented_formula_on_hand_numbers() -> None:
    # deltas: user 300, nice 0, system 100, idle 300, iowait 100, irq 20, softirq 20, steal 10 -> total 850
    h = host_cpu(START, END, ios=1_000)
    assert h.cpus == 2
    assert h.usr_pct == pytest.approx(300 / 850 * 100) and h.sys_pct == pytest.approx(140 / 850 * 100)
    assert h.busy_pct == pytest.approx(440 / 850 * 100) and h.iowait_pct == pytest.approx(100 / 850 * 100)
    assert h.steal_pct == pytest.approx(10 / 850 * 100)
    assert h.us_per_io == pytest.approx(440 / 100 * 1e6 / 1_000)      # 4.4 CPU-seconds over 1,000 I/Os
    assert host_cpu(START, END, ios=0).us_per_io is None


def test_this_hosts_proc_stat_around_real_work() -> None:
    """The Linux agent's wrapper lines (grep ^cpu /proc/stat) before and after a CPU-bound second: some busy CPU,
    all percentages within 0..100 and adding up."""
    proc = Path("/proc/stat")
    if not proc.exists():
        pytest.skip("no /proc/stat")
    start = subprocess.run(["grep", "^cpu", "/proc/stat"], capture_output=True, check=True).stdout
    data = b"x" * (1 << 20)
    for _ in range(200):                   # CPU work of this process, whatever else runs on the machine
        data = hashlib.sha256(data).digest() * (1 << 15)
    end = subprocess.run(["grep", "^cpu", "/proc/stat"], capture_output=True, check=True).stdout
    h = host_cpu(start, end, ios=10)
    assert h.cpus == len([ln for ln in end.splitlines() if ln[3:4].isdigit()])
    assert 0 < h.busy_pct <= 100 and h.busy_pct == pytest.approx(h.usr_pct + h.sys_pct)
    assert h.usr_pct + h.sys_pct + h.iowait_pct + h.steal_pct <= 100 + 1e-9


@pytest.mark.parametrize(("start", "end", "why"), [
    (START, END.replace(b"cpu  400", b"cpu  40"), "a counter went back (user): the host restarted"),
    (START, START, "no tick passed"),
    (b"cpu  1 2 3\n", END, "host-cpu.start: line 1 is not a /proc/stat cpu line"),
    (START, b"cpu0 1 2 3 4\n", "host-cpu.end: no aggregate cpu line"),
    (START, END + b"cpu  1 2 3 4 5\n", "a second aggregate cpu line"),
    (START, END + b"; rm -rf /\n", "line 4 is not a /proc/stat cpu line"),
    (START, b"cpu " + b"9" * 40 + b" 1 1 1\n", "line 1 is not a /proc/stat cpu line"),
    (START, b"x" * (MAX_BYTES + 1), "over the 1048576 of a reading"),
])
def test_readings_that_are_not_readings_are_refused_with_the_reason(start: bytes, end: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        host_cpu(start, end, ios=1)


def test_an_old_kernels_shorter_line_counts_the_missing_fields_as_zero() -> None:
    counters, cpus = reading(b"cpu  10 0 5 100 1 0 0\ncpu0 10 0 5 100 1 0 0\n", "r")
    assert counters == (10, 0, 5, 100, 1, 0, 0, 0) and cpus == 1
