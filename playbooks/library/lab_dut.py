#!/usr/bin/python
# Copyright: storagelab contributors
# Apache-2.0
"""Ansible module lab_dut: purge, OP mode and facts of a declared DUT, behind the safety interlock."""
# ruff: noqa: E402  (Ansible modules put DOCUMENTATION/EXAMPLES/RETURN before the imports)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_dut
short_description: Purge a DUT, set its overprovisioning (OP) mode, or read its facts
description:
  - Purges a device under test (NVMe format with secure erase, NVMe sanitize, ATA security erase,
    blkdiscard, or punching a hole through a file DUT).
  - Sets the OP mode C(stock) or C(hp:<percent>) by NVMe namespace resize, ATA HPA (C(hdparm -N)),
    SCSI resize (C(sg_format --resize)) or, when the device supports none of those, a footprint limit
    recorded in the DUT's state file (the fio jobs then use it as C(size=)).
  - Reads the capacity back after every change and fails when it is not what was asked for.
  - Before anything is written, the storagelab safety interlock runs on the host. It refuses a device
    that is not a declared DUT of the host, that the DUT's C(allow) list does not cover, that is mounted,
    used as swap, held by device-mapper/MD/loop, backs the root filesystem, carries a filesystem,
    partition-table, LVM or MD signature, or whose signature probe (wipefs, blkid) fails or cannot run.
    C(wipe_ok=true) on the DUT lifts only the signature reason.
  - In check mode only read-only commands run; the result lists the commands that would run.
  - A purge changes the device every time it runs. Give it O(once_token) (for example the run id) to purge
    once per token; a second run with the same token reports no change.
version_added: "0.1.0"
author: storagelab
options:
  path:
    description: The DUT, by its declared path (C(/dev/disk/by-id/...), C(/dev/loopN) or a file).
    type: path
    required: true
  name:
    description: The DUT's name, echoed in the facts.
    type: str
  state:
    description: C(purged) purges, C(op_mode) sets O(op_mode), C(facts) only reads.
    type: str
    choices: [purged, op_mode, facts]
    default: facts
  declared:
    description: The host's declared DUTs (the inventory's C(duts) list); entries need C(path), may have
      C(name), C(wipe_ok) and C(allow) (the operations it allows, C(purge) and C(op_mode); without it, none).
    type: list
    elements: dict
    default: []
  method:
    description: Purge method.
    type: str
    choices: [auto, nvme_format, nvme_sanitize, ata_secure_erase, blkdiscard, punch_hole]
    default: auto
  op_mode:
    description: C(stock) or C(hp:<percent>) (1..90) for O(state=op_mode).
    type: str
    default: stock
  op_method:
    description: How to apply the OP mode.
    type: str
    choices: [auto, nvme_ns, ata_hpa, scsi_resize, footprint]
    default: auto
  allowed_methods:
    description: Purge and OP methods the inventory allows for this DUT (C(auto) allows any).
    type: list
    elements: str
    default: [auto]
  interface:
    description: Device interface; C(auto) detects it from sysfs.
    type: str
    choices: [auto, nvme, ata, scsi, virtual]
    default: auto
  nvme_controller:
    description: NVMe controller character device (C(/dev/nvme0)) when it cannot be derived from the path.
    type: str
  nsid:
    description: NVMe namespace id when it cannot be derived from the path.
    type: int
  state_dir:
    description: Directory of the per-DUT state files.
    type: path
    default: /var/lib/storagelab/dut-state
  state_key:
    description: Name of this DUT's state file (serial, WWN or DUT name); default from the path.
    type: str
  once_token:
    description: Purge only once per token (recorded in the state file).
    type: str
  sanitize_timeout:
    description: Seconds to wait for an NVMe sanitize to finish.
    type: int
    default: 7200
"""

EXAMPLES = r"""
- name: Purge nvme0 once for this run
  lab_dut:
    path: /dev/disk/by-id/nvme-SAMSUNG_MZWLJ3T8HBLS-00007_S4YPNE0N800123
    state: purged
    declared: "{{ duts }}"
    once_token: "{{ run_id }}"

- name: Overprovision by 20 %
  lab_dut:
    path: /dev/disk/by-id/nvme-SAMSUNG_MZWLJ3T8HBLS-00007_S4YPNE0N800123
    state: op_mode
    op_mode: "hp:20"
    declared: "{{ duts }}"

