"""The Windows platform: facts and disks from PowerShell / CIM, ``\\\\.\\PhysicalDriveN`` DUTs, ``windowsaio``,
steps under a Python wrapper in a detached process group, health from ``Get-PhysicalDisk`` and
``Get-StorageReliabilityCounter``.

Every host command goes through the injectable :data:`agents.platform.Run`, so all of this is unit-tested on
Linux against stored outputs (``tests/fixtures/windows``); ``docs/windows.md`` lists what still needs a real
Windows host. Command output is untrusted input: it is size-bounded before it is parsed, every value is
typed and range-checked, and a bad output is refused as a whole with every problem named
(:class:`labcontract.errors.InputError`, source = the command), never half-used.

A Windows DUT's contract path is ``//./PhysicalDriveN``: the DUT path pattern and the start message of the
contract take only ``/``-rooted paths, and Win32 reads ``//./`` as the device namespace ``\\\\.\\`` does.
:meth:`WindowsPlatform.fio_filename` writes it the way fio's HOWTO documents (``\\\\.\\PhysicalDriveN``,
each ``:`` escaped as ``\\:``); the job-file check takes exactly that form besides ``/``-rooted paths and reads
it back as the contract path. :meth:`WindowsPlatform.fio_engine` runs a suite's Linux engine as ``windowsaio``.
:meth:`WindowsPlatform.observe_dut` gives the safety interlock its view of a disk
(:mod:`agents.platform.windows_interlock`).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from agents.platform.base import MAX_OUTPUT_BYTES, Run, run_command
from agents.platform.common import PLACEHOLDERS, device_checks, fio_version, read_int, read_text
from agents.platform.windows_interlock import observe_drive
from labcontract.engines import WINDOWS_IOENGINES, engine_for
from labcontract.errors import ConfigError, InputError, Problem
from labcontract.facts import BlockDevice, DeclaredDut, HostFacts, windows_drive_path
from labcontract.interlock import ObservedState
from labcontract.protocol import HealthCheck

__all__ = ["CREATION_FLAGS", "QUERIES", "WindowsPlatform", "contract_path", "native_path"]

POWERSHELL = ("powershell.exe", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-Command")
_DATE = "if ($_.{0}) {{ $_.{0}.ToUniversalTime().ToString('o') }}"
QUERIES: dict[str, str] = {
    "os": "Get-CimInstance Win32_OperatingSystem | Select-Object Caption,Version,BuildNumber,OSArchitecture,"
          "TotalVisibleMemorySize,@{n='LastBootUpTime';e={" + _DATE.format("LastBootUpTime") + "}} "
          "| ConvertTo-Json -Compress",
    "computer_system": "Get-CimInstance Win32_ComputerSystem | Select-Object Manufacturer,Model,"
                       "TotalPhysicalMemory,NumberOfProcessors,NumberOfLogicalProcessors | ConvertTo-Json -Compress",
    "processor": "ConvertTo-Json -Compress -InputObject @(Get-CimInstance Win32_Processor | Select-Object Name,"
                 "NumberOfCores,NumberOfLogicalProcessors,SocketDesignation)",
    "bios": "Get-CimInstance Win32_BIOS | Select-Object Manufacturer,SMBIOSBIOSVersion,@{n='ReleaseDate';e={"
            + _DATE.format("ReleaseDate") + "}} | ConvertTo-Json -Compress",
    "baseboard": "Get-CimInstance Win32_BaseBoard | Select-Object Manufacturer,Product | ConvertTo-Json -Compress",
    "disk": "ConvertTo-Json -Compress -InputObject @(Get-Disk | Select-Object Number,FriendlyName,Model,"
            "SerialNumber,FirmwareVersion,Size,@{n='BusType';e={[string]$_.BusType}},UniqueId,Path,IsBoot,"
            "IsSystem,IsOffline)",
    "physical_disk": "ConvertTo-Json -Compress -InputObject @(Get-PhysicalDisk | Select-Object DeviceId,"
                     "FriendlyName,Model,SerialNumber,FirmwareVersion,Size,@{n='MediaType';e={[string]$_.MediaType}},"
                     "@{n='BusType';e={[string]$_.BusType}},@{n='HealthStatus';e={[string]$_.HealthStatus}},UniqueId)",
    # @N@: a drive number (an int checked by the caller)
    "reliability": "$d = Get-PhysicalDisk | Where-Object DeviceId -eq '@N@'; if (-not $d) { exit 3 }; "
                   "$r = $d | Get-StorageReliabilityCounter -ErrorAction SilentlyContinue; "
                   "[pscustomobject]@{DeviceId=$d.DeviceId; HealthStatus=[string]$d.HealthStatus; "
                   "OperationalStatus=@($d.OperationalStatus | ForEach-Object {[string]$_}); "
                   "Temperature=$r.Temperature; Wear=$r.Wear; ReadErrorsUncorrected=$r.ReadErrorsUncorrected; "
                   "WriteErrorsUncorrected=$r.WriteErrorsUncorrected; PowerOnHours=$r.PowerOnHours} "
                   "| ConvertTo-Json -Compress",
    # @N@: a drive number (an int checked by the caller); the interlock's view of a DUT disk (windows_interlock):
    # [] when there is no such disk, its partitions' letters and access paths
    "disk_state": "ConvertTo-Json -Compress -InputObject @(Get-Disk | Where-Object Number -eq @N@ | Select-Object "
                  "Number,IsOffline,IsBoot,IsSystem,IsReadOnly,NumberOfPartitions,"
                  "@{n='PartitionStyle';e={[string]$_.PartitionStyle}})",
    "partitions": "ConvertTo-Json -Compress -Depth 4 -InputObject @(Get-Partition -DiskNumber @N@ -ErrorAction Stop | "
                  "Select-Object PartitionNumber,@{n='DriveLetter';e={[string]$_.DriveLetter}},AccessPaths,"
                  "@{n='Type';e={[string]$_.Type}},IsBoot,IsSystem)",
    # @N@: a pid (an int checked by the caller); the start time as a FILETIME (100 ns since 1601, UTC)
    "process_start": "$p = Get-Process -Id @N@ -ErrorAction SilentlyContinue; "
                     "if ($p) { $p.StartTime.ToFileTimeUtc() }",
}

# Win32 process creation flags (winbase.h; subprocess has them only on Windows): a group of its own, no console
CREATE_NEW_PROCESS_GROUP = 0x00000200
DETACHED_PROCESS = 0x00000008
CREATION_FLAGS = CREATE_NEW_PROCESS_GROUP | DETACHED_PROCESS
MAX_ITEMS = 1024                  # disks, processors
MAX_DRIVE = 9999
MAX_SIZE = 1 << 60                # bytes: a disk or a machine's memory beyond 1 EiB is not a reading but a fault
MAX_COUNT = 1 << 16               # cores, logical processors
MAX_FILETIME = (1 << 63) - 1
_DRIVE = re.compile(r"^(?:\\\\[.?]\\|//[.?]/)?physicaldrive(\d{1,4})\Z", re.IGNORECASE)
# enums as PowerShell 5.1 writes them when not made strings (ints), and as strings
_MEDIA = {"0": None, "3": True, "4": False, "5": False, "unspecified": None, "hdd": True, "ssd": False, "scm": False}
_BUS = {"1": "scsi", "3": "ata", "6": "fc", "7": "usb", "8": "raid", "9": "iscsi", "10": "sas", "11": "sata",
        "15": "virtual", "17": "nvme", "scsi": "scsi", "ata": "ata", "fibre channel": "fc", "usb": "usb",
        "raid": "raid", "iscsi": "iscsi", "sas": "sas", "sata": "sata", "file backed virtual": "virtual",
        "nvme": "nvme"}
_HEALTH = {"0": "Healthy", "1": "Warning", "2": "Unhealthy", "5": "Unknown", "healthy": "Healthy",
           "warning": "Warning", "unhealthy": "Unhealthy", "unknown": "Unknown"}


def drive_number(path: str) -> int | None:
    """N of ``\\\\.\\PhysicalDriveN``, ``//./PhysicalDriveN`` or ``PhysicalDriveN``; None for anything else."""
    m = _DRIVE.match(path.strip())
    return int(m.group(1)) if m else None


