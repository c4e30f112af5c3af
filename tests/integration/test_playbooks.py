"""Every playbook in playbooks/ passes --syntax-check and ansible-lint (production profile); the
inventory loader merges variables exactly as Ansible does; agent.yml runs (check mode) here; the iSCSI
roles read the inventory's nics (their templates rendered for the example lab; their checks refuse
anything else). agent.yml for real: tests/integration/test_agent_playbook.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labcontract.inventory import load_inventory
from tests.ansible_helpers import PLAYBOOKS, ROOT, VENV_BIN, ansible_env, run_playbook

pytestmark = pytest.mark.integration


def playbooks() -> list[Path]:
    return sorted(p for p in PLAYBOOKS.glob("*.yml") if p.is_file())


def test_every_playbook_passes_syntax_check() -> None:
    books = playbooks()
    assert {"agent.yml", "dut_state.yml", "facts.yml"} <= {p.name for p in books}
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "--syntax-check", "-i", str(ROOT / "inventory/example"),
                          *map(str, books)], capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode == 0, res.stdout + res.stderr


def documented_playbook_commands() -> list[str]:
    """Every ``ansible-playbook`` command line the docs and the README show (a code line starting with it)."""
    import re

    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            m = re.search(r"(?:^|`)(ansible-playbook -i [^`#]+?)\s*(?:`|#|$)", line.strip())
            if m:
                found.append(m.group(1).strip())
    return found


def test_the_documented_deploy_commands_parse_from_the_checkouts_root() -> None:
    """``ansible-playbook -i inventory/example playbooks/site.yml`` from the checkout's root, with no ANSIBLE_*
    setting, as a new user types it: the collections and roles are found through the root's ansible.cfg (before
    it, community.general.modprobe could not be resolved). Each documented command, with --syntax-check."""
    import os

    commands = documented_playbook_commands()
    assert "ansible-playbook -i inventory/example playbooks/site.yml" in commands, commands
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    for command in commands:
        argv = command.replace("inventory/mylab", "inventory/example").split()
        res = subprocess.run([*argv, "--syntax-check"], capture_output=True, text=True, env=env, cwd=ROOT)
        assert res.returncode == 0, f"{command}: {res.stdout[-2000:]}{res.stderr[-2000:]}"


def test_ansible_lint_production_profile_is_clean() -> None:
    res = subprocess.run([str(VENV_BIN / "ansible-lint"), "--profile", "production", "--nocolor", "-q", "."],
                         capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("lab", ["example", "local"])
def test_loader_merges_variables_as_ansible_does(lab: str) -> None:
    inv_dir = ROOT / "inventory" / lab
    res = subprocess.run([str(VENV_BIN / "ansible-inventory"), "-i", str(inv_dir), "--list"],
                         capture_output=True, text=True, env=ansible_env(), check=True)
    hostvars = json.loads(res.stdout)["_meta"]["hostvars"]
    inv = load_inventory(inv_dir)
    assert set(hostvars) == set(inv.hosts)
    for name, host in inv.hosts.items():
        ours = {k: v for k, v in host.vars.items() if not isinstance(v, str) or "{{" not in v}
        theirs = {k: hostvars[name][k] for k in ours}
        assert ours == theirs, name


def test_agent_playbook_check_mode_on_this_machine(tmp_path: Path) -> None:
    run = run_playbook("agent.yml", ROOT / "inventory/local", tmp_path / "run",
                       {"lab_packages_install": False, "lab_agent_install": False, "duts": []}, check=True)
    assert run.status == "successful", run.events[-3:]
    names = {ev["event_data"].get("task") for ev in run.events if ev.get("event") == "runner_on_ok"}
    assert "Install the I/O scheduler udev rule" in names
    assert "Install the start script (no systemd)" in names or "Install the systemd unit" in names


# --- the iSCSI roles read the inventory's nics ----------------------------------------------------------------

# the example lab's hosts, reached locally: nothing is changed on them (templates go to a temporary dir)
AS_LOCAL = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}

RENDER = """\
- name: Render the iSCSI templates with the roles' defaults
  hosts: rd630-tgt:rd630-ini
  gather_facts: false
  tasks:
    - name: Target
      when: inventory_hostname in groups['targets']
      block:
        - name: Target role defaults
          ansible.builtin.include_vars: {file: "{{ roles }}/iscsi_target/defaults/main.yml"}
        - name: LIO configuration
          ansible.builtin.template: {src: "{{ roles }}/iscsi_target/templates/saveconfig.json.j2",
                                     dest: "{{ out }}/saveconfig.json", mode: "0644"}
        - name: Tgt configuration
          ansible.builtin.template: {src: "{{ roles }}/iscsi_target/templates/tgt.conf.j2",
                                     dest: "{{ out }}/tgt.conf", mode: "0644"}
    - name: Initiator
      when: inventory_hostname in groups['initiators']
      block:
        - name: Initiator role defaults
          ansible.builtin.include_vars: {file: "{{ roles }}/iscsi_initiator/defaults/main.yml"}
        - name: Initiator paths
          ansible.builtin.copy: {content: "{{ iscsi_initiator_nics | to_json }}", dest: "{{ out }}/nics.json",
                                 mode: "0644"}
        - name: Multipath configuration
          ansible.builtin.template: {src: "{{ playbooks }}/templates/multipath.conf.j2",
                                     dest: "{{ out }}/multipath.conf", mode: "0644"}
        - name: The agent's read rule (tool block)
          ansible.builtin.template: {src: "{{ playbooks }}/templates/storagelab-iscsi-read.rules.j2",
                                     dest: "{{ out }}/read.rules", mode: "0644"}
