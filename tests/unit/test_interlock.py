"""labcontract.interlock: the decision (pure), the parsers, and observation of regular files here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from labcontract import interlock as il

DEV = "/dev/disk/by-id/nvme-X_S1"
DUTS = [il.DeclaredDut("nvme0", DEV), il.DeclaredDut("scratch", "/dev/loop9", wipe_ok=True),
        il.DeclaredDut("ro", "/dev/loop8", allow=())]
EXT4 = il.Signature("ext4", "filesystem", "0x438")


def obs(path: str = DEV, **kw: object) -> il.ObservedState:
    return il.ObservedState(path=path, real_path=kw.pop("real_path", path), **kw)  # type: ignore[arg-type]


def codes(reasons: list[il.Reason]) -> list[str]:
    return [r.code for r in reasons]


def test_clean_declared_device_is_allowed() -> None:
    assert il.refusal_reasons(DEV, DUTS, obs()) == []
    assert il.refusal_reasons("nvme0", DUTS, obs()) == []       # by DUT name too
    il.check(DEV, DUTS, obs(), "op_mode")


def test_every_reason_is_listed() -> None:
    state = obs("/dev/sdz", mountpoints=("/srv",), swap=True, holders=("dm-0",), backs_root=True,
                signatures=(EXT4, il.Signature("gpt", "partition_table", "0x200")))
    reasons = il.refusal_reasons("/dev/sdz", DUTS, state)
    assert codes(reasons) == ["not_declared", "mounted", "swap", "held", "backs_root", "signature", "signature"]
    with pytest.raises(il.InterlockRefused) as err:
        il.check("/dev/sdz", DUTS, state)
    msg = str(err.value)
    assert msg.startswith("refusing purge on /dev/sdz: not a declared DUT of this host; mounted on /srv; ")
    assert "backs the root filesystem" in msg and "ext4 at offset 0x438" in msg and "partition table" in msg
    assert err.value.device == "/dev/sdz" and len(err.value.reasons) == 7


def test_wipe_ok_lifts_only_signatures() -> None:
    signed = obs("/dev/loop9", signatures=(EXT4, il.Signature("LVM2_member", "lvm")))
    assert il.refusal_reasons("/dev/loop9", DUTS, signed) == []
    in_use = obs("/dev/loop9", signatures=(EXT4,), mountpoints=("/mnt",), backs_root=True, holders=("md0",))
    assert codes(il.refusal_reasons("/dev/loop9", DUTS, in_use)) == ["mounted", "held", "backs_root"]
    # without wipe_ok the signature refuses
    assert codes(il.refusal_reasons(DEV, DUTS, obs(signatures=(EXT4,)))) == ["signature"]


def test_wipe_ok_never_lifts_not_declared_nor_allow() -> None:
    undeclared = [il.DeclaredDut("other", "/dev/loop1", wipe_ok=True)]
    assert codes(il.refusal_reasons("/dev/loop2", undeclared, obs("/dev/loop2"))) == ["not_declared"]
    reasons = il.refusal_reasons("/dev/loop8", DUTS, obs("/dev/loop8"), "purge")
    assert codes(reasons) == ["operation_not_allowed"] and "does not allow purge" in reasons[0].message


def test_missing_device() -> None:
    assert codes(il.refusal_reasons(DEV, DUTS, il.ObservedState(DEV, DEV, exists=False))) == ["missing"]


def test_declared_mapping_from_inventory_dicts() -> None:
    dut = il.DeclaredDut.from_mapping({"name": "d", "path": "/dev/loop3", "wipe_ok": "yes"})
    assert dut.wipe_ok is False            # only a real boolean true counts
    assert dut.allow == ()                 # an inventory DUT without allow allows nothing (docs/provisioning.md)
    assert il.DeclaredDut.from_mapping({"path": "/x", "allow": []}).allow == ()
    assert il.DeclaredDut.from_mapping({"path": "/x", "allow": None}).allow == ()
    assert il.DeclaredDut.from_mapping({"path": "/x", "allow": ["purge"]}).allow == ("purge",)
    reasons = il.refusal_reasons("/dev/loop3", [dut], obs("/dev/loop3"), "purge")
    assert codes(reasons) == ["operation_not_allowed"] and "(allow: nothing)" in reasons[0].message
    assert codes(il.refusal_reasons("/dev/loop3", [dut], obs("/dev/loop3"), "op_mode")) == ["operation_not_allowed"]


def test_parsers() -> None:
    wipefs = ('{"signatures": [{"device": "sdb", "offset": "0x200", "type": "gpt", "usage": "partition table"},'
              ' {"device": "sdb", "offset": "0x218", "type": "LVM2_member", "usage": "raid"},'
              ' {"device": "sdb", "offset": "0x1000", "type": "linux_raid_member", "usage": "raid"},'
              ' {"device": "sdb", "offset": "0x438", "type": "ext4", "usage": "filesystem"}]}')
    assert [s.kind for s in il.parse_wipefs_json(wipefs)] == ["partition_table", "lvm", "md", "filesystem"]
    assert il.parse_wipefs_json("") == []
    blkid = "DEVNAME=/dev/loop0\nUUID=d66a\nBLOCK_SIZE=1024\nTYPE=ext4\nUSAGE=filesystem\n"
    assert il.parse_blkid_export(blkid) == [il.Signature("ext4", "filesystem")]
    assert il.parse_blkid_export("DEVNAME=/dev/sdb\nPTUUID=x\nPTTYPE=dos\n") == [il.Signature("dos", "partition_table")]
    lsblk = ('{"blockdevices": [{"name": "sdb", "mountpoints": [null], "children": ['
             '{"name": "sdb1", "mountpoints": ["/boot", "/mnt/x"]}]}]}')
    assert il.parse_lsblk_json(lsblk) == (["/boot", "/mnt/x"], ["sdb", "sdb1"])
    mountinfo = ("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                 "90 27 7:3 / /mnt/with\\040space rw - ext4 /dev/loop3 rw\n")
    assert il.parse_mountinfo(mountinfo) == [("254:0", "/", "/dev/vda"), ("7:3", "/mnt/with space", "/dev/loop3")]
    swaps = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/sdc2  partition\t8388604\t0\t-2\n"
    assert il.parse_swaps(swaps) == ["/dev/sdc2"]


def test_observe_regular_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain.img"
    plain.write_bytes(os.urandom(4096) + bytes(1 << 20))
    state = il.observe(str(plain))
    assert state.exists and state.signatures == () and state.mountpoints == () and not state.backs_root
    assert il.observe(str(tmp_path / "absent")).exists is False


@pytest.mark.skipif(shutil.which("mkfs.ext4") is None, reason="needs mkfs.ext4")
def test_observe_finds_an_ext4_signature_in_a_file(tmp_path: Path) -> None:
    img = tmp_path / "fs.img"
    img.write_bytes(bytes(8 << 20))
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    state = il.observe(str(img))
    assert [(s.type, s.kind) for s in state.signatures] == [("ext4", "filesystem")]
    declared = [il.DeclaredDut("f", str(img))]
    assert codes(il.refusal_reasons(str(img), declared, state)) == ["signature"]


def test_observe_flags_the_root_device() -> None:
    root = [src for _num, point, src in il.parse_mountinfo(Path("/proc/self/mountinfo").read_text()) if point == "/"]
    if not root or not root[-1].startswith("/dev/") or not os.path.exists(root[-1]):
        pytest.skip("the root filesystem is not on a visible block device")
    state = il.observe(root[-1])          # read-only: mountinfo, sysfs, wipefs -n
    assert state.backs_root and "/" in state.mountpoints
    assert "backs_root" in codes(il.refusal_reasons(root[-1], [il.DeclaredDut("x", root[-1], wipe_ok=True)], state))


def fake_tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)


@pytest.mark.parametrize("script", ["echo 'wipefs: error: probing initialization failed: Permission denied' >&2; "
                                    "exit 1", "exit 139", "echo 'not json'"])
def test_a_failed_wipefs_probe_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    img = tmp_path / "dut.img"
    img.write_bytes(bytes(1 << 20))
    fake_tool(tmp_path / "bin", "wipefs", script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    state = il.observe(str(img))
    assert state.signatures == () and state.probe_error.startswith("wipefs ")
    declared = [il.DeclaredDut("f", str(img), wipe_ok=True)]        # wipe_ok never lifts a failed probe
    reasons = il.refusal_reasons(str(img), declared, state, "purge")
    assert codes(reasons) == ["probe_failed"]
    assert reasons[0].message.startswith("signature probe failed: wipefs ")
    with pytest.raises(il.InterlockRefused, match=r"refusing write on .*: signature probe failed: wipefs"):
        il.check_local(str(img), declared, "write")


def test_a_probe_that_cannot_run_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    img = tmp_path / "dut.img"
    img.write_bytes(bytes(1 << 20))
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))            # neither wipefs nor blkid
    state = il.observe(str(img))
    assert state.probe_error == "neither wipefs nor blkid is installed"
    assert codes(il.refusal_reasons(str(img), [il.DeclaredDut("f", str(img))], state)) == ["probe_failed"]
    fake_tool(tmp_path / "empty", "blkid", "exit 2")                 # blkid: 2 is "nothing found"
    assert il.observe(str(img)).probe_error == "" and il.observe(str(img)).signatures == ()
    fake_tool(tmp_path / "empty", "blkid", "echo 'blkid: cannot open' >&2; exit 4")
    assert il.observe(str(img)).probe_error == "blkid exited 4: blkid: cannot open"


def test_a_probe_error_survives_the_registration_round_trip() -> None:
    state = obs("/dev/loop3", probe_error="wipefs exited 1")
    assert il.observed_from_dict(il.observed_to_dict(state)) == state
    assert il.observed_from_dict({k: v for k, v in il.observed_to_dict(state).items()
                                  if k != "probe_error"}).probe_error == ""
