"""The safety interlock on a Windows agent (``Platform.observe_dut``: ``Get-Disk`` / ``Get-Partition`` read from
stored outputs in tests/fixtures/windows, representative and hand-written), the Linux platform's observation
being ``labcontract.interlock.observe`` unchanged, and the step kinds a Windows agent refuses to start
(``StepKind.platforms``)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agents import kinds
from agents.daemon import Agent, AgentConfig
from agents.kinds import Host, Interlock, interlock_refusal
from agents.platform import PLATFORM_METHODS
from agents.platform import windows as win
from agents.platform.linux import LinuxPlatform
from agents.runner import StepRunner
from labcontract import interlock
from labcontract.errors import StepError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import Event, StartStep, StepEnded

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "windows"
SIZE = 3840755982336
Answer = str | tuple[int, str] | Exception


def stored(name: str) -> str:
    return (FIXTURES / name).read_text()


class Disks:
    """Answers ``disk_state:N`` / ``partitions:N`` (the interlock's queries for drive N) from ``answers``; a
    query it has no answer for fails the test (``Get-Partition`` must not run on a disk with no partition)."""

    def __init__(self, **answers: Answer) -> None:
        self.answers = {k.replace("__", ":"): v for k, v in answers.items()}
        self.asked: list[str] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert tuple(argv[:-1]) == win.POWERSHELL
        for name in ("disk_state", "partitions"):
            head, _, tail = win.QUERIES[name].partition("@N@")
            m = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail), argv[-1])
            if m:
                key = f"{name}:{m.group(1)}"
                break
        else:
            raise AssertionError(f"unexpected command {argv[-1][:80]}")
        self.asked.append(key)
        answer = self.answers[key]
        if isinstance(answer, Exception):
            raise answer
        rc, out = answer if isinstance(answer, tuple) else (0, answer)
        return subprocess.CompletedProcess(list(argv), rc, out, "" if rc == 0 else "Get-Disk : access denied")


def observe(n: int, **answers: Answer) -> tuple[interlock.ObservedState, Disks]:
    disks = Disks(**answers)
    return win.WindowsPlatform(run=disks).observe_dut(f"//./PhysicalDrive{n}"), disks


def decide(obs: interlock.ObservedState, *, wipe_ok: bool = False, operation: str = "write") -> list[str]:
    declared = [interlock.DeclaredDut(name="nvme", path=obs.path, wipe_ok=wipe_ok)]
    return [r.code for r in interlock.refusal_reasons(obs.path, declared, obs, operation)]


GPT_OFFLINE = {"disk_state__2": stored("disk_state_2_gpt_offline.json"),
               "partitions__2": stored("partitions_2_offline.json")}
MOUNTED = {"disk_state__2": stored("disk_state_2_gpt_online.json"),
           "partitions__2": stored("partitions_2_mounted.json")}


def test_observe_dut_is_part_of_the_interface() -> None:
    assert "observe_dut" in PLATFORM_METHODS
    assert callable(win.WindowsPlatform().observe_dut) and callable(LinuxPlatform().observe_dut)


def test_a_raw_offline_disk_is_allowed_a_write() -> None:
    obs, disks = observe(1, disk_state__1=stored("disk_state_1_raw_offline.json"))
    assert obs == interlock.ObservedState(path="//./PhysicalDrive1", real_path="//./PhysicalDrive1")
    assert disks.asked == ["disk_state:1"], "no partition: Get-Partition (an error there) is not run"
    assert decide(obs) == [] and decide(obs, operation="purge") == []


def test_a_partition_table_is_refused_unless_wipe_ok() -> None:
    obs, _ = observe(2, **GPT_OFFLINE)
    assert obs.signatures == (interlock.Signature(type="gpt", kind="partition_table"),)
    assert obs.mountpoints == () and not obs.backs_root and obs.probe_error == ""
    assert decide(obs) == [interlock.SIGNATURE]
    assert decide(obs, wipe_ok=True) == []
    mbr = stored("disk_state_2_gpt_offline.json").replace('"GPT"', "1")      # PowerShell 5.1's enum, an int
    assert observe(2, disk_state__2=mbr, partitions__2=stored("partitions_2_offline.json"))[0].signatures == (
        interlock.Signature(type="dos", kind="partition_table"),)


def test_a_mounted_volume_is_refused_even_with_wipe_ok() -> None:
    obs, _ = observe(2, **MOUNTED)
    assert obs.mountpoints == ("partition 1 (online volume)", "D:\\", "C:\\lab\\scratch\\")
    assert decide(obs, wipe_ok=True) == [interlock.MOUNTED]
    assert decide(obs) == [interlock.MOUNTED, interlock.SIGNATURE]
    message = interlock.refusal_message(obs.path, "write", interlock.refusal_reasons(
        obs.path, [interlock.DeclaredDut("nvme", obs.path, wipe_ok=True)], obs, "write"))
    assert message == ("refusing write on //./PhysicalDrive2: mounted on partition 1 (online volume), D:\\, "
                       "C:\\lab\\scratch\\")


def test_an_online_disk_with_partitions_is_in_use_without_a_drive_letter() -> None:
    obs, _ = observe(2, disk_state__2=stored("disk_state_2_gpt_online.json"),
                     partitions__2=stored("partitions_2_offline.json"))
    assert obs.mountpoints == ("partition 1 (online volume)", "partition 2 (online volume)")
    assert decide(obs, wipe_ok=True) == [interlock.MOUNTED]


def test_the_boot_and_system_disk_is_refused() -> None:
    obs, _ = observe(0, disk_state__0=stored("disk_state_0_boot.json"),
                     partitions__0=stored("partitions_0_boot.json"))
    assert obs.backs_root and "C:\\" in obs.mountpoints
    assert all("Volume{" not in m for m in obs.mountpoints), "a volume's GUID name is no mount point"
    assert interlock.BACKS_ROOT in decide(obs, wipe_ok=True)
    # a system partition alone (the disk's own flags cleared) is enough
    plain = stored("disk_state_0_boot.json").replace("true", "false")
    obs, _ = observe(0, disk_state__0=plain, partitions__0=stored("partitions_0_boot.json"))
    assert obs.backs_root


def test_a_missing_disk() -> None:
    obs, disks = observe(7, disk_state__7=stored("disk_state_missing.json"))
    assert not obs.exists and disks.asked == ["disk_state:7"]
    assert decide(obs) == [interlock.MISSING]


RAW = stored("disk_state_1_raw_offline.json")


@pytest.mark.parametrize(("answers", "reason"), [
    ({"disk_state__1": (1, "")}, "exit code 1: Get-Disk : access denied"),
    ({"disk_state__1": "Get-Disk : The term is not recognized"}, "not JSON"),
    ({"disk_state__1": " " * (win.MAX_OUTPUT_BYTES + 1)}, "characters of output (at most"),
    ({"disk_state__1": "[" + RAW.strip()[1:-1] + "," + RAW.strip()[1:-1] + "]"}, "2 disks numbered 1"),
    ({"disk_state__1": '"RAW"'}, "expected a JSON object or a list of objects"),
    ({"disk_state__1": RAW.replace('"IsOffline":true', '"IsOffline":"yes"')}, "disk.IsOffline: expected true or false"),
    ({"disk_state__1": RAW.replace('"IsOffline":true,', "")}, "disk.IsOffline: missing"),
    ({"disk_state__1": RAW.replace('"RAW"', '"Hybrid"')}, "disk.PartitionStyle: unknown value 'Hybrid'"),
    ({"disk_state__1": RAW.replace('"NumberOfPartitions":0', '"NumberOfPartitions":-1')}, "out of range"),
    ({"disk_state__1": RAW.replace('"NumberOfPartitions":0,', "")}, "disk.NumberOfPartitions: missing"),
    ({"disk_state__1": RAW.replace('"Number":1', '"Number":3')}, "disk.Number: not disk 1"),
    ({"disk_state__1": RAW.replace('"IsBoot":false', '"IsBoot":0')}, "disk.IsBoot: expected true or false"),
    ({"disk_state__1": TimeoutError("20 s")}, "cannot run"),
    ({"disk_state__1": subprocess.TimeoutExpired("powershell.exe", 20)}, "cannot run"),
])
def test_bad_disk_output_is_a_probe_failure(answers: dict[str, Answer], reason: str) -> None:
    obs, _ = observe(1, **answers)
    assert obs.exists and reason in obs.probe_error, obs.probe_error
    assert len(obs.probe_error) <= 500
    assert interlock.PROBE_FAILED in decide(obs, wipe_ok=True)
    assert "signature probe failed: powershell" in interlock.refusal_message(
        obs.path, "write", interlock.refusal_reasons(obs.path, [], obs, "write"))


PARTS = stored("partitions_2_mounted.json")


@pytest.mark.parametrize(("partitions", "reason"), [
    ((1, ""), "exit code 1"),
    ("[]", "Get-Disk counts 3 partition(s), Get-Partition lists none"),
    (PARTS.replace('"DriveLetter":"D"', '"DriveLetter":"DD"'), "partition[1].DriveLetter: not a drive letter"),
    (PARTS.replace('"DriveLetter":"D"', '"DriveLetter":4'), "partition[1].DriveLetter: expected a string"),
    (PARTS.replace('"D:\\\\"', '"D:\\\\\\u0007x"'), "partition[1].AccessPaths[0]: holds control characters"),
    (PARTS.replace('"AccessPaths":null', '"AccessPaths":{"a":1}'), "partition[0].AccessPaths: expected at most"),
    (PARTS.replace('"AccessPaths":null', '"AccessPaths":["' + "x" * 2000 + '"]'), "a string of 2000 characters"),
    (PARTS.replace('"PartitionNumber":1', '"PartitionNumber":true'), "partition[0].PartitionNumber: expected an"),
    (PARTS.replace('"IsSystem":false}]', '"IsSystem":"no"}]'), "partition[2].IsSystem: expected true or false"),
    ("[" + ",".join(['{"PartitionNumber":1}'] * (win.MAX_ITEMS + 1)) + "]", "1025 objects (at most 1024)"),
])
def test_bad_partition_output_is_a_probe_failure(partitions: Answer, reason: str) -> None:
    obs, _ = observe(2, disk_state__2=stored("disk_state_2_gpt_online.json"), partitions__2=partitions)
    assert reason in obs.probe_error, obs.probe_error
    assert obs.mountpoints == () and obs.signatures == (), "refused whole, never half-used"
    assert interlock.PROBE_FAILED in decide(obs, wipe_ok=True)


def test_a_path_that_is_no_drive_is_a_probe_failure() -> None:
    obs = win.WindowsPlatform(run=Disks()).observe_dut("C:/lab/dut.img")
    assert "only whole disks are DUTs on Windows" in obs.probe_error
    assert interlock.PROBE_FAILED in decide(obs, wipe_ok=True)


def test_linux_observe_dut_is_the_interlocks_observe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    img = tmp_path / "dut.img"
    img.write_bytes(b"\0" * 65536)
    linux = LinuxPlatform()
    assert linux.observe_dut(str(img)) == interlock.observe(str(img))
    assert not linux.observe_dut(str(tmp_path / "absent")).exists
    seen: list[str] = []
    monkeypatch.setattr(interlock, "observe", lambda p: seen.append(p) or interlock.ObservedState(p, p))
    linux.observe_dut("/dev/x")
    assert seen == ["/dev/x"]


# --- the agent's call sites reach its platform ----------------------------------------------------------

def drive(n: int, name: str = "nvme2") -> DeclaredDut:
    return DeclaredDut(name=name, path=f"//./PhysicalDrive{n}", kind="block", size_bytes=SIZE, wipe_ok=False)


def test_the_start_interlock_and_the_registration_observe_through_the_platform(tmp_path: Path) -> None:
    platform = win.WindowsPlatform(run=Disks(**GPT_OFFLINE, disk_state__1=RAW))
    host = Host(name="w1", state_dir=tmp_path, duts=(drive(2), drive(1, "nvme1")), platform=platform)
    refused = interlock_refusal(Interlock("write", (drive(2),)), host)
    assert refused == ("refusing write on //./PhysicalDrive2: carries a partition table signature (gpt)")
    assert interlock_refusal(Interlock("write", (drive(1, "nvme1"),)), host) is None
    state = tmp_path / "state"
    a = Agent(AgentConfig(host="w1", broker_url="redis://unused", state_dir=state, duts=(drive(2),)),
              HostFacts(hostname="w1", os_family="windows"), StepRunner(state, platform=platform), lambda e: None)
    assert a.observe(drive(2)).signatures == (interlock.Signature(type="gpt", kind="partition_table"),)


# --- step kinds per platform -----------------------------------------------------------------------------

def test_each_kind_names_its_platforms() -> None:
    assert kinds.get("fio").platforms == frozenset({"linux", "windows"})
    for action in ("purge", "net", "app"):
        assert kinds.get(action).platforms == frozenset({"linux"})
        assert kinds.platform_refusal(kinds.get(action), "linux") is None
    assert kinds.platform_refusal(kinds.get("app"), "windows") == (
        "step kind app runs on Linux agents only (docs/windows.md)")
    assert kinds.platform_refusal(kinds.get("fio"), "windows") is None


def purge_start(dut: str) -> dict[str, Any]:
    return {"v": StartStep.model_fields["v"].default, "run_id": "r1", "step_id": "r1-s000", "attempt_id": "r1-s000-a1",
            "host": "w1", "action": "purge", "kind": "purge", "devices": [dut], "job_name": "purge.op0",
            "timeout_s": 60, "dispatched_at": time.time()}


def test_a_windows_agent_refuses_a_linux_only_kind_as_a_failed_start(tmp_path: Path) -> None:
    disks = Disks()                                     # no host command is run: refused before any probe
    platform = win.WindowsPlatform(run=disks)
    state = tmp_path / "state"
    sent: list[Event] = []
    a = Agent(AgentConfig(host="w1", broker_url="redis://unused", state_dir=state, duts=(drive(2),)),
              HostFacts(hostname="w1", os_family="windows"), StepRunner(state, platform=platform), sent.append)
    a.start_step(purge_start("//./PhysicalDrive2"))
    assert [(e.outcome, e.reason) for e in sent if isinstance(e, StepEnded)] == [
        ("refused", "step kind purge runs on Linux agents only (docs/windows.md)")]
    assert disks.asked == [] and list((state / "attempts").iterdir()) == []
    with pytest.raises(StepError, match="step kind purge runs on Linux agents only"):   # the runner, directly
        a.runner.start(StartStep.model_validate(purge_start("//./PhysicalDrive2")), duts=[drive(2)])
    assert list((state / "attempts").iterdir()) == []