- name: Health and wear before the run
  lab_dut:
    path: /dev/disk/by-id/nvme-SAMSUNG_MZWLJ3T8HBLS-00007_S4YPNE0N800123
    state: facts
  register: before
"""

RETURN = r"""
device:
  description: The path given and the node it resolves to.
  type: dict
  returned: always
interface:
  description: nvme, ata, scsi, virtual or file.
  type: str
  returned: always
method:
  description: The purge or OP method used (after C(auto) was resolved).
  type: str
  returned: when state is purged or op_mode
capacity_before:
  description: Capacity in bytes before the operation.
  type: int
  returned: when state is purged or op_mode
capacity_after:
  description: Capacity in bytes read back after the operation (predicted in check mode).
  type: int
  returned: when state is purged or op_mode
footprint_bytes:
  description: The size fio may use on the DUT (the C(size=) of its jobs).
  type: int
  returned: when state is op_mode
commands:
  description: The writing commands run, or in check mode the ones that would run.
  type: list
  elements: str
  returned: always
read_commands:
  description: The read-only commands run to probe and verify the device.
  type: list
  elements: str
  returned: always
reasons:
  description: Why the interlock refused the device (on failure only).
  type: list
  elements: str
  returned: failure
facts:
  description: Identity, firmware, driver, capacity, health and wear (state=facts).
  type: dict
  returned: when state is facts
"""

import json
import os
import re
import shlex
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lab_dut_tools import (
    MIB,
    ParseError,
    choose_op_method,
    choose_purge,
    nvme_ns_plan,
    parse_hdparm_identify,
    parse_hdparm_max_sectors,
    parse_nvme_create_ns,
    parse_nvme_id_ctrl,
    parse_nvme_id_ns,
    parse_nvme_sanitize_log,
    parse_nvme_smart_log,
    parse_op_mode,
    parse_sg_inq,
    parse_sg_readcap,
    parse_size_bytes,
    parse_smartctl_json,
    purge_plan,
    purge_supported,
    scaled,
)
from ansible.module_utils.lab_interlock import DeclaredDut, observe, refusal_message, refusal_reasons


class Tools:
    """Runs commands: reads always, writes only outside check mode (recorded either way)."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.reads: list[str] = []
        self.writes: list[str] = []

    def _run(self, argv: list[str]) -> str:
        exe = self.module.get_bin_path(argv[0], required=True)
        rc, out, err = self.module.run_command([exe, *argv[1:]])
        if rc != 0:
            self.module.fail_json(msg=f"{shlex.join(argv)} failed (rc={rc}): {err.strip() or out.strip()}",
                                  commands=self.writes, read_commands=self.reads)
        return str(out)

    def read(self, argv: list[str]) -> str:
        self.reads.append(shlex.join(argv))
        return self._run(argv)

    def try_write(self, argv: list[str]) -> tuple[int, str]:
        """A write whose failure the caller handles: (rc, its output or error)."""
        self.writes.append(shlex.join(argv))
        if self.module.check_mode:
            return 0, ""
        exe = self.module.get_bin_path(argv[0], required=True)
        rc, out, err = self.module.run_command([exe, *argv[1:]])
        return rc, str(out) if rc == 0 else (err.strip() or out.strip())

    def write(self, argv: list[str]) -> str:
        self.writes.append(shlex.join(argv))
        return "" if self.module.check_mode else self._run(argv)

    def has(self, name: str) -> bool:
        return self.module.get_bin_path(name) is not None


# ---------------------------------------------------------------- probing


def detect_interface(real: str) -> str:
    name = os.path.basename(real)
    if os.path.isfile(real):
        return "file"
    if re.match(r"^nvme\d+n\d+\Z", name):
        return "nvme"
    vendor = _read_sys(f"/sys/class/block/{name}/device/vendor")
    if name.startswith("sd"):
        return "ata" if vendor.strip() == "ATA" else "scsi"
    return "virtual"


