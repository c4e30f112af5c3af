"""The Windows platform layer, on Linux: facts, disks and health parsed from stored PowerShell outputs
(tests/fixtures/windows: representative, not captured on a real host), bad outputs refused with their
reasons, fio naming, and the detached process start (Popen mocked) and re-adoption (pid + start time)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.platform import PLATFORM_METHODS, Platform
from agents.platform import windows as win
from agents.platform.wrap import main as wrap_main
from labcontract.errors import ConfigError, InputError
from labcontract.facts import DeclaredDut

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "windows"
PID, FILETIME = 4242, 133767123456789012


def stored(name: str) -> str:
    return (FIXTURES / name).read_text()


class FakeHost:
    """Answers the platform's commands from stored outputs (by query name, ``name:N`` for a drive or pid)."""

    def __init__(self, **override: str | tuple[int, str]) -> None:
        self.outputs: dict[str, str | tuple[int, str]] = {
            "os": stored("os.json"), "computer_system": stored("computer_system.json"),
            "processor": stored("processor.json"), "bios": stored("bios.json"), "baseboard": stored("baseboard.json"),
            "disk": stored("disk.json"), "physical_disk": stored("physical_disk.json"),
            "reliability:1": stored("reliability_1.json"), "reliability:2": stored("reliability_2_unhealthy.json"),
            f"process_start:{PID}": stored("process_start.txt"),
        }
        self.outputs.update({k.replace("__", ":"): v for k, v in override.items()})
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "taskkill":
            return subprocess.CompletedProcess(argv, 0, "SUCCESS", "")
        assert tuple(argv[:-1]) == win.POWERSHELL
        script = argv[-1]
        for name, query in win.QUERIES.items():
            head, sep, tail = query.partition("@N@")
            if not sep and script == query:
                key = name
                break
            m = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail), script) if sep else None
            if m:
                key = f"{name}:{m.group(1)}"
                break
        else:
            raise AssertionError(f"unexpected command {script[:80]}")
        out = self.outputs.get(key, (1, ""))
        rc, text = out if isinstance(out, tuple) else (0, out)
        return subprocess.CompletedProcess(argv, rc, text, "" if rc == 0 else "not found")


def platform(**override: str | tuple[int, str]) -> tuple[win.WindowsPlatform, FakeHost]:
    host = FakeHost(**override)
    return win.WindowsPlatform(run=host, python="C:\\lab\\venv\\Scripts\\python.exe"), host


def edited(name: str, change: Callable[[Any], None]) -> str:
    data = json.loads(stored(name))
    change(data)
    return json.dumps(data)


# --------------------------------------------------------------------------- the interface


def test_the_windows_platform_implements_every_method_of_the_interface() -> None:
    p, _ = platform()
    assert isinstance(p, Platform)
    for method in PLATFORM_METHODS:
        assert callable(getattr(p, method)), method
    assert p.name == "windows" and p.default_ioengine == "windowsaio" and "windowsaio" in p.ioengines
    assert p.with_run(lambda argv: subprocess.CompletedProcess(argv, 0, "", "")).python == p.python


# --------------------------------------------------------------------------- facts and disks


def test_host_facts_come_from_cim() -> None:
    p, _ = platform()
    facts = p.host_facts(hostname="win-a", fio_binary="/nonexistent/fio")
    assert (facts.os, facts.os_family, facts.kernel) == ("Microsoft Windows Server 2022 Datacenter", "windows",
                                                         "10.0.20348")
    assert facts.cpu_model == "Intel(R) Xeon(R) Gold 6326 CPU @ 2.90GHz"
    assert (facts.cpu_sockets, facts.cpu_cores, facts.cpu_threads) == (2, 32, 64)
    assert facts.memory_bytes == 274386350080
    assert (facts.sys_vendor, facts.product_name, facts.board_name) == ("Lenovo", "ThinkSystem SR650 V2",
                                                                          "7Z73CTO1WW")
    assert (facts.bios_version, facts.bios_date) == ("AFE120G-1.70", "2024-03-11T00:00:00.0000000Z")
    assert facts.fio_version is None and len(facts.block_devices) == 3