"""


def test_iscsi_templates_render_the_inventory_nics(tmp_path: Path) -> None:
    book = tmp_path / "render.yml"
    book.write_text(RENDER)
    out = tmp_path / "out"
    out.mkdir()
    extra: dict[str, Any] = {**AS_LOCAL, "roles": str(PLAYBOOKS / "roles"), "playbooks": str(PLAYBOOKS),
                             "out": str(out)}
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(ROOT / "inventory/example"), str(book),
                          "-e", json.dumps(extra)], capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode == 0, res.stdout + res.stderr
    lio = json.loads((out / "saveconfig.json").read_text())
    assert lio["targets"][0]["wwn"] == "iqn.2026-11.lab.example:rd630-tgt"
    assert [(o["name"], o["dev"]) for o in lio["storage_objects"]] == [        # iscsi.luns: the DUTs
        ("lun-backing0", "/dev/disk/by-id/nvme-SAMSUNG_MZWLJ3T8HBLS-00007_S4YPNE0N800777")]
    assert [a["node_wwn"] for a in lio["targets"][0]["tpgs"][0]["node_acls"]] == ["iqn.2026-11.lab.example:rd630-ini"]
    assert lio["targets"][0]["tpgs"][0]["portals"] == [
        {"ip_address": "10.30.1.20", "port": 3260, "iser": False}, {"ip_address": "10.30.2.20", "port": 3260,
                                                                     "iser": False}]
    tgt = (out / "tgt.conf").read_text()
    assert "initiator-name iqn.2026-11.lab.example:rd630-ini" in tgt and "initiator-address" not in tgt
    extra["iscsi"] = {"iqn": "iqn.2026-11.lab.example:rd630-tgt"}           # no ACL: the NICs' peers may log in
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(ROOT / "inventory/example"), str(book),
                          "--limit", "rd630-tgt", "-e", json.dumps(extra)], capture_output=True, text=True,
                         env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode == 0, res.stdout + res.stderr
    tgt = (out / "tgt.conf").read_text()
    assert "initiator-address 10.30.1.21" in tgt and "initiator-address 10.30.2.21" in tgt
    nics = json.loads((out / "nics.json").read_text())
    assert [(n["name"], n["iface"], n["peer"], n["mtu"]) for n in nics] == [
        ("path-a", "ens2f0", "10.30.1.20", 9000), ("path-b", "ens2f1", "10.30.2.20", 9000)]
    assert "path_grouping_policy multibus" in (out / "multipath.conf").read_text()
    rules = [line for line in (out / "read.rules").read_text().splitlines() if line and not line.startswith("#")]
    assert rules == [        # the target's LUNs and the multipath maps, read only, for the agent's user
        'ACTION=="add|change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", '
        'ENV{ID_PATH}=="ip-*-iscsi-iqn.2026-11.lab.example:rd630-tgt-lun-*", '
        'RUN+="/usr/bin/setfacl -m u:storagelab:r $devnode"',
        'ACTION=="add|change", SUBSYSTEM=="block", KERNEL=="dm-*", ATTR{dm/uuid}=="mpath-*", '
        'RUN+="/usr/bin/setfacl -m u:storagelab:r $devnode"']


@pytest.mark.parametrize(("playbook", "host", "override", "expected"), [
    ("iscsi_initiator.yml", "rd630-ini",
     {"paths": [{"name": "a", "iface": "ens2f0", "address": "10.30.1.21/24", "peer": "10.30.1.20"}]},
     "a variable named paths is no longer read: declare the data paths as nics"),
    ("iscsi_target.yml", "rd630-tgt",
     {"paths": [{"name": "a", "iface": "ens2f0", "address": "10.30.1.20/24"}]},
     "a variable named paths is no longer read: declare the data paths as nics"),
    ("iscsi_initiator.yml", "rd630-ini",
     {"nics": [{"name": "a", "iface": "ens2f0", "address": "10.30.1.21/24"}]},
     "each with its peer (the target's portal)"),
])
def test_iscsi_playbooks_check_their_nics(playbook: str, host: str, override: dict[str, Any], expected: str) -> None:
    """The real playbooks, in check mode: the first task refuses what is not the inventory's nics."""
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "--check", "-i", str(ROOT / "inventory/example"),
                          "--limit", host, playbook, "-e", json.dumps({**AS_LOCAL, **override})],
                         capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode != 0
    assert "Check the iSCSI variables" in res.stdout and expected in res.stdout + res.stderr, res.stdout


@pytest.mark.parametrize("iscsi", [
    {"iqn": 'iqn.2026-11.lab.example:t", RUN+="/bin/sh -c id'},          # would close the rule's match
    {"iqn": "iqn.2026-11.lab.example:rd630-tgt", "reader": 'storagelab:rwx $devnode", RUN+="/bin/id'},
    {"iqn": "iqn.2026-11.lab.example:rd630-tgt", "reader": "Root"},
])
def test_the_initiator_refuses_an_iqn_or_reader_that_would_write_into_its_udev_rule(iscsi: dict[str, str]) -> None:
    extra = json.dumps({**AS_LOCAL, "iscsi": iscsi})
    res = subprocess.run([str(VENV_BIN / "ansible-playbook"), "--check", "-i", str(ROOT / "inventory/example"),
                          "--limit", "rd630-ini", "iscsi_initiator.yml", "-e", extra],
                         capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS)
    assert res.returncode != 0
    assert "Check the IQN and the reader the read rule is written with" in res.stdout, res.stdout[-3000:]
    assert "both are written into the agent's udev read rule" in res.stdout, res.stdout[-3000:]