def contract_path(n: int) -> str:
    """Drive N as the contract carries it (a ``/``-rooted DUT path: :func:`labcontract.facts.windows_drive_path`)."""
    return windows_drive_path(n)


def native_path(n: int) -> str:
    """Drive N as Win32 and fio's documentation write it."""
    return f"\\\\.\\PhysicalDrive{n}"


def _records(source: str, proc: subprocess.CompletedProcess[str], *, one: bool = False) -> list[dict[str, object]]:
    """The JSON objects a query printed (an object or a list of objects), refused whole when it failed, is too
    big, is not JSON, or holds something else."""
    out = proc.stdout or ""
    if proc.returncode != 0:
        raise InputError(source, [Problem("", f"exit code {proc.returncode}: {(proc.stderr or '').strip()[:200]}")])
    if len(out) > MAX_OUTPUT_BYTES:
        raise InputError(source, [Problem("", f"{len(out)} characters of output (at most {MAX_OUTPUT_BYTES})")])
    try:
        data = json.loads(out) if out.strip() else []
    except (ValueError, RecursionError) as e:
        raise InputError(source, [Problem("", f"not JSON: {str(e)[:120]}")]) from None
    items = [data] if isinstance(data, dict) else data
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(source, [Problem("", "expected a JSON object or a list of objects")])
    if len(items) > MAX_ITEMS or (one and len(items) != 1):
        bound = "exactly 1" if one else f"at most {MAX_ITEMS}"
        raise InputError(source, [Problem("", f"{len(items)} objects ({bound})")])
    return items