def test_disks_are_physical_drives_with_their_identity() -> None:
    p, _ = platform()
    boot, nvme1, nvme2 = p.block_devices()
    assert boot.name == "PhysicalDrive0" and boot.transport == "sata"
    assert nvme1.name == "PhysicalDrive1" and nvme1.path == "//./PhysicalDrive1"
    assert (nvme1.model, nvme1.serial, nvme1.firmware) == ("SAMSUNG MZQL23T8HCLS-00A07", "S64HNE0T812345", "GDC5602Q")
    assert nvme1.size_bytes == 3840755982336 and nvme1.rotational is False and nvme1.transport == "nvme"
    assert nvme1.wwn == "eui.36344830528123450025384500000001"
    assert nvme1.by_id[0].startswith("\\\\?\\scsi#disk&ven_nvme&prod_samsung")
    assert nvme2.serial == "X1J0A0ABCDEF"


def test_powershell_5_enums_as_numbers_are_read_too() -> None:
    p, _ = platform(physical_disk=stored("physical_disk_ps51_enums.json"))
    _, nvme1, nvme2 = p.block_devices()
    assert nvme1.rotational is False and nvme1.transport == "nvme"
    assert nvme2.rotational is None and nvme2.serial == "X1J0A0ABCDEF"      # from Get-Disk alone


def test_a_dut_is_declared_by_its_physical_drive_path() -> None:
    p, _ = platform()
    for spelling in ("\\\\.\\PhysicalDrive1", "//./PhysicalDrive1", "physicaldrive1"):
        dut = p.declare_dut("nvme1", spelling, ())
        assert dut == DeclaredDut(name="nvme1", path="//./PhysicalDrive1", kind="block", size_bytes=3840755982336,
                                  model="SAMSUNG MZQL23T8HCLS-00A07", serial="S64HNE0T812345", firmware="GDC5602Q",
                                  by_id=dut.by_id)
        assert dut.by_id is not None and "prod_samsung" in dut.by_id


@pytest.mark.parametrize(("path", "reason"), [
    ("\\\\.\\PhysicalDrive0", "boot or system disk"),
    ("\\\\.\\PhysicalDrive7", "does not exist"),
    ("C:\\lab\\dut.img", "a Windows DUT is a whole disk"),
    ("\\\\.\\PhysicalDriveX", "a Windows DUT is a whole disk"),
])
def test_what_is_not_a_dut_is_refused_with_the_reason(path: str, reason: str) -> None:
    p, _ = platform()
    with pytest.raises(ConfigError, match=re.escape(reason)) as e:
        p.declare_dut("d", path, (), spec=f"d={path}")
    assert e.value.source == "--dut" and e.value.key == f"d={path}"


# --------------------------------------------------------------------------- untrusted output


def _problems(exc: pytest.ExceptionInfo[InputError]) -> list[str]:
    return [str(p) for p in exc.value.problems]


def test_a_ten_megabyte_output_is_refused_whole() -> None:
    huge = json.dumps([{"Number": 1, "Size": 1, "Model": "x" * (10 << 20)}])
    p, _ = platform(disk=huge)
    with pytest.raises(InputError, match="characters of output"):
        p.block_devices()


def test_every_bad_value_is_named_at_once() -> None:
    def spoil(disks: list[dict[str, Any]]) -> None:
        disks[1]["Model"] = "m" * 1000
        disks[1]["Size"] = -4096
        disks[2]["Number"] = "two"
        disks[0]["IsBoot"] = "yes"
    p, _ = platform(disk=edited("disk.json", spoil))
    with pytest.raises(InputError) as e:
        p.block_devices()
    problems = _problems(e)
    assert any(s.startswith("disk[1].Model: a string of 1000 characters") for s in problems), problems
    assert "disk[1].Size: -4096 is out of range [0, 1152921504606846976]" in problems
    assert "disk[2].Number: expected an integer, got 'two'" in problems
    assert "disk[0].IsBoot/IsSystem: expected true or false" in problems


