"""Parsers and planners for the DUT tools (nvme-cli, hdparm, sg3_utils, blockdev, smartctl).

Standard library only: shipped to the lab host inside the ``lab_dut`` module
(``from ansible.module_utils.lab_dut_tools import ...``) and unit-tested against captured
outputs in ``tests/fixtures/dut/``. Nothing here runs a command: the module does.
"""

from __future__ import annotations

import json
import re
from typing import Any

MIB = 1024 * 1024


class ParseError(ValueError):
    """A tool printed something we cannot read."""


# ---------------------------------------------------------------- nvme-cli (-o json)


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ParseError(f"{what}: not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ParseError(f"{what}: expected a JSON object")
    return doc


def _str(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    return str(value).strip() if value is not None else None


def parse_nvme_id_ctrl(text: str) -> dict[str, Any]:
    """``nvme id-ctrl DEV -o json``: identity and the capabilities we act on."""
    doc = _json(text, "nvme id-ctrl")
    oacs, fna, sanicap = int(doc.get("oacs", 0)), int(doc.get("fna", 0)), int(doc.get("sanicap", 0))
    return {
        "model": _str(doc, "mn"), "serial": _str(doc, "sn"), "firmware": _str(doc, "fr"),
        "cntlid": int(doc.get("cntlid", 0)), "tnvmcap": int(doc.get("tnvmcap", 0)),
        "unvmcap": int(doc.get("unvmcap", 0)), "nn": int(doc.get("nn", 1)),
        "format_supported": bool(oacs & 0x2), "ns_management": bool(oacs & 0x8),
        "crypto_erase": bool(fna & 0x4),
        "sanitize_crypto": bool(sanicap & 0x1), "sanitize_block": bool(sanicap & 0x2),
        "sanitize_overwrite": bool(sanicap & 0x4),
    }


def parse_nvme_id_ns(text: str) -> dict[str, Any]:
    """``nvme id-ns DEV -o json``: size in blocks, the current LBA format and block size."""
    doc = _json(text, "nvme id-ns")
    try:
        nsze, flbas, lbafs = int(doc["nsze"]), int(doc["flbas"]), doc["lbafs"]
        fmt = flbas & 0xF
        block = 2 ** int(lbafs[fmt]["ds"])
    except (KeyError, IndexError, TypeError) as e:
        raise ParseError(f"nvme id-ns: missing {e}") from e
    return {"nsze": nsze, "ncap": int(doc.get("ncap", nsze)), "nuse": int(doc.get("nuse", 0)),
            "flbas": flbas, "lbaf": fmt, "block_size": block, "size_bytes": nsze * block}


def parse_nvme_smart_log(text: str) -> dict[str, Any]:
    """``nvme smart-log DEV -o json``: health and wear (temperature in Celsius)."""
    doc = _json(text, "nvme smart-log")
    kelvin = doc.get("temperature")
    used = doc.get("percent_used", doc.get("percentage_used"))
    return {
        "critical_warning": int(doc.get("critical_warning", 0)),
        "temperature_c": int(kelvin) - 273 if kelvin is not None else None,
        "available_spare_pct": doc.get("avail_spare"),
        "percent_used": int(used) if used is not None else None,
        "data_units_read": doc.get("data_units_read"),
        "data_units_written": doc.get("data_units_written"),
        "bytes_written": int(doc["data_units_written"]) * 512000 if "data_units_written" in doc else None,
        "power_on_hours": doc.get("power_on_hours"),
        "power_cycles": doc.get("power_cycles"),
        "unsafe_shutdowns": doc.get("unsafe_shutdowns"),
        "media_errors": doc.get("media_errors"),
        "num_err_log_entries": doc.get("num_err_log_entries"),
        "healthy": int(doc.get("critical_warning", 0)) == 0 and int(doc.get("media_errors", 0)) == 0,
    }


def parse_nvme_create_ns(text: str) -> int:
    """``nvme create-ns`` prints ``create-ns: Success, created nsid:1``."""
    m = re.search(r"created nsid:\s*(\d+)", text)
    if not m:
        raise ParseError(f"nvme create-ns: no nsid in {text.strip()!r}")
    return int(m.group(1))


def parse_nvme_sanitize_log(text: str) -> dict[str, Any]:
    """``nvme sanitize-log DEV -o json``: progress (0..65535) and whether a sanitize is running."""
    doc = _json(text, "nvme sanitize-log")
    entry = next(iter(doc.values())) if len(doc) == 1 and isinstance(next(iter(doc.values())), dict) else doc
    sprog, sstat = int(entry.get("sprog", 65535)), int(entry.get("sstat", 0))
    return {"progress": sprog, "status": sstat & 0x7, "running": (sstat & 0x7) == 2}


# ---------------------------------------------------------------- hdparm


def parse_hdparm_identify(text: str) -> dict[str, Any]:
    """``hdparm -I DEV``: identity, sector sizes, TRIM and the ATA security state."""
    def field(label: str) -> str | None:
        m = re.search(rf"^\s*{label}:\s*(.+?)\s*$", text, re.M)
        return m.group(1) if m else None

    sec = re.split(r"\n(?=\S)", text.split("Security:", 1)[1], maxsplit=1)[0] if "Security:" in text else ""
    lines = [ln.strip() for ln in sec.splitlines()]
    sectors = re.search(r"LBA48\s+user addressable sectors:\s*(\d+)", text)
    logical = re.search(r"Logical\s+Sector size:\s*(\d+)", text)
    erase = re.search(r"(\d+)min for SECURITY ERASE UNIT", sec)
    return {
        "model": field("Model Number"), "serial": field("Serial Number"), "firmware": field("Firmware Revision"),
        "lba48_sectors": int(sectors.group(1)) if sectors else None,
        "logical_sector_size": int(logical.group(1)) if logical else 512,
        "trim": "Data Set Management TRIM supported" in text,
        "security_supported": "supported" in lines,
        "security_enabled": "enabled" in lines,
        "security_locked": "locked" in lines,
        "security_frozen": "frozen" in lines,
        "enhanced_erase": "supported: enhanced erase" in lines,
        "erase_minutes": int(erase.group(1)) if erase else None,
    }


def parse_hdparm_max_sectors(text: str) -> dict[str, Any]:
    """``hdparm -N DEV``: `` max sectors   = 937703088/937703088, HPA is disabled``."""
    m = re.search(r"max sectors\s*=\s*(\d+)/(\d+),\s*HPA is (enabled|disabled)", text)
    if not m:
        raise ParseError(f"hdparm -N: no 'max sectors' line in {text.strip()!r}")
    return {"current": int(m.group(1)), "native": int(m.group(2)), "hpa_enabled": m.group(3) == "enabled"}


# ---------------------------------------------------------------- sg3_utils


def parse_sg_readcap(text: str) -> dict[str, Any]:
    """``sg_readcap --long DEV``: number of logical blocks and their length."""
    blocks = re.search(r"Number of logical blocks=(\d+)", text)
    length = re.search(r"Logical block length=(\d+) bytes", text)
    if not blocks or not length:
        raise ParseError("sg_readcap: no 'Number of logical blocks' / 'Logical block length'")
    n, bs = int(blocks.group(1)), int(length.group(1))
    return {"blocks": n, "block_size": bs, "size_bytes": n * bs}


def parse_sg_inq(text: str) -> dict[str, Any]:
    """``sg_inq DEV``: vendor, product, revision and (when reported) the unit serial number."""
    def field(label: str) -> str | None:
        m = re.search(rf"^\s*{label}:\s*(.*?)\s*$", text, re.M)
        return m.group(1) if m else None

    return {"vendor": field("Vendor identification"), "model": field("Product identification"),
            "firmware": field("Product revision level"), "serial": field("Unit serial number")}


# ---------------------------------------------------------------- smartctl / blockdev


def parse_smartctl_json(text: str) -> dict[str, Any]:
    """``smartctl -j -H -A DEV``: overall health, temperature, power-on hours and wear when known."""
    doc = _json(text, "smartctl")
    attrs = {a.get("id"): a for a in doc.get("ata_smart_attributes", {}).get("table", [])}
    wear = None
    for attr_id in (233, 177, 231, 202):   # media wearout / wear leveling / life left, vendor-dependent
        if attr_id in attrs:
            wear = {"attribute": attrs[attr_id].get("name"), "normalized": attrs[attr_id].get("value")}
            break
    scsi_used = doc.get("scsi_percentage_used_endurance_indicator")
    return {"healthy": doc.get("smart_status", {}).get("passed"),
            "temperature_c": doc.get("temperature", {}).get("current"),
            "power_on_hours": doc.get("power_on_time", {}).get("hours"),
            "wear": wear, "percent_used": scsi_used}


def parse_size_bytes(text: str) -> int:
    """``blockdev --getsize64 DEV``."""
    try:
        return int(text.strip())
    except ValueError as e:
        raise ParseError(f"blockdev --getsize64: {text.strip()!r}") from e


# ---------------------------------------------------------------- planning (pure)


def parse_op_mode(mode: str) -> int:
    """``stock`` -> 0, ``hp:<percent>`` -> percent (1..90)."""
    if mode == "stock":
        return 0
    m = re.fullmatch(r"hp:(\d{1,2})", mode)
    if not m or not 1 <= int(m.group(1)) <= 90:
        raise ValueError(f"op_mode {mode!r}: expected 'stock' or 'hp:<percent>' with 1..90")
    return int(m.group(1))


def scaled(total: int, percent: int, align: int = 1) -> int:
    """``total`` less ``percent`` %, rounded down to a multiple of ``align``."""
    return (total * (100 - percent) // 100) // align * align


def nvme_ns_plan(ctrl: str, nsid: int, cntlid: int, flbas: int, nsze: int) -> list[list[str]]:
    """Commands that re-create namespace ``nsid`` with ``nsze`` blocks (data is lost)."""
    ids = [f"--namespace-id={nsid}", f"--controllers={cntlid}"]
    return [["nvme", "detach-ns", ctrl, *ids],
            ["nvme", "delete-ns", ctrl, f"--namespace-id={nsid}"],
            ["nvme", "create-ns", ctrl, f"--nsze={nsze}", f"--ncap={nsze}", f"--flbas={flbas}"],
            ["nvme", "attach-ns", ctrl, *ids],
            ["nvme", "ns-rescan", ctrl]]


def purge_plan(method: str, *, device: str, ctrl: str = "", nsid: int = 1, lbaf: int = 0,
               size: int = 0, enhanced: bool = False, password: str = "storagelab") -> list[list[str]]:
    """The commands of a purge ``method`` (already resolved from ``auto``)."""
    if method == "nvme_format":
        return [["nvme", "format", ctrl, f"--namespace-id={nsid}", f"--lbaf={lbaf}", "--ses=1", "--force"]]
    if method == "nvme_sanitize":
        return [["nvme", "sanitize", ctrl, "--sanact=2"]]
    if method == "ata_secure_erase":
        erase = "--security-erase-enhanced" if enhanced else "--security-erase"
        return [["hdparm", "--user-master", "u", "--security-set-pass", password, device],
                ["hdparm", "--user-master", "u", erase, password, device]]
    if method == "blkdiscard":
        return [["blkdiscard", device]]
    if method == "punch_hole":
        return [["fallocate", "--punch-hole", "--offset", "0", "--length", str(size), device]]
    raise ValueError(f"unknown purge method {method!r}")


def choose_purge(interface: str, caps: dict[str, Any]) -> str:
    """The best purge the device supports (``auto``)."""
    if interface == "file":
        return "punch_hole"
    if interface == "nvme" and caps.get("format_supported"):
        return "nvme_format"
    if interface == "nvme" and (caps.get("sanitize_block") or caps.get("sanitize_crypto")):
        return "nvme_sanitize"
    if interface == "ata" and caps.get("security_supported") and not (
            caps.get("security_frozen") or caps.get("security_locked")):
        return "ata_secure_erase"
    return "blkdiscard"


def choose_op_method(interface: str, caps: dict[str, Any]) -> str:
    """The best OP-mode method the device supports (``auto``)."""
    if interface == "nvme" and caps.get("ns_management") and caps.get("tnvmcap"):   # a size to compute OP from
        return "nvme_ns"
    if interface == "ata" and caps.get("hpa") is not None:
        return "ata_hpa"
    if interface == "scsi":
        return "scsi_resize"
    return "footprint"


def purge_supported(method: str, interface: str, caps: dict[str, Any]) -> str | None:
    """Why ``method`` cannot purge this device, or None."""
    needs = {"nvme_format": ("nvme", "format_supported"), "nvme_sanitize": ("nvme", "sanitize_block"),
             "ata_secure_erase": ("ata", "security_supported")}
    if method in needs:
        want, cap = needs[method]
        if interface != want:
            return f"{method} needs an {want} device (this one is {interface})"
        if method == "nvme_sanitize" and (caps.get("sanitize_block") or caps.get("sanitize_crypto")):
            return None
        if not caps.get(cap):
            return f"the device does not support {method}"
        if method == "ata_secure_erase" and caps.get("security_frozen"):
            return "ATA security is frozen (suspend/resume or hot-plug the drive to unfreeze)"
    if method == "punch_hole" and interface != "file":
        return "punch_hole is for file DUTs"
    if method == "blkdiscard" and interface == "file":
        return "blkdiscard is for block devices"
    return None
