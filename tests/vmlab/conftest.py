"""The VM tier (``make vmtest``; docs/vmlab.md): real hosts with their own kernel, systemd, NVMe controllers and
kernel multipath, as QEMU guests of the cached Debian 12 image on a network namespace of their own.

One lab for the whole session, two VMs: ``ctl`` (the controller host) and ``nvme1`` (an agent host with an
emulated NVMe controller of two namespaces and a virtio-scsi disk). ``deployed`` runs ``playbooks/site.yml`` onto
them once, with broker TLS, exactly as docs/deployment.md shows it from the checkout's root.

The tier is collected only with ``--vmlab`` (make vmtest): make test never boots a VM."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.labs.lab import wait_for
from orchestrator.labs.vmlab.image import Image, ensure_image, project_requirements
from orchestrator.labs.vmlab.lab import VmLab, agent_spec, choose_accel, controller_spec, site_inventory
from tests.tlscerts import make_certs
from tests.vmlab.figures import TIMES

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("STORAGELAB_VMLAB_CACHE", Path.home() / ".cache" / "storagelab" / "vmlab"))
VENV = Path(sys.executable).parent.parent

pytestmark = pytest.mark.vm


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--vmlab"):
        return
    skip = pytest.mark.skip(reason="the VM tier runs with --vmlab (make vmtest)")
    for item in items:
        if "tests/vmlab/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def image() -> Image:
    started = time.monotonic()
    img = ensure_image(CACHE, project_requirements(ROOT), ROOT / "constraints.txt")
    TIMES["image_s"] = time.monotonic() - started
    TIMES["image_cached"] = float(img.build_s is None)
    return img


@pytest.fixture(scope="session")
def vmlab(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VmLab]:
    accel, why = choose_accel(image, CACHE)
    print(f"\nVM lab: {accel} ({why})")
    specs = [controller_spec(0), agent_spec(1, "nvme1")]
    lab = VmLab(tmp_path_factory.mktemp("vmlab"), image, specs, accel=accel, accel_why=why)
    started = time.monotonic()
    try:
        boots = lab.start()
        TIMES["boot_all_s"] = time.monotonic() - started
        TIMES.update({f"boot_{name}_s": s for name, s in boots.items()})
        yield lab
    finally:
        lab.cleanup()
        (ROOT / ".vmlab-times.json").write_text(json.dumps({**TIMES, "accel": accel}, indent=1) + "\n")


@dataclass
class Deployed:
    """The lab site.yml deployed onto the VMs: how to reach its controller host, its broker and its store."""

    lab: VmLab
    inventory: Path
    certs_dir: Path
    recaps: list[dict[str, dict[str, int]]] = field(default_factory=list)
    duts: dict[str, str] = field(default_factory=dict)            # host -> its first NVMe DUT's by-id path
    site_s: float = 0.0                                            # the first site.yml's time

    @property
    def ctl(self) -> Any:
        return self.lab["ctl"]

    def labctl(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """labctl on the controller host as the broker's user labctl (its deployed password file, TLS)."""
        url = ("rediss://labctl@127.0.0.1:6379/0?password_file=/etc/storagelab/broker/labctl.pass"
               "&ssl_ca_certs=/etc/storagelab/broker-ca.pem&ssl_certfile=/etc/storagelab/broker-client.pem"
               "&ssl_keyfile=/etc/storagelab/broker-client.key")
        line = ("LAB_DIR=/var/lib/storagelab LAB_STORE_URL=sqlite:////var/lib/storagelab/store.sqlite "
                f"LAB_BROKER_URL='{url}' /opt/storagelab/.venv/bin/labctl " + " ".join(_q(a) for a in args))
        return self.ctl.ssh(line, check=check, timeout=timeout)

    def query(self, *args: str) -> Any:
        """What tests/vmlab/storeq.py reads of the deployed store (on the controller host)."""
        out = self.ctl.ssh("python3 /root/storeq.py /var/lib/storagelab/store.sqlite " + " ".join(_q(a) for a in args))
        return json.loads(out.stdout)

    def run(self, run_id: str) -> dict[str, Any]:
        data: dict[str, Any] = self.query("run", run_id)
        return data

    def wait_run(self, run_id: str, timeout: float = 1800) -> dict[str, Any]:
        """The run once it ended: its steps, attempts and results."""
        def ended() -> dict[str, Any] | None:
            run = self.run(run_id)
            return run if run and run["state"] in ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED") else None
        run = wait_for(ended, timeout, f"run {run_id} to end", interval=5)
        assert isinstance(run, dict)
        return run

    def submit(self, *args: str) -> str:
        """``labctl submit ARGS`` on the controller host; the run id."""
        out = self.labctl("submit", *args).stdout
        return out.strip().splitlines()[-1]

    def host(self, name: str) -> dict[str, Any] | None:
        return next((h for h in self.query("hosts") if h["name"] == name), None)


