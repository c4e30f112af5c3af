"""The VM lab's pure parts (no QEMU, no root): what a VM is given (QEMU's command line, its NVMe and SCSI
identities, its clock), the inventory site.yml deploys it with, the image's recipe, and what ``labctl lab up
--vms`` refuses before it builds or boots anything. The VMs themselves run in tests/vmlab (make vmtest)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from labcontract.errors import ConfigError
from orchestrator.labs.vmlab import image as image_mod
from orchestrator.labs.vmlab.image import Image, project_requirements, recipe_hash
from orchestrator.labs.vmlab.lab import (
    OFFLINE_VARS,
    VmLab,
    agent_spec,
    controller_spec,
    lab_specs,
    network_spec,
    nvme_by_id,
    site_inventory,
)
from orchestrator.labs.vmlab.up import start_vm_lab
from orchestrator.labs.vmlab.vm import Vm

ROOT = Path(__file__).resolve().parents[2]


def fake_image(tmp: Path) -> Image:
    return Image(root=tmp / "root.raw", kernel=tmp / "vmlinuz", initrd=tmp / "initrd.img", recipe="0" * 64,
                 build_s=None)


def a_lab(tmp: Path, specs: list) -> VmLab:       # type: ignore[type-arg]
    lab = VmLab(tmp / "lab", fake_image(tmp), specs)
    for spec in specs:
        lab.vms[spec.name] = Vm(spec, tmp / spec.name, lab.image, lab.net, lab.key)
    return lab


def option_values(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


def test_an_agent_vm_has_its_nvme_namespaces_scsi_disk_and_nic(tmp_path: Path) -> None:
    vm = a_lab(tmp_path, [agent_spec(3, "nvme3", namespaces=3, rtc_offset_s=-420)]).vms["nvme3"]
    (vm.dir / "fw_cfg").mkdir(parents=True)
    (vm.dir / "fw_cfg" / "hostname").write_text("nvme3\n")
    argv = vm.argv()
    devices = option_values(argv, "-device")
    assert "nvme,id=nvme0,serial=VMLAB03NVME,subsys=subsys0,bus=rp0" in devices      # on a hot-pluggable port
    assert "pcie-root-port,id=rp0,chassis=1,slot=1" in devices
    assert [d for d in devices if d.startswith("nvme-ns,")] == [
        f"nvme-ns,id=ns{n},drive=nsdrv{n},nsid={n},bus=nvme0" for n in (1, 2, 3)]
    assert "scsi-hd,drive=sd0,bus=scsi0.0,serial=VMLAB03SCSI" in devices
    assert option_values(argv, "-netdev") == ["tap,id=net0,ifname=vm3n0,script=no,downscript=no"]
    assert option_values(argv, "-fw_cfg") == [f"name=opt/storagelab/hostname,file={vm.dir / 'fw_cfg' / 'hostname'}"]
    assert option_values(argv, "-smp") == ["1"] and option_values(argv, "-m") == ["1024"]
    assert option_values(argv, "-accel")[0].startswith("tcg")
    rtc = option_values(argv, "-rtc")[0]
    assert rtc.startswith("base=") and rtc.endswith(",clock=host")
    vm.accel = "kvm"
    assert option_values(vm.argv(), "-cpu") == ["host"]


def test_a_network_vm_has_a_nic_on_each_data_path_and_the_controller_none_of_the_disks(tmp_path: Path) -> None:
    lab = a_lab(tmp_path, [controller_spec(0), network_spec(2, "target", scsi_bytes=1 << 30)])
    for vm in lab.vms.values():
        (vm.dir / "fw_cfg").mkdir(parents=True)
    target = lab.vms["target"]
    assert [n.segment for n in target.spec.nics] == ["mgmt", "a", "b"]
    assert [n.address for n in target.spec.nics] == ["10.80.0.12/24", "10.81.0.12/24", "10.82.0.12/24"]
    assert len({n.mac for vm in lab.vms.values() for n in vm.spec.nics}) == 4
    ctl = lab.vms["ctl"].argv()
    assert not [d for d in option_values(ctl, "-device") if d.startswith(("nvme", "scsi"))]


def test_the_inventory_declares_each_namespace_by_its_by_id_path(tmp_path: Path) -> None:
    lab = a_lab(tmp_path, lab_specs(3))
    doc = yaml.safe_load(site_inventory(lab, tmp_path / "inv" / "hosts.yml", group_vars={"lab_broker_tls": True})
                         .read_text())
    children = doc["all"]["children"]
    assert list(children["controller"]["hosts"]) == ["ctl"]
    assert list(children["agents"]["hosts"]) == ["nvme1", "nvme2"]
    nvme2 = children["agents"]["hosts"]["nvme2"]
    assert nvme2["ansible_host"] == "10.80.0.12" and nvme2["driver_module"] == "nvme"
    assert [(d["name"], d["path"], d["serial"]) for d in nvme2["duts"]] == [
        ("nvme0", "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_VMLAB02NVME_1", "VMLAB02NVME"),
        ("nvme1", "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_VMLAB02NVME_2", "VMLAB02NVME"),
        ("scsi0", "/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_VMLAB02SCSI", "VMLAB02SCSI")]
    assert children["controller"]["hosts"]["ctl"]["lab_controller_web_bind"] == "10.80.0.10"
    assert doc["all"]["vars"]["ansible_user"] == "root" and doc["all"]["vars"]["lab_broker_tls"] is True
    assert {k: doc["all"]["vars"][k] for k in OFFLINE_VARS} == OFFLINE_VARS
    assert nvme_by_id("X", 1) == "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_X_1"


def test_the_image_is_named_by_everything_that_decides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = project_requirements(ROOT)
    assert any(r.startswith("celery") for r in reqs) and any(r.startswith("google-re2") for r in reqs)
    base = recipe_hash(reqs)
    assert recipe_hash(reqs) == base
    assert recipe_hash([*reqs, "extra==1"]) != base
    monkeypatch.setattr(image_mod, "PACKAGES", (*image_mod.PACKAGES, "tgt"))
    assert recipe_hash(reqs) != base
    for src, _mode in image_mod.GUEST_FILES.values():
        assert (image_mod.GUEST_DIR / src).is_file()


@pytest.mark.parametrize(("n", "checkout", "problem"), [
    (1, ROOT, "labctl lab up: --vms: 1 is out of range"),
    (9, ROOT, "labctl lab up: --vms: 9 is out of range"),
    (2, Path("/"), "/: --vms: not a storagelab checkout (no pyproject.toml, constraints.txt, playbooks/site.yml)"),
])
def test_lab_up_vms_refuses_before_building_or_booting(tmp_path: Path, n: int, checkout: Path, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        start_vm_lab(tmp_path, checkout, n, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "vms").exists()


def test_the_vm_lab_is_watched_until_stopped_or_a_vm_goes_down(tmp_path: Path) -> None:
    import threading

    from orchestrator.labs.vmlab.up import VmUp, serve_vms_until_stopped

    lab = a_lab(tmp_path, [agent_spec(1, "nvme1")])
    (lab.vms["nvme1"].dir).mkdir(parents=True)
    (lab.vms["nvme1"].dir / "console.log").write_text("reboot: Power down\n")
    said: list[str] = []
    stop = threading.Event()
    assert serve_vms_until_stopped(VmUp(lab, tmp_path / "hosts.yml"), stop, said.append) == 1   # never started
    assert said and said[0].startswith("VM nvme1 stopped; stopping the lab:")
    stop.set()
    lab.vms.clear()
    assert serve_vms_until_stopped(VmUp(lab, tmp_path / "hosts.yml"), stop, said.append) == 0


def test_ssh_tries_again_only_a_connection_that_never_sent_its_command(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A starved TCG guest can answer SSH's banner late: such a connection is tried again (the command never ran);
    a failure after the command was sent is not (running it again would run it twice)."""
    import subprocess

    from labcontract.errors import ServiceError

    vm = a_lab(tmp_path, [agent_spec(1, "nvme1")]).vms["nvme1"]
    answers: list[tuple[int, str]] = []
    calls: list[list[str]] = []

    def run(argv: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        rc, err = answers.pop(0)
        return subprocess.CompletedProcess(argv, rc, "out" if rc == 0 else "", err)

    monkeypatch.setattr(subprocess, "run", run)
    answers[:] = [(255, "Connection timed out during banner exchange\n"),
                  (255, "kex_exchange_identification: read: Connection reset by peer\n"), (0, "")]
    assert vm.ssh("true").stdout == "out" and len(calls) == 3
    assert option_values(calls[0], "-o").count("ConnectTimeout=30") == 1
    calls.clear()
    answers[:] = [(255, "Connection to 10.80.0.11 closed by remote host.\n")]     # the command had been sent
    with pytest.raises(ServiceError, match="exited 255"):
        vm.ssh("systemctl reboot")
    assert len(calls) == 1
    calls.clear()
    answers[:] = [(255, "ssh: connect to host 10.80.0.11 port 22: Connection timed out\n")] * 3
    with pytest.raises(ServiceError, match="port 22: Connection timed out"):
        vm.ssh("true")
    assert len(calls) == 3
