"""What every synthetic run of the report benchmark shares (bench/reportdata.py for disk runs, bench/reportnet.py
for network runs): the host, the device models and their facts, a run row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labcontract.facts import BlockDevice, HostFacts, StorageController
from labcontract.suite import Suite
from orchestrator.store.models import Run

SEED = 13
HOST = "rd630-01"
T0 = 1_790_000_000.0          # 2026-09-21: submission times of the synthetic runs
FIO = "fio-3.33"


@dataclass(frozen=True)
class DeviceModel:
    """A DUT's declared identity and the peaks its figures are derived from."""

    model: str
    serial: str
    firmware: str
    size_bytes: int
    read_iops: float        # 4K random read peak
    write_iops: float       # 4K random write peak, stock (HP: x hp_gain)
    read_bw: float          # bytes/s
    write_bw: float
    read_lat_ns: float      # unloaded (QD1) latency
    write_lat_ns: float
    hp_gain: float = 1.45


CARD = DeviceModel("Micron P420m", "MSA1313000A7", "B2160700", 1_400_000_000_000, 750_000, 300_000, 3.3e9, 1.6e9,
                   85_000, 22_000)
NVME = DeviceModel("Samsung PM1733", "S4YNNA0R5", "EPK9AB5Q", 3_840_000_000_000, 640_000, 180_000, 7.0e9, 3.6e9,
                   78_000, 16_000)


def host_facts(hostname: str, devices: Sequence[tuple[str, DeviceModel]], **extra: Any) -> dict[str, Any]:
    blocks = tuple(BlockDevice(name=p.rsplit("/", 1)[-1], path=p, size_bytes=d.size_bytes, model=d.model,
                               serial=f"{d.serial}{i}", firmware=d.firmware, kind="disk", driver="nvme",
                               transport="pcie", controller=f"0000:{0x3b + i:02x}:00.0")
                   for i, (p, d) in enumerate(devices))
    ctrls = tuple(StorageController(slot=f"0000:{0x3b + i:02x}:00.0", class_name="NVM Express", driver="nvme",
                                    name=f"{d.model} controller") for i, (_p, d) in enumerate(devices))
    facts = HostFacts(hostname=hostname, cpu_model="Intel(R) Xeon(R) CPU E5-2620 0 @ 2.00GHz", cpu_cores=12,
                      cpu_threads=24, cpu_sockets=2, memory_bytes=16 * 2**30, kernel="6.1.0-27-amd64",
                      os="Debian GNU/Linux 12 (bookworm)", fio_version=FIO, block_devices=blocks,
                      sys_vendor="LENOVO", product_name="ThinkServer RD630", bios_vendor="LENOVO",
                      bios_version="A4KT60AUS", bios_date="03/18/2013", storage_controllers=ctrls, **extra)
    return facts.model_dump(mode="json")


def new_run(run_id: str, suite: Suite, text: str, devices: list[str], *, host: str = HOST, at: float = T0,
            runtime: int | None = None, scale: float | None = None) -> Run:
    return Run(id=run_id, suite_name=suite.name, suite_source=f"builtin:{suite.name}", suite_text=text,
               suite_sha256=suite.sha256, host=host, device=devices[0] if devices else "net", devices=devices,
               runtime_override=runtime, scale=scale, live=True, state="SUCCEEDED", reason="", priority=0,
               submitted_at=at, started_at=at + 1)