@pytest.mark.parametrize(("number", "message"), [
    (True, "expected an integer, got 'True'"), (1.5, "expected an integer, got '1.5'"),
    (10_000, "out of range"), (None, "missing"),
])
def test_a_drive_number_must_be_a_small_integer(number: object, message: str) -> None:
    p, _ = platform(disk=edited("disk.json", lambda d: d[1].__setitem__("Number", number)))
    with pytest.raises(InputError, match=re.escape(message)):
        p.block_devices()


@pytest.mark.parametrize(("output", "message"), [
    ((1, ""), "exit code 1"), ("not json", "not JSON"), ("[1, 2]", "expected a JSON object"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"), ("[]", "0 objects (exactly 1)"),
])
def test_an_output_that_is_not_what_the_query_prints_is_refused(output: str | tuple[int, str], message: str) -> None:
    p, _ = platform(os=output)
    with pytest.raises(InputError, match=re.escape(message)):
        p.host_facts(fio_binary="/nonexistent/fio")


def test_a_declaration_over_a_bad_output_says_why() -> None:
    p, _ = platform(disk=(5, ""))
    with pytest.raises(ConfigError, match="cannot read the disks: powershell disk: 1 problem"):
        p.declare_dut("d", "\\\\.\\PhysicalDrive1", ())


def test_facts_with_a_wrong_type_are_refused() -> None:
    p, _ = platform(computer_system=edited("computer_system.json",
                                           lambda d: d.update(TotalPhysicalMemory=-1, Model=["a"])))
    with pytest.raises(InputError) as e:
        p.host_facts(fio_binary="/nonexistent/fio")
    assert set(_problems(e)) == {"computer_system.TotalPhysicalMemory: -1 is out of range [1, 1152921504606846976]",
                                 "computer_system.Model: expected a string, got list"}


# --------------------------------------------------------------------------- fio


def test_fio_names_the_drive_as_its_documentation_does() -> None:
    p, _ = platform()
    assert p.fio_filename("//./PhysicalDrive1") == "\\\\.\\PhysicalDrive1"
    assert p.fio_filename("\\\\.\\PhysicalDrive12") == "\\\\.\\PhysicalDrive12"
    assert p.fio_filename("F:\\filename") == "F\\:\\filename"          # fio HOWTO, filename: each ':' escaped


# --------------------------------------------------------------------------- processes


def test_a_step_starts_detached_in_a_process_group_of_its_own(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def popen(argv: list[str], **kw: Any) -> object:
        seen.update(kw, argv=argv)
        return object()
    monkeypatch.setattr(subprocess, "Popen", popen)
    p, _ = platform()
    p.start_detached(["C:\\fio\\fio.exe", "--output=fio.json", "job.fio"], cwd=tmp_path, env={"PATH": "C:\\fio"})
    assert seen["argv"] == ["C:\\lab\\venv\\Scripts\\python.exe", "-m", "agents.platform.wrap",
                            "C:\\fio\\fio.exe", "--output=fio.json", "job.fio"]
    assert seen["creationflags"] == 0x00000200 | 0x00000008     # CREATE_NEW_PROCESS_GROUP | DETACHED_PROCESS
    assert seen["cwd"] == tmp_path and seen["close_fds"] is True and seen["env"] == {"PATH": "C:\\fio"}
    assert "start_new_session" not in seen
    assert all(seen[k] == subprocess.DEVNULL for k in ("stdin", "stdout", "stderr"))


def test_a_process_is_readopted_by_pid_and_start_time() -> None:
    p, host = platform()
    assert p.start_token(PID) == FILETIME
    assert p.alive(PID, FILETIME)
    assert not p.alive(PID, FILETIME + 1)            # the pid now belongs to another process
    assert not p.alive(PID + 1, FILETIME)            # gone (Get-Process printed nothing)
    assert not p.alive(PID, str(FILETIME)) and not p.alive(PID, True)
    calls = len(host.calls)
    assert p.start_token(-1) is None and p.start_token(True) is None and len(host.calls) == calls   # never asked


@pytest.mark.parametrize("answer", ["-5", "12abc", "9" * 25, "0", ""])
def test_an_implausible_start_time_is_no_process(answer: str) -> None:
    p, _ = platform(**{f"process_start__{PID}": answer})
    assert p.start_token(PID) is None


def test_terminate_and_kill_end_the_tree_only_while_it_is_that_process() -> None:
    p, host = platform()
    p.terminate(PID, FILETIME)
    p.kill(PID, FILETIME)
    p.kill(PID, FILETIME + 1)                         # reused pid: left alone
    kills = [c for c in host.calls if c[0] == "taskkill"]
    assert kills == [["taskkill", "/PID", str(PID), "/T"], ["taskkill", "/PID", str(PID), "/T", "/F"]]


def test_the_boot_id_is_the_last_boot_time() -> None:
    p, _ = platform()
    assert p.boot_id() == "2026-11-20T06:12:41.5000000Z"
    assert platform(os=(1, ""))[0].boot_id() == ""


def test_the_wrapper_records_the_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """agents.platform.wrap is what runs a step on Windows; it is portable, so it runs here for real."""
    monkeypatch.chdir(tmp_path)
    assert wrap_main(["sh", "-c", "echo out; echo err >&2; exit 3"]) == 3
    assert (tmp_path / "rc").read_text() == "3\n" and not (tmp_path / "rc.tmp").exists()
    assert (tmp_path / "fio.stdout").read_text() == "out\n" and (tmp_path / "fio.stderr").read_text() == "err\n"
    assert wrap_main([str(tmp_path / "no-such-fio")]) == 127
    assert "cannot start" in (tmp_path / "fio.stderr").read_text() and (tmp_path / "rc").read_text() == "127\n"
    assert os.listdir(tmp_path) and wrap_main([]) == 2


# --------------------------------------------------------------------------- health


def _dut(n: int, size: int = 3840755982336) -> DeclaredDut:
    return DeclaredDut(name=f"nvme{n}", path=f"//./PhysicalDrive{n}", kind="block", size_bytes=size)


def test_a_healthy_drive_passes_and_a_worn_one_fails() -> None:
    p, _ = platform()
    good = p.smart_check(_dut(1))
    assert good is not None and good.ok
    assert good.detail == "HealthStatus=Healthy uncorrected_errors=0 wear=1% temperature=38C"
    bad = p.smart_check(_dut(2))
    assert bad is not None and not bad.ok and "HealthStatus=Warning uncorrected_errors=12 wear=97%" in bad.detail


def test_health_without_reliability_counters_says_so() -> None:
    p, _ = platform(reliability__1=json.dumps({"DeviceId": "1", "HealthStatus": "Healthy"}))
    check = p.smart_check(_dut(1))
    assert check is not None and check.ok and "reliability counters unknown" in check.detail


@pytest.mark.parametrize("output", [(3, ""), '{"HealthStatus": "Fine"}', '{"HealthStatus": 0, "Wear": -1}'])
def test_unreadable_health_is_a_failed_check_with_the_reason(output: str | tuple[int, str]) -> None:
    p, _ = platform(reliability__1=output)
    check = p.smart_check(_dut(1))
    assert check is not None and not check.ok and check.detail


def test_present_and_serial_checks_read_the_drive_back() -> None:
    p, _ = platform()
    present, serial = p.device_checks(_dut(1))
    assert present.ok and present.detail == "3840755982336 bytes"
    assert serial.ok and serial.observed == "S64HNE0T812345"
    [moved] = p.device_checks(_dut(1, size=1 << 40))
    assert not moved.ok and "declared with 1099511627776" in moved.detail
    [gone] = p.device_checks(_dut(9))
    assert not gone.ok and "does not exist" in gone.detail
    assert p.smart_check(DeclaredDut(name="f", path="/srv/dut.img", kind="file", size_bytes=1)) is None
