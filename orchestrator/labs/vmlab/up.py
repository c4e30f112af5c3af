"""``labctl lab up --vms N``: a lab of N virtual hosts on this machine for an engineer to try deploys and network
suites on: the cached guest image (built first if its recipe changed), the controller host ``ctl`` and ``N - 1``
agent hosts with emulated NVMe controllers, booted on the lab's own network namespace, and the inventory
``playbooks/site.yml`` deploys them with (docs/vmlab.md). Kept up until Ctrl-C, then every VM stopped and its
disks removed; the image stays cached."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labcontract.errors import ConfigError
from orchestrator.labs.up import watch_until_stopped
from orchestrator.labs.vmlab.image import ensure_image, project_requirements
from orchestrator.labs.vmlab.lab import VmLab, choose_accel, lab_specs, site_inventory

MIN_VMS, MAX_VMS = 2, 8        # the controller host and at least one agent; 8 x 1 GiB at most


@dataclass
class VmUp:
    """A booted VM lab and the inventory of it."""

    lab: VmLab
    inventory: Path
    boots: dict[str, float] = field(default_factory=dict)

    def deploy_command(self, checkout: Path) -> str:
        """The command that deploys the lab onto the VMs from the checkout's root (inside the lab's namespace:
        the VMs are reachable from there only)."""
        venv = checkout / ".venv" / "bin"
        argv = self.lab.net.exec([str(venv / "ansible-playbook"), "-i", str(self.inventory), "playbooks/site.yml"])
        return "make wheel && " + shlex.join(argv)

    def down(self) -> str | None:
        """The first VM whose QEMU exited, if one did."""
        return next((name for name, vm in self.lab.vms.items() if not vm.alive()), None)


def start_vm_lab(root: Path, checkout: Path, n: int, cache: Path,
                 progress: Callable[[str], None] = lambda _line: None) -> VmUp:
    """Build or take the image, boot ``n`` VMs, wait for their SSH and write the inventory under ``root``. On any
    failure the VMs started are stopped again before the error travels."""
    if not MIN_VMS <= n <= MAX_VMS:
        raise ConfigError("labctl lab up", "--vms", f"{n} is out of range: a VM lab has {MIN_VMS} to {MAX_VMS} "
                          "hosts (the controller host and its agents)")
    missing = [f for f in ("pyproject.toml", "constraints.txt", "playbooks/site.yml") if not (checkout / f).exists()]
    if missing:
        raise ConfigError(str(checkout), "--vms", f"not a storagelab checkout (no {', '.join(missing)}); run "
                          "labctl lab up --vms from the checkout's root")
    progress(f"guest image: building or taking the cached one in {cache} (a cold build takes minutes)")
    started = time.monotonic()
    image = ensure_image(cache, project_requirements(checkout), checkout / "constraints.txt")
    progress(f"guest image: {image.root.parent.name} ({'built' if image.build_s else 'cached'}, "
             f"{time.monotonic() - started:.0f} s)")
    accel, why = choose_accel(image, cache)
    progress(f"acceleration: {accel} ({why})")
    lab = VmLab(root / "vms", image, lab_specs(n), accel=accel, accel_why=why)
    try:
        boots = lab.start()
        inventory = site_inventory(lab, root / "inventory" / "hosts.yml")
    except BaseException:
        lab.cleanup()
        raise
    return VmUp(lab, inventory, boots)


def serve_vms_until_stopped(up: VmUp, stop: threading.Event, say: Callable[[str], None]) -> int:
    """Keep the VMs up until ``stop`` is set (0) or one of them powers off (1, with its console's tail)."""
    def down() -> str | None:
        name = up.down()
        return None if name is None else f"VM {name} stopped; stopping the lab:\n{up.lab[name].tail()}"
    return watch_until_stopped(stop, down, say, interval=1.0)
