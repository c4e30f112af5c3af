"""A real ``ansible-playbook`` run over SSH against three namespace hosts (tests/sshhosts.py), all
provisioned in one run, with an inventory the fixture generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sshhosts import SshHosts, play_recap, ssh_hosts

pytestmark = pytest.mark.system
__all__ = ["ssh_hosts"]      # the fixture, used by the tests below

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ssh"
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def test_one_playbook_run_provisions_every_host_over_ssh(ssh_hosts: SshHosts, tmp_path: Path) -> None:
    inventory = ssh_hosts.ansible_inventory(tmp_path / "hosts.yml")
    res = ssh_hosts.run_playbook(FIXTURES / "provision.yml", inventory)
    assert res.returncode == 0, res.stdout + res.stderr
    stats = play_recap(res.stdout)
    assert set(stats) == {h.name for h in ssh_hosts}
    for h in ssh_hosts:
        assert stats[h.name]["failed"] == 0 and stats[h.name]["unreachable"] == 0
        assert stats[h.name]["changed"] == 2       # the directory and the file
        record = dict(line.split("=", 1) for line in (h.lab_root / "provisioned" / "host.txt").read_text().split())
        assert record["inventory_hostname"] == h.name
        assert record["hostname"] == h.name                   # facts gathered on that host, over SSH
        assert record["ipv4"] == h.address                    # its own namespace address, nothing else


def test_the_projects_facts_playbook_runs_over_ssh(ssh_hosts: SshHosts, tmp_path: Path) -> None:
    """playbooks/facts.yml (provenance before a run) over the namespace hosts, one file DUT each."""
    for h in ssh_hosts:
        with (h.lab_root / "dut0.img").open("wb") as f:
            f.truncate(16 << 20)
    inventory = ssh_hosts.ansible_inventory(tmp_path / "hosts.yml", per_host=lambda h: {
        "lab_state_dir": str(h.lab_root / "dut-state"),
        "duts": [{"name": "dut0", "path": str(h.lab_root / "dut0.img"), "kind": "file"}]})
    facts_dir = tmp_path / "facts"
    res = ssh_hosts.run_playbook(PLAYBOOKS / "facts.yml", inventory, "-e", f"facts_dir={facts_dir}",
                       "-e", "facts_phase=before", env={"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg")})
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in play_recap(res.stdout).values())
    for h in ssh_hosts:
        doc = json.loads((facts_dir / f"{h.name}.before.json").read_text())
        assert doc["host"] == h.name and doc["kernel"]
        (dut,) = doc["duts"]
        assert (dut["name"], dut["path"], dut["capacity_bytes"]) == ("dut0", str(h.lab_root / "dut0.img"), 16 << 20)
