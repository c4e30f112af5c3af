"""The Linux platform layer: the interface is complete, it is the one the agent picks here, its detached
start and re-adoption work on real processes, and the old entry points (agents.facts, agents.health,
agents.runner) go through it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import get_args

import pytest

from agents import facts, health
from agents.platform import PLATFORM_METHODS, Platform, current, for_name, platform_name
from agents.platform.linux import LinuxPlatform
from agents.platform.windows import WindowsPlatform
from labcontract.suite import IoEngine


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_a_runner_uses_the_platform_it_is_given(tmp_path: Path) -> None:
    from agents.runner import StepRunner

    assert StepRunner(tmp_path).platform is current()
    assert isinstance(StepRunner(tmp_path, platform=for_name("windows")).platform, WindowsPlatform)


def test_the_linux_platform_implements_every_method_of_the_interface() -> None:
    p = LinuxPlatform()
    assert isinstance(p, Platform)
    for method in PLATFORM_METHODS:
        assert callable(getattr(p, method)), method
        assert callable(getattr(WindowsPlatform, method)), method
    assert [m for m in vars(Platform) if not m.startswith("_") and callable(vars(Platform)[m])] \
        == list(PLATFORM_METHODS), "PLATFORM_METHODS lists the interface in order"
    assert p.name == "linux" and p.default_ioengine == "libaio"
    assert p.ioengines == frozenset(get_args(IoEngine)) - {"windowsaio"}, "the suite's engines but Windows' are Linux's"


def test_the_platform_is_chosen_by_sys_platform() -> None:
    assert platform_name("linux") == "linux" and platform_name("win32") == "windows"
    with pytest.raises(ValueError, match="not on 'darwin'"):
        platform_name("darwin")
    assert isinstance(current(), LinuxPlatform) and current() is current()
    assert isinstance(for_name("windows"), WindowsPlatform)
    with pytest.raises(ValueError):
        for_name("plan9")


def test_facts_carry_the_os_family(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    got = facts.collect_host_facts(hostname="h", sys_root=str(tmp_path), lspci=None, fio_binary="/nonexistent")
    assert (got.os, got.os_family) == ("Debian GNU/Linux 12 (bookworm)", "linux")
    assert LinuxPlatform(sys_root=str(tmp_path), lspci=None).host_facts(hostname="h",
                                                                        fio_binary="/nonexistent") == got


def test_fio_escapes_a_colon_in_a_path() -> None:
    escaped = "/dev/disk/by-path/pci-0000\\:06\\:00.0"
    assert LinuxPlatform().fio_filename("/dev/disk/by-path/pci-0000:06:00.0") == escaped


def test_a_detached_step_records_its_exit_code_and_is_readopted(tmp_path: Path) -> None:
    p = LinuxPlatform()
    proc = p.start_detached(["sh", "-c", "echo hello; exit 4"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert proc.wait(10) == 0
    assert (tmp_path / "rc").read_text() == "4\n" and (tmp_path / "fio.stdout").read_text() == "hello\n"

    sleeper = p.start_detached(["sleep", "60"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    try:
        token = p.start_token(sleeper.pid)
        assert token is not None and p.alive(sleeper.pid, token)
        assert not p.alive(sleeper.pid, token + 1) and not p.alive(sleeper.pid, None)
        p.terminate(sleeper.pid, token)
        assert wait_for(lambda: sleeper.poll() is not None)
        assert wait_for(lambda: not p.alive(sleeper.pid, token))
    finally:
        if sleeper.poll() is None:
            p.kill(sleeper.pid, None)
            sleeper.wait(10)
    p.kill(sleeper.pid, token)                 # gone: nothing to do, no error
    assert p.boot_id() and p.start_token(2 ** 22 + 12345) is None


def test_smart_goes_through_the_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    from labcontract.facts import DeclaredDut

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/sbin/smartctl" if name == "smartctl" else None)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    dut = DeclaredDut(name="d", path="/dev/sdb", kind="block", size_bytes=1)
    seen: list[list[str]] = []

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        seen.append(list(argv))
        return subprocess.CompletedProcess([], 0, '{"smart_status": {"passed": true}}', "")
    check = health.smart_check(dut, run)
    assert check is not None and check.ok and seen == [["smartctl", "-H", "-j", "/dev/sdb"]]
    assert LinuxPlatform(run=run).smart_check(dut) == check
