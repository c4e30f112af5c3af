"""The host's CPU over a step: two readings of the ``cpu`` lines of ``/proc/stat``, taken by the Linux agent's
wrapper just before the step's process starts (``host-cpu.start``) and just after it ends (``host-cpu.end``), sent
back as artifacts and turned into figures by the controller.

``/proc/stat``'s aggregate line is ``cpu  user nice system idle iowait irq softirq steal guest guest_nice`` in
USER_HZ ticks since boot, summed over the online CPUs (``guest`` and ``guest_nice`` are already inside ``user`` and
``nice`` and are not added again); one ``cpuN`` line follows per online CPU. Over the step, with every field its
difference between the two readings::

    total   = user + nice + system + idle + iowait + irq + softirq + steal
    usr_pct = (user + nice) / total x 100                  (% of all the host's CPUs, not of one)
    sys_pct = (system + irq + softirq) / total x 100
    busy_pct = usr_pct + sys_pct     iowait_pct = iowait / total x 100     steal_pct = steal / total x 100
    us_per_io = (busy ticks / USER_HZ) x 10^6 / the step's I/Os    (USER_HZ: 100, the value of every Linux ABI the
                                                                   lab's agents run on)

This is the whole host (fio, the kernel's block layer and driver, interrupts, anything else that ran), where fio's
own ``usr_cpu`` / ``sys_cpu`` (:class:`labcontract.fioresult.CpuStats`) count its processes only: the two side by side
tell what a host-driven card costs the host beyond fio. The readings are untrusted input: bounded in size and line
count, every field a non-negative integer, the end reading never behind the start (a host that rebooted mid-step has
no figure).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

START, END = "host-cpu.start", "host-cpu.end"   # the artifacts' names
USER_HZ = 100
MAX_BYTES = 1 << 20        # a reading: 4,097 lines of 10 counters is far below it
MAX_CPUS = 4096
_LINE = re.compile(r"cpu(\d{0,4}) +(\d{1,20}(?: \d{1,20}){3,9})")
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


class HostCpu(BaseModel):
    """The host's CPU over a step (module docstring): in % of all its CPUs, and CPU µs per I/O."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: int = Field(ge=1, le=MAX_CPUS)
    usr_pct: float = Field(ge=0, le=100)
    sys_pct: float = Field(ge=0, le=100)
    iowait_pct: float = Field(ge=0, le=100)
    steal_pct: float = Field(ge=0, le=100)
    busy_pct: float = Field(ge=0, le=100)
    us_per_io: float | None = Field(default=None, ge=0)   # None without I/O


def reading(raw: bytes, what: str) -> tuple[tuple[int, ...], int]:
    """The aggregate counters (the 8 fields of the module docstring; missing trailing fields of an old kernel are 0)
    and the number of CPUs of one reading; ValueError naming ``what`` when it is not a ``cpu`` lines reading."""
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{what}: {len(raw)} bytes, over the {MAX_BYTES} of a reading")
    total: tuple[int, ...] | None = None
    cpus = 0
    for n, line in enumerate(raw.decode("ascii", errors="replace").splitlines(), start=1):
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"{what}: line {n} is not a /proc/stat cpu line: {line[:80]!r}")
        if m.group(1) == "":
            if total is not None:
                raise ValueError(f"{what}: line {n}: a second aggregate cpu line")
            values = [int(x) for x in m.group(2).split()][:len(_FIELDS)]
            total = tuple(values + [0] * (len(_FIELDS) - len(values)))
        else:
            cpus += 1
            if cpus > MAX_CPUS:
                raise ValueError(f"{what}: over {MAX_CPUS} CPUs")
    if total is None or cpus == 0:
        raise ValueError(f"{what}: no aggregate cpu line and per-CPU lines")
    return total, cpus


def host_cpu(start: bytes, end: bytes, ios: int) -> HostCpu:
    """The figures of the two readings (module docstring) for a step of ``ios`` I/Os; ValueError for a reading that
    is malformed, or an end behind its start."""
    a, _ = reading(start, START)
    b, cpus = reading(end, END)
    d = dict(zip(_FIELDS, (y - x for x, y in zip(a, b, strict=True)), strict=True))
    if any(v < 0 for v in d.values()):
        raise ValueError(f"{END}: a counter went back ({', '.join(k for k, v in d.items() if v < 0)}): the host "
                         "restarted during the step")
    total = sum(d.values())
    if total <= 0:
        raise ValueError(f"{END}: no tick passed between the readings")
    usr, sys_ = d["user"] + d["nice"], d["system"] + d["irq"] + d["softirq"]
    return HostCpu(cpus=cpus, usr_pct=usr / total * 100, sys_pct=sys_ / total * 100,
                   iowait_pct=d["iowait"] / total * 100, steal_pct=d["steal"] / total * 100,
                   busy_pct=(usr + sys_) / total * 100,
                   us_per_io=(usr + sys_) / USER_HZ * 1e6 / ios if ios > 0 else None)
