"""The agent's present check: a DUT is there, with the size it was declared with."""

from __future__ import annotations

from pathlib import Path

from agents.health import device_checks
from labcontract.facts import DeclaredDut


def _dut(path: Path, size: int) -> DeclaredDut:
    return DeclaredDut(name="dut0", path=str(path), kind="file", size_bytes=size)


def test_a_dut_of_its_declared_size_is_present(tmp_path: Path) -> None:
    f = tmp_path / "dut.img"
    f.write_bytes(b"\0" * 8192)
    [check] = device_checks(_dut(f, 8192))
    assert check.ok and check.check == "present" and check.detail == "8192 bytes"


def test_another_size_on_the_path_is_not_the_dut(tmp_path: Path) -> None:
    f = tmp_path / "dut.img"
    f.write_bytes(b"\0" * 4096)
    [check] = device_checks(_dut(f, 8192))
    assert not check.ok
    assert check.detail == f"{f} has size 4096 bytes; declared with 8192 (another device on its path?)"


def test_a_missing_dut_fails_with_the_reason(tmp_path: Path) -> None:
    [check] = device_checks(_dut(tmp_path / "gone.img", 8192))
    assert not check.ok and "gone.img" in check.detail