def lab_inventory(lab: VmLab, path: Path, certs: Any, **extra: Any) -> Path:
    """The lab's inventory (orchestrator.labs.vmlab.lab.site_inventory, as labctl lab up --vms writes it) with
    broker TLS on, from the test CA; ``extra``: site_inventory's groups, host_vars and more group_vars."""
    tls = {"lab_broker_tls": True, "lab_broker_tls_ca": str(certs.ca), "lab_broker_tls_cert": str(certs.server_cert),
           "lab_broker_tls_key": str(certs.server_key), "lab_broker_tls_client_cert": str(certs.client_cert),
           "lab_broker_tls_client_key": str(certs.client_key)}
    group_vars = {**tls, **extra.pop("group_vars", {})}
    return site_inventory(lab, path / "hosts.yml", group_vars=group_vars, **extra)


def deploy(lab: VmLab, d: Path, **inventory: Any) -> Deployed:
    """site.yml run once onto ``lab`` (the wheel built first, as make wheel does), from the checkout's root."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(ROOT / "dist"), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    certs = make_certs(d / "certs", server_ips=[lab["ctl"].spec.address])
    inv = lab_inventory(lab, d / "inventory", certs, **inventory)
    started = time.monotonic()
    first = play(lab, inv, "site.yml")
    dep = Deployed(lab, inv, d / "certs", [first], site_s=time.monotonic() - started)
    script = (Path(__file__).parent / "storeq.py").read_text()
    subprocess.run(lab["ctl"].ssh_argv("cat > /root/storeq.py"), input=script, text=True, check=True,
                   capture_output=True, timeout=60)
    return dep


@pytest.fixture(scope="session")
def deployed(vmlab: VmLab, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    """site.yml run once onto the session's lab."""
    dep = deploy(vmlab, tmp_path_factory.mktemp("deploy"))
    TIMES["site_first_s"] = dep.site_s
    return dep


def _q(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def play_result(lab: VmLab, inventory: Path, playbook: str, *extra: str,
                timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i INVENTORY playbooks/PLAYBOOK`` from the checkout's root (as the docs show it), inside
    the lab's namespace, with Mitogen's strategy. Its output, each task timed (ansible.posix's profile_tasks), is
    kept beside the inventory as PLAYBOOK.N.log: where the tier's time goes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{VENV / 'bin'}:{env.get('PATH', '')}"
    env.update(mitogen_env())
    env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
    env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "25"
    res = subprocess.run(lab.net.exec(["ansible-playbook", "-i", str(inventory), f"playbooks/{playbook}", *extra]),
                         cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    n = len(list(inventory.parent.glob(f"{playbook}.*.log")))
    (inventory.parent / f"{playbook}.{n}.log").write_text(res.stdout + res.stderr)
    return res


def play(lab: VmLab, inventory: Path, playbook: str, *extra: str, timeout: float = 3600) -> dict[str, dict[str, int]]:
    """:func:`play_result`, which must succeed: the recap per host."""
    res = play_result(lab, inventory, playbook, *extra, timeout=timeout)
    assert res.returncode == 0, f"{playbook} failed:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    return recap(res.stdout)


def mitogen_env() -> dict[str, str]:
    """Mitogen's strategy for the plays (docs/vmlab.md): one Python per guest for the whole play instead of one per
    task, which under TCG takes site.yml from about 27 to about 8 minutes. The playbooks are the same."""
    import ansible_mitogen

    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def recap(out: str) -> dict[str, dict[str, int]]:
    hosts: dict[str, dict[str, int]] = {}
    section = out.rsplit("PLAY RECAP", 1)[-1]
    for line in section.splitlines():
        if ":" not in line or "ok=" not in line:
            continue
        name, _, counts = line.partition(":")
        hosts[name.strip()] = {k: int(v) for k, v in (p.split("=") for p in counts.split())}
    return hosts


def have_tools() -> list[str]:
    return [t for t in ("ansible-playbook",) if shutil.which(t, path=str(VENV / "bin")) is None]