def _read_sys(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def nvme_ids(real: str, ctrl: str | None, nsid: int | None) -> tuple[str | None, int | None]:
    m = re.match(r"^nvme(\d+)n(\d+)\Z", os.path.basename(real))
    if m:
        ctrl = ctrl or f"/dev/nvme{m.group(1)}"
        nsid = nsid or int(m.group(2))
    return ctrl, nsid


def probe(module: AnsibleModule, tools: Tools) -> dict[str, Any]:
    """Identity, capabilities and capacity of the device, by read-only commands."""
    p = module.params
    real = os.path.realpath(p["path"])
    iface = "file" if os.path.isfile(real) else p["interface"]
    iface = detect_interface(real) if iface == "auto" else iface
    dev: dict[str, Any] = {"path": p["path"], "real": real, "interface": iface, "caps": {}}
    if iface == "nvme":
        _probe_nvme(module, tools, dev)
    elif iface == "ata":
        ident = parse_hdparm_identify(tools.read(["hdparm", "-I", real]))
        hpa = parse_hdparm_max_sectors(tools.read(["hdparm", "-N", real]))
        dev["caps"] = {**ident, "hpa": hpa}
        dev["capacity"] = hpa["current"] * ident["logical_sector_size"]
    elif iface == "scsi":
        readcap = parse_sg_readcap(tools.read(["sg_readcap", "--long", real]))
        dev["caps"] = {"readcap": readcap}
        dev["capacity"] = readcap["size_bytes"]
    elif iface == "file":
        dev["capacity"] = os.path.getsize(real)
    else:
        dev["capacity"] = parse_size_bytes(tools.read(["blockdev", "--getsize64", real]))
    return dev


def _probe_nvme(module: AnsibleModule, tools: Tools, dev: dict[str, Any]) -> None:
    ctrl, nsid = nvme_ids(dev["real"], module.params["nvme_controller"], module.params["nsid"])
    if not ctrl or not nsid:
        module.fail_json(msg=f"{dev['path']}: cannot derive the NVMe controller and namespace; "
                             "set nvme_controller and nsid")
    ctrl, nsid = str(ctrl), int(nsid or 0)
    ctrl_info = parse_nvme_id_ctrl(tools.read(["nvme", "id-ctrl", ctrl, "-o", "json"]))
    ns = parse_nvme_id_ns(tools.read(["nvme", "id-ns", ctrl, f"--namespace-id={nsid}", "-o", "json"]))
    dev.update(ctrl=ctrl, nsid=nsid, caps={**ctrl_info, "ns": ns}, capacity=ns["size_bytes"])


def reprobe_capacity(module: AnsibleModule, tools: Tools, dev: dict[str, Any]) -> int:
    return int(probe(module, tools)["capacity"]) if not module.check_mode else int(dev["capacity"])


# ---------------------------------------------------------------- state file


def state_path(module: AnsibleModule) -> str:
    p = module.params
    key = p["state_key"] or os.path.basename(p["path"])
    return os.path.join(p["state_dir"], re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".json")


def load_state(module: AnsibleModule) -> dict[str, Any]:
    try:
        with open(state_path(module), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(module: AnsibleModule, state: dict[str, Any]) -> None:
    if module.check_mode:
        return
    path = state_path(module)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- method choice


def resolve(module: AnsibleModule, asked: str, automatic: str, candidates: list[str],
            unsupported: Any) -> str:
    """``asked`` or, for auto, the automatic choice limited to the inventory's allowed_methods."""
    allowed = module.params["allowed_methods"]
    if asked != "auto":
        if "auto" not in allowed and asked not in allowed:
            module.fail_json(msg=f"method {asked} is not allowed for this DUT (allowed: {', '.join(allowed)})")
        return asked
    if "auto" in allowed:
        return automatic
    for method in candidates:
        if method in allowed and unsupported(method) is None:
            return method
    module.fail_json(msg=f"none of the allowed methods ({', '.join(allowed)}) works on this device")
    return ""


# ---------------------------------------------------------------- purge


def do_purge(module: AnsibleModule, tools: Tools, dev: dict[str, Any]) -> dict[str, Any]:
    p, state = module.params, load_state(module)
    token = p["once_token"]
    if token and state.get("purge", {}).get("token") == token:
        return {"changed": False, "method": state["purge"].get("method"), "already_purged": True,
                "capacity_before": dev["capacity"], "capacity_after": dev["capacity"],
                "msg": f"already purged for once_token {token}"}
    iface, caps = dev["interface"], dev["caps"]
    method = resolve(module, p["method"], choose_purge(iface, caps),
                     ["nvme_format", "nvme_sanitize", "ata_secure_erase", "punch_hole", "blkdiscard"],
                     lambda m: purge_supported(m, iface, caps))
    why = purge_supported(method, iface, caps)
    if why:
        module.fail_json(msg=f"{dev['path']}: cannot purge with {method}: {why}")
    plan = purge_plan(method, device=dev["real"], ctrl=dev.get("ctrl", ""), nsid=dev.get("nsid") or 1,
                      lbaf=caps.get("ns", {}).get("lbaf", 0), size=dev["capacity"],
                      enhanced=bool(caps.get("enhanced_erase")))
    for argv in plan:
        tools.write(argv)
    if method == "nvme_sanitize" and not module.check_mode:
        wait_sanitize(module, tools, dev["ctrl"])
    after = reprobe_capacity(module, tools, dev)
    state["purge"] = {"method": method, "token": token, "at": int(time.time())}
    save_state(module, state)
    return {"changed": True, "method": method, "capacity_before": dev["capacity"], "capacity_after": after}


def wait_sanitize(module: AnsibleModule, tools: Tools, ctrl: str) -> None:
    deadline = time.monotonic() + module.params["sanitize_timeout"]
    while time.monotonic() < deadline:
        log = parse_nvme_sanitize_log(tools.read(["nvme", "sanitize-log", ctrl, "-o", "json"]))
        if not log["running"]:
            if log["status"] != 1:
                module.fail_json(msg=f"{ctrl}: sanitize ended with status {log['status']}")
            return
        time.sleep(5)
    module.fail_json(msg=f"{ctrl}: sanitize still running after {module.params['sanitize_timeout']} s")


# ---------------------------------------------------------------- OP mode


def do_op_mode(module: AnsibleModule, tools: Tools, dev: dict[str, Any]) -> dict[str, Any]:
    p = module.params
    try:
        pct = parse_op_mode(p["op_mode"])
    except ValueError as e:
        module.fail_json(msg=str(e))
    iface, caps = dev["interface"], dev["caps"]
    method = resolve(module, p["op_method"], choose_op_method(iface, caps),
                     ["nvme_ns", "ata_hpa", "scsi_resize", "footprint"], lambda m: op_unsupported(m, iface, caps))
    why = op_unsupported(method, iface, caps)
    if why:
        module.fail_json(msg=f"{dev['path']}: cannot set op_mode with {method}: {why}")
    state = load_state(module)
    apply = {"nvme_ns": op_nvme, "ata_hpa": op_ata, "scsi_resize": op_scsi, "footprint": op_footprint}[method]
    changed_device, after, footprint, extra = apply(module, tools, dev, pct, state)
    record = {"op_mode": p["op_mode"], "op_method": method, "capacity_bytes": after, "footprint_bytes": footprint,
              **extra}
    changed_record = any(state.get(k) != v for k, v in record.items())
    state.update(record)
    if changed_device or changed_record:
        save_state(module, state)
    return {"changed": changed_device or changed_record, "method": method, "op_mode": p["op_mode"],
            "capacity_before": dev["capacity"], "capacity_after": after, "footprint_bytes": footprint,
            "state_file": state_path(module)}


def op_unsupported(method: str, iface: str, caps: dict[str, Any]) -> str | None:
    if method == "nvme_ns" and (iface != "nvme" or not caps.get("ns_management")):
        return "needs an NVMe controller with namespace management (OACS bit 3)"
    if method == "nvme_ns" and not caps.get("tnvmcap"):      # QEMU 7.2 sets OACS bit 3 and reports 0
        return "the controller reports no total NVM capacity (TNVMCAP 0) to size a namespace from"
    if method == "ata_hpa" and iface != "ata":
        return "needs an ATA device"
    if method == "scsi_resize" and iface != "scsi":
        return "needs a SCSI device"
    return None


def verify(module: AnsibleModule, what: str, got: int, want: int) -> None:
    if not module.check_mode and got != want:
        module.fail_json(msg=f"{what}: read back {got}, expected {want}")


def op_nvme(module: AnsibleModule, tools: Tools, dev: dict[str, Any], pct: int,
            state: dict[str, Any]) -> tuple[bool, int, int, dict[str, Any]]:
    caps, ns = dev["caps"], dev["caps"]["ns"]
    target = scaled(caps["tnvmcap"] // ns["block_size"], pct)
    if ns["nsze"] == target:
        return False, dev["capacity"], dev["capacity"], {}
    nsid = dev["nsid"]
    done: list[str] = []
    for argv in nvme_ns_plan(dev["ctrl"], nsid, caps["cntlid"], ns["flbas"], target):
        rc, out = tools.try_write(argv)
        if rc != 0:     # a controller that sets OACS bit 3 and refuses a step (QEMU 7.2 does): put the namespace back
            back = restore_namespace(tools, dev["ctrl"], dev["nsid"], caps["cntlid"], ns, done)
            module.fail_json(msg=f"{dev['path']}: OP by namespace management failed at {shlex.join(argv)} "
                                 f"(rc={rc}): {out}; {back}", commands=tools.writes)
        done.append(argv[1])
        if argv[1] == "create-ns" and not module.check_mode:
            nsid = parse_nvme_create_ns(out)
            if nsid != dev["nsid"]:
                module.fail_json(msg=f"create-ns made namespace {nsid}, expected {dev['nsid']}")
    if module.check_mode:
        return True, target * ns["block_size"], target * ns["block_size"], {}
    after = parse_nvme_id_ns(tools.read(["nvme", "id-ns", dev["ctrl"], f"--namespace-id={nsid}", "-o", "json"]))
    verify(module, "NVMe namespace size (blocks)", after["nsze"], target)
    return True, after["size_bytes"], after["size_bytes"], {}


def restore_namespace(tools: Tools, ctrl: str, nsid: int, cntlid: int, ns: dict[str, Any], done: list[str]) -> str:
    """After a failed step of the namespace plan: the namespace as it was (re-attached if it was only detached,
    re-created at its former size if it was deleted: its data is gone then); what was done, for the message."""
    ids = [f"--namespace-id={nsid}", f"--controllers={cntlid}"]
    if "detach-ns" not in done or "attach-ns" in done:
        return "the namespace was not changed"
    steps = [["nvme", "attach-ns", ctrl, *ids], ["nvme", "ns-rescan", ctrl]]
    what = f"namespace {nsid} re-attached as it was"
    if "delete-ns" in done and "create-ns" not in done:
        steps.insert(0, ["nvme", "create-ns", ctrl, f"--nsze={ns['nsze']}", f"--ncap={ns['nsze']}",
                         f"--flbas={ns['flbas']}"])
        what = f"namespace {nsid} re-created at its former size ({ns['nsze']} blocks; its data is gone)"
    for argv in steps:
        rc, out = tools.try_write(argv)
        if rc != 0:
            return (f"putting it back failed too at {shlex.join(argv)}: {out} (the namespace is gone until "
                    "restored by hand)")
    return what


def op_ata(module: AnsibleModule, tools: Tools, dev: dict[str, Any], pct: int,
           state: dict[str, Any]) -> tuple[bool, int, int, dict[str, Any]]:
    hpa, sector = dev["caps"]["hpa"], dev["caps"]["logical_sector_size"]
    target = scaled(hpa["native"], pct)
    extra = {"native_bytes": hpa["native"] * sector}
    if hpa["current"] == target:
        return False, dev["capacity"], dev["capacity"], extra
    tools.write(["hdparm", "--yes-i-know-what-i-am-doing", "-N", f"p{target}", dev["real"]])
    if not module.check_mode:
        verify(module, "ATA max sectors", parse_hdparm_max_sectors(tools.read(["hdparm", "-N", dev["real"]]))[
            "current"], target)
    return True, target * sector, target * sector, extra


def op_scsi(module: AnsibleModule, tools: Tools, dev: dict[str, Any], pct: int,
            state: dict[str, Any]) -> tuple[bool, int, int, dict[str, Any]]:
    rc = dev["caps"]["readcap"]
    native = int(state.get("native_blocks") or rc["blocks"])   # first seen capacity is taken as native
    target = scaled(native, pct)
    extra = {"native_blocks": native, "native_bytes": native * rc["block_size"]}
    if rc["blocks"] == target:
        return False, dev["capacity"], dev["capacity"], extra
    tools.write(["sg_format", "--resize", f"--count={target if pct else -1}", dev["real"]])
    if not module.check_mode:
        verify(module, "SCSI logical blocks",
               parse_sg_readcap(tools.read(["sg_readcap", "--long", dev["real"]]))["blocks"], target)
    return True, target * rc["block_size"], target * rc["block_size"], extra


def op_footprint(module: AnsibleModule, tools: Tools, dev: dict[str, Any], pct: int,
                 state: dict[str, Any]) -> tuple[bool, int, int, dict[str, Any]]:
    capacity = int(dev["capacity"])
    footprint = scaled(capacity, pct, MIB) if pct else capacity
    return False, capacity, footprint, {}


# ---------------------------------------------------------------- facts


def do_facts(module: AnsibleModule, tools: Tools, dev: dict[str, Any]) -> dict[str, Any]:
    caps, iface, real = dev["caps"], dev["interface"], dev["real"]
    facts: dict[str, Any] = {"name": module.params["name"] or os.path.basename(dev["path"]),
                             "path": dev["path"], "real_path": real, "interface": iface,
                             "capacity_bytes": dev["capacity"], "model": caps.get("model"),
                             "serial": caps.get("serial"), "firmware": caps.get("firmware"),
                             "driver": driver_of(real, dev.get("ctrl")), "health": None,
                             "dut_state": load_state(module) or None}
    if iface == "nvme":
        facts["health"] = parse_nvme_smart_log(tools.read(["nvme", "smart-log", dev["ctrl"], "-o", "json"]))
    elif iface == "scsi" and tools.has("sg_inq"):
        facts.update({k: v for k, v in parse_sg_inq(tools.read(["sg_inq", real])).items() if v})
    if iface in ("ata", "scsi") and tools.has("smartctl"):
        rc, out, _ = module.run_command([str(module.get_bin_path("smartctl")), "-j", "-H", "-A", real])
        tools.reads.append(shlex.join(["smartctl", "-j", "-H", "-A", real]))
        try:
            facts["health"] = parse_smartctl_json(out)
        except ParseError:
            facts["health"] = {"error": f"smartctl rc={rc}"}
    return {"changed": False, "facts": facts}


def driver_of(real: str, ctrl: str | None) -> dict[str, Any]:
    name = os.path.basename(real)
    link = f"/sys/class/nvme/{os.path.basename(ctrl)}/device/driver" if ctrl else \
        f"/sys/class/block/{name}/device/driver"
    driver = os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None
    if driver is None and name.startswith("loop"):
        driver = "loop"
    version = _read_sys(f"/sys/module/{driver}/version").strip() if driver else ""
    return {"name": driver, "version": version or os.uname().release}


# ---------------------------------------------------------------- main


def interlock(module: AnsibleModule, operation: str) -> None:
    p = module.params
    declared = [DeclaredDut.from_mapping(d) for d in p["declared"] if d.get("path")]
    reasons = refusal_reasons(p["path"], declared, observe(p["path"]), operation)
    if reasons:
        module.fail_json(msg=refusal_message(p["path"], operation, reasons), device=p["path"],
                         reasons=[r.message for r in reasons], reason_codes=[r.code for r in reasons],
                         changed=False)


ARGUMENT_SPEC: dict[str, Any] = {
    "path": {"type": "path", "required": True},
    "name": {"type": "str"},
    "state": {"type": "str", "default": "facts", "choices": ["purged", "op_mode", "facts"]},
    "declared": {"type": "list", "elements": "dict", "default": []},
    "method": {"type": "str", "default": "auto",
               "choices": ["auto", "nvme_format", "nvme_sanitize", "ata_secure_erase", "blkdiscard", "punch_hole"]},
    "op_mode": {"type": "str", "default": "stock"},
    "op_method": {"type": "str", "default": "auto",
                  "choices": ["auto", "nvme_ns", "ata_hpa", "scsi_resize", "footprint"]},
    "allowed_methods": {"type": "list", "elements": "str", "default": ["auto"]},
    "interface": {"type": "str", "default": "auto", "choices": ["auto", "nvme", "ata", "scsi", "virtual"]},
    "nvme_controller": {"type": "str"},
    "nsid": {"type": "int"},
    "state_dir": {"type": "path", "default": "/var/lib/storagelab/dut-state"},
    "state_key": {"type": "str", "no_log": False},
    "once_token": {"type": "str", "no_log": False},
    "sanitize_timeout": {"type": "int", "default": 7200},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    state = module.params["state"]
    if state != "facts":
        interlock(module, "purge" if state == "purged" else "op_mode")
    tools = Tools(module)
    try:
        dev = probe(module, tools)
        if state == "purged":
            result = do_purge(module, tools, dev)
        elif state == "op_mode":
            result = do_op_mode(module, tools, dev)
        else:
            result = do_facts(module, tools, dev)
    except ParseError as e:
        module.fail_json(msg=str(e), commands=tools.writes, read_commands=tools.reads)
    module.exit_json(device={"path": dev["path"], "real_path": dev["real"]}, interface=dev["interface"],
                     commands=tools.writes, read_commands=tools.reads, check_mode=module.check_mode, **result)


if __name__ == "__main__":
    main()
