"""playbooks/module_utils/lab_dut_tools.py: parsers against captured tool outputs (tests/fixtures/dut)
and the purge / OP-mode planners."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "dut"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lab_dut_tools", ROOT / "playbooks/module_utils/lab_dut_tools.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["lab_dut_tools"] = module
    spec.loader.exec_module(module)
    return module


t = _load()


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_nvme_id_ctrl() -> None:
    c = t.parse_nvme_id_ctrl(fixture("nvme_id_ctrl.json"))
    assert (c["model"], c["serial"], c["firmware"]) == ("SAMSUNG MZWLJ3T8HBLS-00007", "S4YPNE0N800123", "EPK9GB5Q")
    assert c["tnvmcap"] == 3840755982336 and c["cntlid"] == 65
    assert c["format_supported"] and c["ns_management"] and c["crypto_erase"]
    assert c["sanitize_crypto"] and c["sanitize_block"] and not c["sanitize_overwrite"]


def test_nvme_id_ns() -> None:
    ns = t.parse_nvme_id_ns(fixture("nvme_id_ns.json"))
    assert ns["nsze"] == 7501476528 and ns["block_size"] == 512 and ns["lbaf"] == 0
    assert ns["size_bytes"] == 3840755982336
    assert t.parse_nvme_id_ns(fixture("nvme_id_ns_hp20.json"))["size_bytes"] == 6001181222 * 512


def test_nvme_smart_log() -> None:
    s = t.parse_nvme_smart_log(fixture("nvme_smart_log.json"))
    assert s["temperature_c"] == 36 and s["percent_used"] == 3 and s["available_spare_pct"] == 100
    assert s["power_on_hours"] == 14672 and s["media_errors"] == 0 and s["healthy"]
    assert s["bytes_written"] == 987123456 * 512000


def test_nvme_small_outputs() -> None:
    assert t.parse_nvme_create_ns("create-ns: Success, created nsid:1\n") == 1
    log = '{"Sanitize Progress Log": {"sprog": 32768, "sstat": 2, "scdw10": 2}}'
    assert t.parse_nvme_sanitize_log(log) == {"progress": 32768, "status": 2, "running": True}
    with pytest.raises(t.ParseError):
        t.parse_nvme_create_ns("NVMe status: INVALID_FIELD")
    with pytest.raises(t.ParseError):
        t.parse_nvme_id_ns("{}")


def test_hdparm_identify() -> None:
    h = t.parse_hdparm_identify(fixture("hdparm_I.txt"))
    assert h["model"] == "SAMSUNG MZ7LH960HAJR-00005" and h["serial"] == "S45NNE0M312345"
    assert h["firmware"] == "HXT7404Q" and h["lba48_sectors"] == 1875385008 and h["logical_sector_size"] == 512
    assert h["trim"] and h["security_supported"] and h["enhanced_erase"] and h["erase_minutes"] == 2
    assert not (h["security_enabled"] or h["security_locked"] or h["security_frozen"])
    frozen = t.parse_hdparm_identify(fixture("hdparm_I_frozen.txt"))
    assert frozen["security_frozen"] and t.choose_purge("ata", frozen) == "blkdiscard"
    assert "frozen" in t.purge_supported("ata_secure_erase", "ata", frozen)


def test_hdparm_max_sectors() -> None:
    assert t.parse_hdparm_max_sectors(fixture("hdparm_N.txt")) == {
        "current": 1875385008, "native": 1875385008, "hpa_enabled": False}
    assert t.parse_hdparm_max_sectors(fixture("hdparm_N_hp20.txt"))["hpa_enabled"]
    with pytest.raises(t.ParseError):
        t.parse_hdparm_max_sectors("/dev/sdb:\n SG_IO: bad/missing sense data")


def test_sg_outputs() -> None:
    rc = t.parse_sg_readcap(fixture("sg_readcap_long.txt"))
    assert rc == {"blocks": 1562824368, "block_size": 512, "size_bytes": 800166076416}
    inq = t.parse_sg_inq(fixture("sg_inq.txt"))
    assert inq == {"vendor": "HGST", "model": "HUSMR3280ASS200", "firmware": "K2A0", "serial": "0TJ1ABCD"}


def test_op_mode_and_scaling() -> None:
    assert t.parse_op_mode("stock") == 0 and t.parse_op_mode("hp:28") == 28
    for bad in ("hp:0", "hp:95", "hp20", "HP:20", "stock "):
        with pytest.raises(ValueError):
            t.parse_op_mode(bad)
    assert t.scaled(7501476528, 20) == 6001181222
    assert t.scaled(8 << 20, 20, t.MIB) == 6 << 20


def test_purge_choice_and_plans() -> None:
    ctrl = t.parse_nvme_id_ctrl(fixture("nvme_id_ctrl.json"))
    assert t.choose_purge("nvme", ctrl) == "nvme_format"
    assert t.choose_purge("nvme", {**ctrl, "format_supported": False}) == "nvme_sanitize"
    assert t.choose_purge("nvme", {}) == "blkdiscard" and t.choose_purge("file", {}) == "punch_hole"
    assert t.purge_plan("nvme_sanitize", device="/dev/nvme0n1", ctrl="/dev/nvme0") == [
        ["nvme", "sanitize", "/dev/nvme0", "--sanact=2"]]
    assert t.purge_plan("punch_hole", device="/x.img", size=4096) == [
        ["fallocate", "--punch-hole", "--offset", "0", "--length", "4096", "/x.img"]]
    assert t.purge_supported("nvme_format", "ata", {}) is not None
    assert t.purge_supported("blkdiscard", "file", {}) is not None


def test_op_method_choice_and_nvme_plan() -> None:
    ctrl = t.parse_nvme_id_ctrl(fixture("nvme_id_ctrl.json"))
    assert t.choose_op_method("nvme", ctrl) == "nvme_ns"
    assert t.choose_op_method("nvme", {**ctrl, "ns_management": False}) == "footprint"
    # QEMU 7.2's controller: OACS bit 3 set, TNVMCAP 0 (found on the VM lab): no namespace size to compute
    assert t.choose_op_method("nvme", {**ctrl, "tnvmcap": 0}) == "footprint"
    assert t.choose_op_method("ata", {"hpa": {"current": 1, "native": 1}}) == "ata_hpa"
    assert t.choose_op_method("scsi", {}) == "scsi_resize" and t.choose_op_method("virtual", {}) == "footprint"
    plan = t.nvme_ns_plan("/dev/nvme0", 1, 65, 0, 6001181222)
    assert [argv[1] for argv in plan] == ["detach-ns", "delete-ns", "create-ns", "attach-ns", "ns-rescan"]


def test_smartctl_json() -> None:
    doc = ('{"smart_status": {"passed": true}, "temperature": {"current": 31}, "power_on_time": {"hours": 20011},'
           ' "ata_smart_attributes": {"table": [{"id": 177, "name": "Wear_Leveling_Count", "value": 97}]}}')
    s = t.parse_smartctl_json(doc)
    assert s["healthy"] is True and s["temperature_c"] == 31 and s["power_on_hours"] == 20011
    assert s["wear"] == {"attribute": "Wear_Leveling_Count", "normalized": 97}
