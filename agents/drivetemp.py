"""The declared DUTs' temperature every second of a storage step (labcontract.drivetemp): each DUT's hwmon sensor
read from sysfs in a thread of its own, from the step's launch to its end.

Where the sensor is: the block device's ``device`` in sysfs (``/sys/class/block/sda/device`` the SCSI device,
holding ``hwmon/hwmonN``; ``/sys/class/block/nvme0n1/device`` the NVMe controller holding ``hwmonN``, or with the
kernel's native NVMe multipath, Debian's default, the subsystem ``nvme-subsys0`` holding its controllers
``nvme0/hwmonN``), whose ``temp1_input`` is the drive's composite temperature in millidegrees Celsius. Reading it
is what ``sensors`` does: no tool is started, no root needed (the file is world-readable), and for NVMe the kernel
asks the drive's SMART / Health log page each time. A reading that fails is counted with its reason; the step never
waits for one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from labcontract.drivetemp import MAX_C, MAX_SERIES, MIN_C, DriveSeries, DriveTemps, Unmeasured

SYS_BLOCK = Path("/sys/class/block")


def sensor_of(dev_path: str, sys_block: Path = SYS_BLOCK) -> Path | None:
    """The hwmon ``temp1_input`` of the drive behind ``dev_path`` (a by-id link, a /dev node), or None."""
    try:
        name = Path(os.path.realpath(dev_path)).name
    except OSError:
        return None
    device = sys_block / name / "device"
    # drivetemp's SCSI device; an NVMe controller; a namespace of NVMe's native multipath, whose device is the
    # subsystem (nvme-subsys0) holding its controllers (nvme0, ...)
    for pattern in ("hwmon/hwmon*/temp1_input", "hwmon*/temp1_input", "nvme*/hwmon*/temp1_input"):
        found = sorted(device.glob(pattern))
        if found:
            return found[0]
    return None


def read_celsius(sensor: Path) -> float:
    """°C from a hwmon input (millidegrees); ValueError when it is not a reading within a drive's range."""
    with sensor.open("rb") as fh:
        raw = fh.read(32)
    c = int(raw.strip()) / 1000
    if not MIN_C <= c <= MAX_C:
        raise ValueError(f"{c:g} °C is outside a drive sensor's range")
    return c


class TempSampler:
    """Reads every sensor every ``interval_s`` from :meth:`start` until ``done()`` or :meth:`stop`."""

    def __init__(self, duts: Iterable[tuple[str, str]], interval_s: float = 1.0,
                 done: Callable[[], bool] = lambda: False, sys_block: Path = SYS_BLOCK) -> None:
        self.interval_s = interval_s
        self.done = done
        self.sensors: dict[str, Path] = {}
        self.missing: list[Unmeasured] = []
        for name, path in duts:
            sensor = sensor_of(path, sys_block)
            if sensor is None:
                self.missing.append(Unmeasured(name=name, reason=f"{path}: no hwmon temperature sensor"))
            else:
                self.sensors[name] = sensor
        self._t: dict[str, list[float]] = {n: [] for n in self.sensors}
        self._c: dict[str, list[float]] = {n: [] for n in self.sensors}
        self._failures: dict[str, int] = dict.fromkeys(self.sensors, 0)
        self._errors: dict[str, str] = {}
        self._stride = 1       # readings kept: every stride-th tick (doubled each time a series reaches MAX_SERIES)
        self._tick = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="drive-temp", daemon=True)

    def start(self) -> TempSampler:
        self._t0 = time.monotonic()
        if self.sensors:
            self._thread.start()
        return self

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set() and not self.done():
            self.sample()
            next_at += self.interval_s
            now = time.monotonic()
            if next_at < now:
                next_at = now + self.interval_s - ((now - next_at) % self.interval_s)
            self._stop.wait(next_at - now)

    def sample(self) -> None:
        """One reading of every sensor (what the thread does each interval); past :data:`MAX_SERIES` readings the
        series are thinned to every other one and the stride doubled: a step of hours keeps its whole length."""
        self._tick += 1
        if (self._tick - 1) % self._stride:
            return
        at = round(time.monotonic() - self._t0, 3)
        for name, sensor in self.sensors.items():
            try:
                c = read_celsius(sensor)
            except (OSError, ValueError) as e:
                with self._lock:
                    self._failures[name] += 1
                    self._errors[name] = f"{sensor}: {e}"
                continue
            with self._lock:
                self._t[name].append(at)
                self._c[name].append(c)
        with self._lock:
            if any(len(v) >= MAX_SERIES for v in self._c.values()):
                for name in self._c:
                    self._t[name], self._c[name] = self._t[name][::2], self._c[name][::2]
                self._stride *= 2

    def stop(self) -> None:
        self._stop.set()

    def result(self) -> DriveTemps | None:
        """What was read (stops the sampler); None when no DUT has a sensor (no artifact is written)."""
        self.stop()
        if not self.sensors:
            return None
        with self._lock:
            series = tuple(DriveSeries(name=n, sensor=str(s), t=tuple(self._t[n]), c=tuple(self._c[n]),
                                       failures=self._failures[n], error=self._errors.get(n))
                           for n, s in self.sensors.items())
        return DriveTemps(interval_s=min(self.interval_s * self._stride, 60.0), duts=series,
                          not_measured=tuple(self.missing))
