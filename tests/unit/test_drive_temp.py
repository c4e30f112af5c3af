"""Drive temperature every second of a step (agents.drivetemp, labcontract.drivetemp): the hwmon sensor found in a
sysfs tree laid out as the kernel lays it out, readings and their failures, the artifact judged as untrusted input,
and what the result keeps. The real sensor (an emulated NVMe drive's, through the kernel's nvme driver) is read in
the VM tier (tests/vmlab/test_1_deploy.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agents.drivetemp import TempSampler, read_celsius, sensor_of
from labcontract.drivetemp import DriveTemps, parse_drive_temp, summary
from labcontract.errors import ProtocolError


def sysfs(root: Path, name: str, nested: bool | str, millideg: str = "41500\n") -> Path:
    """``/sys/class/block/<name>/device`` with its hwmon sensor, as nvme (hwmonN under the controller), SCSI
    drivetemp (hwmon/hwmonN) or NVMe's native multipath (the subsystem: ``nvme0/hwmonN``, ``nested="nvme0"``,
    seen on the VM tier's Debian 12 guest) lay it out."""
    sub = f"{nested}/hwmon0" if isinstance(nested, str) else "hwmon/hwmon3" if nested else "hwmon3"
    hw = root / name / "device" / sub
    hw.mkdir(parents=True)
    (hw / "temp1_input").write_text(millideg)
    return hw / "temp1_input"


def test_the_sensor_is_found_through_a_by_id_link_and_read_in_celsius(tmp_path: Path) -> None:
    block = tmp_path / "sys"
    nvme, sata = sysfs(block, "nvme0n1", False), sysfs(block, "sda", True)
    assert sensor_of("/dev/nvme1n2", block) is None
    assert sensor_of("/dev/nvme1n2", block) is None and sensor_of("/dev/nvme2n1", block) is None
    multipath = sysfs(block, "nvme1n2", "nvme1")
    assert sensor_of("/dev/nvme1n2", block) == multipath
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvme0n1").touch()
    os.symlink(dev / "nvme0n1", dev / "nvme-QEMU_1")
    assert sensor_of(str(dev / "nvme-QEMU_1"), block) == nvme
    assert sensor_of("/dev/sda", block) == sata
    assert sensor_of("/dev/loop3", block) is None
    assert read_celsius(nvme) == 41.5
    for bad in ("hot\n", "300000\n", ""):
        nvme.write_text(bad)
        with pytest.raises(ValueError):
            read_celsius(nvme)


def test_a_sampler_reads_every_sensor_counts_failures_and_names_a_dut_without_one(tmp_path: Path) -> None:
    block = tmp_path / "sys"
    sensor = sysfs(block, "nvme0n1", False)
    s = TempSampler([("nvme0", "/dev/nvme0n1"), ("loop", "/dev/loop7")], sys_block=block)
    s.sample()
    sensor.write_text("42000\n")
    s.sample()
    sensor.write_text("garbage\n")
    s.sample()
    got = s.result()
    assert got is not None
    (d,) = got.duts
    assert (d.name, d.c, d.failures, len(d.t)) == ("nvme0", (41.5, 42.0), 1, 2) and "garbage" in (d.error or "")
    assert [(u.name, u.reason) for u in got.not_measured] == [("loop", "/dev/loop7: no hwmon temperature sensor")]
    again = parse_drive_temp(got.model_dump_json().encode())
    assert again == got
    kept = summary(got)
    assert kept["nvme0"]["min_c"] == 41.5 and kept["nvme0"]["max_c"] == 42.0 and kept["nvme0"]["samples"] == 2
    assert kept["loop"] == {"samples": 0, "error": "/dev/loop7: no hwmon temperature sensor"}
    assert TempSampler([("loop", "/dev/loop7")], sys_block=block).start().result() is None   # no artifact


def test_a_thread_samples_until_the_step_is_done(tmp_path: Path) -> None:
    block = tmp_path / "sys"
    sysfs(block, "nvme0n1", False)
    done = {"v": False}
    s = TempSampler([("nvme0", "/dev/nvme0n1")], interval_s=0.01, done=lambda: done["v"], sys_block=block).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with s._lock:
            if len(s._c["nvme0"]) >= 3:
                break
        time.sleep(0.01)
    done["v"] = True
    got = s.result()
    assert got is not None and len(got.duts[0].c) >= 3


@pytest.mark.parametrize("doc", [
    {"duts": [{"name": "n", "sensor": "s", "t": [0.0, 1.0], "c": [40.0]}]},            # unpaired
    {"duts": [{"name": "n", "sensor": "s", "t": [0.0], "c": [float("nan")]}]},
    {"duts": [{"name": "n", "sensor": "s", "t": [0.0], "c": [1e9]}]},
    {"duts": [{"name": "n", "sensor": "s", "t": [-1.0], "c": [40.0]}]},
    {"duts": [{"name": "n", "sensor": "s", "t": [0.0], "c": [40.0]}], "extra": 1},
    {"duts": [{"name": "n", "sensor": "s"}] * 65},
    {"interval_s": 0},
])
def test_a_hostile_artifact_is_refused(doc: dict[str, object]) -> None:
    raw = json.dumps(doc).encode()
    with pytest.raises(ProtocolError):
        parse_drive_temp(raw, "attempt 1 drive-temp.json")


def test_oversized_artifact_is_refused_before_parsing_and_a_long_series_is_kept_in_360_points() -> None:
    with pytest.raises(ProtocolError, match="over"):
        parse_drive_temp(b" " * (17 << 20))
    n = 7_200
    temps = DriveTemps.model_validate({"duts": [{"name": "n", "sensor": "s", "t": [float(i) for i in range(n)],
                                                 "c": [40.0 + (i % 10) for i in range(n)]}]})
    kept = summary(temps)["n"]
    assert len(kept["t"]) == len(kept["c"]) == 360 and kept["samples"] == n   # type: ignore[arg-type]
    assert kept["min_c"] == 40.0 and kept["max_c"] == 49.0


def test_a_step_of_hours_keeps_its_whole_length_in_thinned_readings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    monkeypatch.setattr("agents.drivetemp.MAX_SERIES", 8)
    block = tmp_path / "sys"
    sysfs(block, "nvme0n1", False)
    s = TempSampler([("nvme0", "/dev/nvme0n1")], sys_block=block)
    for _ in range(40):                     # 40 ticks: thinned at 8 readings, again at 8 (stride 2, then 4 ...)
        s.sample()
    got = s.result()
    assert got is not None
    (d,) = got.duts
    assert len(d.c) < 8 and got.interval_s > 1 and list(d.t) == sorted(d.t)