def _enum(obj: dict[str, object], key: str, table: Mapping[str, object], where: str,
          problems: list[Problem]) -> object:
    value = obj.get(key)
    if value is None:
        return None
    key_text = str(value).strip().lower() if isinstance(value, str | int) and not isinstance(value, bool) else None
    if key_text is None or key_text not in table:
        problems.append(Problem(f"{where}.{key}", f"unknown value {str(value)[:40]!r}"))
        return None
    return table[key_text]


def _name(value: str | None) -> str | None:
    return None if value is None or value.lower() in PLACEHOLDERS else value


@dataclass(frozen=True)
class _Disk:
    device: BlockDevice
    system: bool            # holds the running Windows (boot or system disk): never a DUT


@dataclass(frozen=True)
class WindowsPlatform:
    """The Windows agent platform; ``run`` runs its PowerShell and ``taskkill`` commands (tests: stored
    outputs), ``python`` is the interpreter the step wrapper runs under."""

    run: Run = run_command
    python: str = sys.executable
    name: str = field(default="windows", init=False)
    default_ioengine: str = field(default="windowsaio", init=False)
    ioengines: frozenset[str] = field(default=WINDOWS_IOENGINES, init=False)

    def with_run(self, run: Run) -> WindowsPlatform:
        return replace(self, run=run)

    def _query(self, name: str, n: int | None = None, *, one: bool = False) -> list[dict[str, object]]:
        script = QUERIES[name] if n is None else QUERIES[name].replace("@N@", str(int(n)))
        source = f"powershell {name}"
        try:
            proc = self.run([*POWERSHELL, script])
        except (OSError, subprocess.SubprocessError) as e:
            raise InputError(source, [Problem("", f"cannot run: {e}")]) from None
        return _records(source, proc, one=one)

    # ------------------------------------------------------------------ facts and devices
    def host_facts(self, *, hostname: str | None = None, fio_binary: str = "fio") -> HostFacts:
        """OS caption and build, CPUs, memory, server/board/BIOS from CIM; the disks (:meth:`block_devices`)."""
        problems: list[Problem] = []
        [os_], [cs] = self._query("os", one=True), self._query("computer_system", one=True)
        cpus, [bios], [board] = self._query("processor"), self._query("bios", one=True), self._query("baseboard",
                                                                                                        one=True)
        caption = read_text(os_, "Caption", "os", problems)
        version = read_text(os_, "Version", "os", problems, max_len=64)
        if version is not None and not re.fullmatch(r"\d{1,5}(\.\d{1,6}){1,3}", version):
            problems.append(Problem("os.Version", f"not a Windows version: {version[:40]!r}"))
        memory = read_int(cs, "TotalPhysicalMemory", "computer_system", problems, lo=1, hi=MAX_SIZE)
        models = [read_text(c, "Name", f"processor[{i}]", problems) for i, c in enumerate(cpus)]
        cores = [read_int(c, "NumberOfCores", f"processor[{i}]", problems, lo=1, hi=MAX_COUNT)
                 for i, c in enumerate(cpus)]
        threads = [read_int(c, "NumberOfLogicalProcessors", f"processor[{i}]", problems, lo=1, hi=MAX_COUNT)
                   for i, c in enumerate(cpus)]
        dmi = {"sys_vendor": _name(read_text(cs, "Manufacturer", "computer_system", problems)),
               "product_name": _name(read_text(cs, "Model", "computer_system", problems)),
               "board_vendor": _name(read_text(board, "Manufacturer", "baseboard", problems)),
               "board_name": _name(read_text(board, "Product", "baseboard", problems)),
               "bios_vendor": _name(read_text(bios, "Manufacturer", "bios", problems)),
               "bios_version": _name(read_text(bios, "SMBIOSBIOSVersion", "bios", problems)),
               "bios_date": read_text(bios, "ReleaseDate", "bios", problems, max_len=40)}
        if problems:
            raise InputError("powershell facts", problems)
        return HostFacts(
            hostname=hostname if hostname is not None else socket.gethostname(),
            cpu_model=next((m for m in models if m), None),
            cpu_cores=sum(c for c in cores if c) or None,
            cpu_threads=sum(t for t in threads if t) or None,
            memory_bytes=memory,
            kernel=version,
            os=caption,
            os_family="windows",
            fio_version=fio_version(fio_binary),
            block_devices=self.block_devices(),
            cpu_sockets=len(cpus) or None,
            **dmi,
        )

    def _disks(self) -> list[_Disk]:
        """``Get-Disk`` joined with ``Get-PhysicalDisk`` (by drive number), in drive-number order."""
        problems: list[Problem] = []
        physical: dict[int, dict[str, object]] = {}
        for i, pd in enumerate(self._query("physical_disk")):
            n = read_int(pd, "DeviceId", f"physical_disk[{i}]", problems, lo=0, hi=MAX_DRIVE, required=True)
            if n is not None:
                physical[n] = pd
        out: list[_Disk] = []
        for i, d in enumerate(self._query("disk")):
            where = f"disk[{i}]"
            before = len(problems)
            n = read_int(d, "Number", where, problems, lo=0, hi=MAX_DRIVE, required=True)
            size = read_int(d, "Size", where, problems, lo=0, hi=MAX_SIZE, required=True)
            pd = physical.get(n, {}) if n is not None else {}
            pwhere = f"physical_disk[DeviceId={n}]"
            serial = read_text(pd, "SerialNumber", pwhere, problems) or read_text(d, "SerialNumber", where, problems)
            device = dict(
                model=read_text(d, "Model", where, problems) or read_text(pd, "Model", pwhere, problems)
                or read_text(d, "FriendlyName", where, problems),
                serial=serial,
                firmware=read_text(d, "FirmwareVersion", where, problems)
                or read_text(pd, "FirmwareVersion", pwhere, problems),
                wwn=read_text(d, "UniqueId", where, problems),
                rotational=_enum(pd, "MediaType", _MEDIA, pwhere, problems),
                transport=_enum(d, "BusType", _BUS, where, problems),
            )
            stable = read_text(d, "Path", where, problems, max_len=1024)
            flags = [d.get(k) for k in ("IsBoot", "IsSystem")]
            if not all(f is None or isinstance(f, bool) for f in flags):
                problems.append(Problem(f"{where}.IsBoot/IsSystem", "expected true or false"))
            if n is None or size is None or len(problems) > before:
                continue
            out.append(_Disk(BlockDevice(name=f"PhysicalDrive{n}", path=contract_path(n), size_bytes=size,
                                         by_id=(stable,) if stable else (), kind="disk", **device),
                             system=any(f is True for f in flags)))
        if problems:
            raise InputError("powershell Get-Disk/Get-PhysicalDisk", problems)
        return sorted(out, key=lambda d: int(d.device.name.removeprefix("PhysicalDrive")))

    def block_devices(self) -> tuple[BlockDevice, ...]:
        return tuple(d.device for d in self._disks())

    def declare_dut(self, name: str, path: str, devices: Sequence[BlockDevice], *,
                    spec: str | None = None) -> DeclaredDut:
        """A whole disk ``\\\\.\\PhysicalDriveN`` (or ``//./PhysicalDriveN``, ``PhysicalDriveN``), not the disk
        Windows runs from; file-backed DUTs are not supported on Windows (the contract takes no drive letter)."""
        key = spec or path
        n = drive_number(path)
        if n is None:
            raise ConfigError("--dut", key, f"{path[:80]!r}: a Windows DUT is a whole disk, \\\\.\\PhysicalDriveN")
        try:
            disks = self._disks()
        except InputError as e:
            raise ConfigError("--dut", key, f"cannot read the disks: {e.summary}") from None
        disk = next((d for d in disks if d.device.path == contract_path(n)), None)
        if disk is None:
            raise ConfigError("--dut", key, f"{native_path(n)} does not exist (Get-Disk lists no disk {n})")
        if disk.system:
            raise ConfigError("--dut", key, f"{native_path(n)} is the boot or system disk of this Windows")
        dev = disk.device
        if dev.size_bytes <= 0:
            raise ConfigError("--dut", key, f"{native_path(n)} has size 0 (no medium present?)")
        return DeclaredDut(name=name, path=dev.path, kind="block", size_bytes=dev.size_bytes, model=dev.model,
                           serial=dev.serial, firmware=dev.firmware, by_id=dev.by_id[0] if dev.by_id else None)

    def fio_filename(self, path: str) -> str:
        """``\\\\.\\PhysicalDriveN`` for a disk; any ':' escaped as ``\\:`` (fio HOWTO: ``F\\:\\filename``)."""
        n = drive_number(path)
        return (native_path(n) if n is not None else path).replace(":", "\\:")

    def fio_engine(self, declared: str) -> str:
        """libaio, io_uring and posixaio (Linux's asynchronous engines) run as ``windowsaio``; sync, psync and
        windowsaio as they are; pvsync2 is refused (:mod:`labcontract.engines`, docs/windows.md)."""
        return engine_for(self.name, declared)

    def observe_dut(self, path: str) -> ObservedState:
        """The disk as the safety interlock sees it, from ``Get-Disk`` and ``Get-Partition``
        (:mod:`agents.platform.windows_interlock`); a failed query is a ``probe_error`` (refused)."""
        return observe_drive(lambda name, n: self._query(name, n), path, drive_number(path))

    # ------------------------------------------------------------------ process supervision
    def start_detached(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """``argv`` under the Python wrapper (:mod:`agents.platform.wrap`) in a new process group with no
        console (:data:`CREATION_FLAGS`): an agent restart leaves it running; the wrapper records ``rc``."""
        return subprocess.Popen(
            [self.python, "-m", "agents.platform.wrap", *argv],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, env=dict(env), creationflags=CREATION_FLAGS,
        )

    def start_token(self, pid: int) -> int | None:
        """The process's start time as a FILETIME (``Get-Process``); None when there is no such process or the
        answer is not a plausible FILETIME."""
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 32:
            return None
        try:
            proc = self.run([*POWERSHELL, QUERIES["process_start"].replace("@N@", str(pid))])
        except (OSError, subprocess.SubprocessError):
            return None
        out = (proc.stdout or "").strip()
        if proc.returncode != 0 or not out.isdigit() or len(out) > 19 or not 0 < int(out) <= MAX_FILETIME:
            return None
        return int(out)

    def alive(self, pid: int, token: object) -> bool:
        return isinstance(token, int) and not isinstance(token, bool) and self.start_token(pid) == token

    def _taskkill(self, pid: int, token: object, *extra: str) -> None:
        if token is not None and not self.alive(pid, token):
            return                       # gone, or its pid now belongs to another process: never that one
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.run(["taskkill", "/PID", str(int(pid)), "/T", *extra])

    def terminate(self, pid: int, token: object) -> None:
        """``taskkill /T``: asks the tree to close (a console process with no window may ignore it; the runner
        follows with :meth:`kill` after its grace period)."""
        self._taskkill(pid, token)

    def kill(self, pid: int, token: object) -> None:
        self._taskkill(pid, token, "/F")

    def boot_id(self) -> str:
        """The last boot time (UTC, ISO 8601) from ``Win32_OperatingSystem``; "" when it cannot be read."""
        try:
            [os_] = self._query("os", one=True)
        except InputError:
            return ""
        problems: list[Problem] = []
        boot = read_text(os_, "LastBootUpTime", "os", problems, max_len=40)
        return boot if boot and not problems and re.fullmatch(r"[0-9T:.+Z-]{10,40}", boot) else ""

    # ------------------------------------------------------------------ health
    def device_checks(self, dut: DeclaredDut) -> list[HealthCheck]:
        return device_checks(self, dut)

    def smart_check(self, dut: DeclaredDut) -> HealthCheck | None:
        """The disk's ``HealthStatus`` and, where Windows has them (admin), its uncorrected read/write errors
        and wear from ``Get-StorageReliabilityCounter``."""
        n = drive_number(dut.path)
        if dut.kind != "block" or n is None:
            return None
        try:
            [r] = self._query("reliability", n, one=True)
        except InputError as e:
            return HealthCheck(check="smart", target=dut.path, ok=False, detail=str(e).replace("\n", ";")[:500])
        problems: list[Problem] = []
        status = _enum(r, "HealthStatus", _HEALTH, "reliability", problems)
        counts = {k: read_int(r, k, "reliability", problems, lo=0, hi=1 << 62)
                  for k in ("ReadErrorsUncorrected", "WriteErrorsUncorrected", "Wear", "Temperature")}
        if problems:
            return HealthCheck(check="smart", target=dut.path, ok=False, detail="; ".join(map(str, problems))[:500])
        errors = (counts["ReadErrorsUncorrected"] or 0) + (counts["WriteErrorsUncorrected"] or 0)
        known = counts["ReadErrorsUncorrected"] is not None
        detail = f"HealthStatus={status or 'unknown'}" + (
            f" uncorrected_errors={errors} wear={counts['Wear']}% temperature={counts['Temperature']}C" if known
            else " (reliability counters unknown: need an administrator)")
        return HealthCheck(check="smart", target=dut.path, ok=status == "Healthy" and errors == 0,
                           detail=detail)
