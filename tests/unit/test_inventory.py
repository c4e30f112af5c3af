"""labcontract.inventory: the shipped inventories load; a broken one reports every problem with file and key."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from labcontract.errors import InputError, InventoryError
from labcontract.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text))
    return root


HOSTS = """\
    all:
      children:
        controller:
          hosts:
            ctl: {ansible_host: 10.0.0.1}
        agents:
          hosts:
            a1: {ansible_host: 10.0.0.11}
            a2:
"""


def test_example_inventory_loads() -> None:
    inv = load_inventory(ROOT / "inventory/example")
    assert [a.name for a in inv.agents()] == ["rd630-a", "rd630-b", "rd630-c", "rd630-ini"]
    a = inv.host("rd630-a")
    assert a.address == "10.20.0.11" and a.metrics_address == "10.20.0.11:9464"
    nvme0 = a.dut("nvme0")
    assert nvme0 is a.dut("/dev/disk/by-id/nvme-SAMSUNG_MZWLJ3T8HBLS-00007_S4YPNE0N800123")
    assert nvme0.allow == ("purge", "op_mode") and nvme0.wipe_ok is False and nvme0.state_key == "S4YPNE0N800123"
    assert [n.mtu for n in inv.host("rd630-tgt").nics] == [9000, 9000]
    assert {h.name for h in inv.group("targets")} == {"rd630-tgt"}
    # group_vars precedence: initiators (deeper/later by name) overrides agents for rd630-ini
    assert inv.host("rd630-ini").vars["io_tuning_scheduler"] == "mq-deadline"
    assert inv.host("rd630-c").vars["driver_module"] == "mpt3sas"     # host_vars over group_vars
    assert [d.name for d in a.declared_duts()] == ["nvme0", "nvme1"]


def test_local_inventory_loads() -> None:
    inv = load_inventory(ROOT / "inventory/local")
    local = inv.host("localhost")
    assert local.vars["ansible_connection"] == "local"
    assert local.dut("dut0").kind == "file" and local.dut("dut0").wipe_ok is True
    assert [a.metrics_address for a in inv.agents()] == ["127.0.0.1:9464"]


def test_unknown_host_and_dut_are_inventory_errors() -> None:
    inv = load_inventory(ROOT / "inventory/example")
    with pytest.raises(InventoryError, match="no such host"):
        inv.host("nope")
    with pytest.raises(InventoryError, match="not a declared DUT of host rd630-a"):
        inv.host("rd630-a").dut("/dev/sda")


def test_broken_inventory_reports_every_problem_with_file_and_key(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {
        "hosts.yml": HOSTS,
        "group_vars/agents.yml": "duts: []\nmetrics_address: nowhere\n",
        "group_vars/storage.yml": "x: 1\n",
        "host_vars/a1.yml": """\
            duts:
              - {name: ok0, path: /dev/disk/by-id/nvme-X_1, serial: S1, allow: [purge]}
              - {name: bad1, path: /dev/sdb, allow: [purge, reformat], wipe_ok: "yes"}
              - {name: ok0, path: /dev/disk/by-id/nvme-X_2, wwn: "0xZZ"}
              - {name: noid, path: /dev/disk/by-id/nvme-X_3}
            nics:
              - {name: p1, iface: eth1, address: 10.1.1.1/24, peer: 10.2.2.2, mtu: 10000}
        """,
        "host_vars/a2.yml": "duts:\n  - {name: d, path: /dev/disk/by-id/ata-Y, serial: S1}\n",
        "host_vars/ghost.yml": "duts: []\n",
    })
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    assert isinstance(err.value, InputError)
    text = str(err.value)
    a1, agents = f"{root}/host_vars/a1.yml", f"{root}/group_vars/agents.yml"
    expected = [
        f"{a1}: duts[1].path: '/dev/sdb': a block DUT is declared by its /dev/disk/by-id/ path",
        f"{a1}: duts[1].allow[1]: 'reformat' is not one of 'purge' or 'op_mode'",
        f"{a1}: duts[1].wipe_ok:",
        f"{a1}: duts[2].wwn: '0xZZ' is not a WWN",
        f"{a1}: nics[0].mtu: 10000 is out of range",
        f"{a1}: nics[0].peer: 10.2.2.2 is not in the subnet of 10.1.1.1/24",
        f"{a1}: duts[3]: a block DUT needs its serial or wwn (stable identity)",
        f"{a1}: duts[2].name: 'ok0' is declared twice",
        f"{agents}: metrics_address: 'nowhere' is not host:port",
        f"{root}/group_vars/storage.yml: group_vars for unknown group 'storage'",
        f"{root}/host_vars/ghost.yml: host_vars for unknown host 'ghost'",
    ]
    missing = [e for e in expected if e not in text]
    assert not missing, text
    assert len(err.value.problems) >= len(expected)
    assert err.value.summary.startswith(f"{root}: ") and "problems in inventory" in err.value.summary


def test_cross_host_and_duplicate_checks(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {
        "hosts.yml": HOSTS,
        "host_vars/a1.yml": """\
            duts:
              - {name: d0, path: /dev/disk/by-id/nvme-A, serial: SAME}
              - {name: d0, path: /dev/disk/by-id/nvme-A, serial: OTHER}
        """,
        "host_vars/a2.yml": "duts:\n  - {name: d9, path: /dev/disk/by-id/nvme-B, serial: SAME}\n",
    })
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    text = str(err.value)
    assert f"{root}/host_vars/a1.yml: duts[1].name: 'd0' is declared twice" in text
    assert f"{root}/host_vars/a1.yml: duts[1].path: '/dev/disk/by-id/nvme-A' is declared twice" in text
    assert f"{root}/host_vars/a2.yml: duts[0].serial: 'SAME' is also declared by host a1" in text


def test_structure_problems(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {"hosts.yml": "all:\n  children:\n    agents:\n      hostz: {}\n"})
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    text = str(err.value)
    assert f"{root}/hosts.yml: all.children.agents.hostz: unknown key" in text
    assert "exactly one controller host (got 0)" in text and "at least one agent host" in text
    with pytest.raises(InventoryError, match="not valid YAML"):
        load_inventory(write(tmp_path / "bad", {"hosts.yml": "all: [\n"}))
    with pytest.raises(InventoryError, match="missing"):
        load_inventory(tmp_path / "empty")


def test_inline_vars_and_precedence(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {
        "hosts.yml": """\
            all:
              vars: {level: inline-all, keep: inline-all}
              children:
                controller:
                  hosts: {ctl: }
                agents:
                  vars: {level: inline-agents}
                  hosts:
                    a1: {level: inline-host, duts: [{name: f, kind: file, path: /tmp/f.img}]}
        """,
        "group_vars/all.yml": "level: gv-all\n",
        "group_vars/agents/main.yml": "level: gv-agents\n",
    })
    inv = load_inventory(root)
    assert inv.host("a1").vars["level"] == "inline-host"
    assert inv.host("ctl").vars["level"] == "gv-all" and inv.host("ctl").vars["keep"] == "inline-all"


def test_values_that_reach_a_shell_are_typed_and_every_problem_is_reported(tmp_path: Path) -> None:
    marker = tmp_path / "Y"
    root = write(tmp_path / "lab", {
        "hosts.yml": HOSTS.replace("a2:", "a2:\n            'a3;reboot': {}"),
        "group_vars/agents.yml": "ansible_user: 'lab; rm -rf /'\nlab_agent_state_dir: /var/lib/../../etc\n",
        "host_vars/a1.yml": f"""\
            ansible_host: '10.0.0.11 -oProxyCommand=x'
            lab_agent_user: Root$
            duts:
              - {{name: d0, path: '/dev/disk/by-id/X$(touch {marker})', serial: S1}}
              - {{name: d1, path: /dev/disk/by-id/../../sda, serial: S2}}
              - {{name: d2, path: '/dev/disk/by-id/nvme-ok', serial: 'S3"; RUN+="/bin/sh"'}}
              - {{name: d3, kind: file, path: '/srv/x`id`.img'}}
              - {{name: d4, kind: loop, path: '/dev/loop1 /dev/sda'}}
              - {{name: d5, path: /dev/disk/by-id/nvme-ok2, serial: S5, nvme_controller: '/dev/nvme0;x'}}
            nics:
              - {{name: p1, iface: 'eth1$(id)', address: 10.1.1.1/24}}
        """,
    })
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    text, a1, agents = str(err.value), f"{root}/host_vars/a1.yml", f"{root}/group_vars/agents.yml"
    expected = [
        f"{a1}: duts[0].path: '/dev/disk/by-id/X$(touch {marker})': not a safe device path",
        f"{a1}: duts[1].path: '/dev/disk/by-id/../../sda': not a safe device path",
        f"{a1}: duts[2].serial:",
        f"{a1}: duts[3].path: '/srv/x`id`.img': a file DUT must be an absolute path of",
        f"{a1}: duts[4].path: '/dev/loop1 /dev/sda': a loop DUT is /dev/loopN",
        f"{a1}: duts[5].nvme_controller:",
        f"{a1}: nics[0].iface:",
        f"{a1}: ansible_host: '10.0.0.11 -oProxyCommand=x' is neither an IP address nor a DNS name",
        f"{a1}: lab_agent_user:",
        f"{agents}: ansible_user:",
        f"{agents}: lab_agent_state_dir: '/var/lib/../../etc': a path must be an absolute path of",
        f"{root}/hosts.yml: all.children.agents.hosts.a3;reboot: not a valid host name",
    ]
    missing = [e for e in expected if e not in text]
    assert not missing, text
    assert not marker.exists()


def test_safe_values_still_load(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {
        "hosts.yml": HOSTS,
        "host_vars/a1.yml": """\
            ansible_host: lab-a1.example.org
            ansible_user: lab
            ansible_port: 2222
            lab_agent_user: storagelab
            lab_agent_state_dir: /var/lib/storagelab-agent
            duts:
              - {name: n0, path: /dev/disk/by-id/nvme-SAMSUNG_MZWLJ3T8HBLS-00007_S4YPNE0N800123, serial: S4YPNE0N800123,
                 model: SAMSUNG MZWLJ3T8HBLS-00007, nvme_controller: /dev/nvme0, nsid: 1}
              - {name: w0, path: /dev/disk/by-id/wwn-0x5000cca0bc123456, wwn: "0x5000cca0bc123456"}
              - {name: s0, path: "/dev/disk/by-id/scsi-SATA_Samsung_SSD_850_S2R5NX0J1:0+x", serial: S2R5NX0J1}
              - {name: l0, kind: loop, path: /dev/loop12}
              - {name: f0, kind: file, path: /var/tmp/storagelab/dut0.img}
        """,
        "host_vars/a2.yml": "ansible_host: 'fd00::12'\nduts:\n  - {name: d, path: /dev/disk/by-id/ata-Y, serial: S9}\n",
    })
    inv = load_inventory(root)
    assert [d.name for d in inv.host("a1").duts] == ["n0", "w0", "s0", "l0", "f0"]
    assert inv.host("a2").address == "fd00::12"


def test_a_dut_without_allow_allows_nothing() -> None:
    inv = load_inventory(ROOT / "inventory/example")
    ini = inv.host("rd630-ini")
    assert all(d.declared().allow == () for d in ini.duts)
    from labcontract.inventory import Dut
    bare = Dut(name="x", kind="loop", path="/dev/loop3")
    assert bare.allow == () and bare.declared().allow == ()


WINDOWS_HOSTS = HOSTS + """\
        windows_agents:
          hosts:
            w1: {ansible_host: 10.0.0.31, ansible_connection: winrm}
            w2: {ansible_host: 10.0.0.32, ansible_connection: winrm}
"""


def test_a_windows_host_declares_its_disks_as_physicaldrive_kept_in_the_contract_spelling(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {
        "hosts.yml": WINDOWS_HOSTS,
        "host_vars/a1.yml": "duts:\n  - {name: d0, path: /dev/disk/by-id/nvme-A, serial: SA}\n",
        "host_vars/a2.yml": "duts:\n  - {name: d0, path: /dev/disk/by-id/nvme-B, serial: SB}\n",
        "host_vars/w1.yml": """\
            duts:
              - {name: nvme1, kind: physicaldrive, path: '\\\\.\\PhysicalDrive1', serial: S4EVNF0M1}
              - {name: nvme2, kind: physicaldrive, path: //./physicaldrive02, wwn: eui.0025385b71b0e1a2}
        """,
        "host_vars/w2.yml": "duts:\n  - {name: n3, kind: physicaldrive, path: PhysicalDrive3, serial: S4EVNF0M3}\n",
    })
    inv = load_inventory(root)
    assert [d.path for d in inv.hosts["w1"].duts] == ["//./PhysicalDrive1", "//./PhysicalDrive2"]
    assert inv.hosts["w2"].declared_duts()[0].path == "//./PhysicalDrive3"
    assert [a.name for a in inv.agents()] == ["a1", "a2"], "agents() stays the Linux agents (site.yml)"


def test_windows_disks_are_refused_where_they_cannot_be_and_every_problem_is_named(tmp_path: Path) -> None:
    root = write(tmp_path / "lab", {
        "hosts.yml": WINDOWS_HOSTS + "            a1:\n",                  # a1 in agents and windows_agents
        "host_vars/a1.yml": "duts:\n  - {name: d0, path: /dev/disk/by-id/nvme-A, serial: SA}\n",
        "host_vars/a2.yml": "duts:\n  - {name: w, kind: physicaldrive, path: '\\\\.\\PhysicalDrive1', serial: SW}\n",
        "host_vars/w1.yml": """\
            duts:
              - {name: a, path: '\\\\.\\PhysicalDrive1', serial: S1}
              - {name: b, kind: physicaldrive, path: '\\\\?\\C:\\x', serial: S2}
              - {name: c, kind: physicaldrive, path: '\\\\.\\PhysicalDrive1\\..\\x', serial: S3}
              - {name: d, kind: physicaldrive, path: '\\\\.\\PhysicalDrive4'}
              - {name: e, kind: physicaldrive, path: '\\\\.\\PhysicalDrive5', serial: S5, allow: [purge]}
              - {name: f, kind: physicaldrive, path: '\\\\.\\PhysicalDrive6', serial: S6, scheduler: none}
              - {name: g, kind: physicaldrive, path: '\\\\.\\PhysicalDrive77777', serial: S7}
        """,
        "host_vars/w2.yml": """\
            duts:
              - {name: l, kind: loop, path: /dev/loop3}
              - {name: m, kind: physicaldrive, path: PhysicalDrive1, serial: SM}
              - {name: n, kind: physicaldrive, path: '\\\\.\\PhysicalDrive01', serial: SN}
        """,
    })
    with pytest.raises(InventoryError) as err:
        load_inventory(root)
    text = str(err.value)
    for expected in (
        "hosts.yml: all.children: host a1 is in agents (Linux) and in windows_agents: one or the other",
        "a2.yml: duts[0].kind: physicaldrive: a Windows disk, on a host outside windows_agents",
        "w1.yml: duts[0].path: '\\\\\\\\.\\\\PhysicalDrive1': a Windows disk is declared with kind: physicaldrive",
        "w1.yml: duts[1].path: ", "w1.yml: duts[2].path: ", "w1.yml: duts[6].path: ",
        "w1.yml: duts[3]: a physicaldrive DUT needs its serial or wwn",
        "w1.yml: duts[4]: allow: purge, OP modes and I/O tuning run through Linux tools",
        "w1.yml: duts[5]: scheduler: purge, OP modes",
        "w2.yml: duts[0].kind: loop: a Windows host's DUT is a physicaldrive",
        "w2.yml: duts[2].path: '\\\\\\\\.\\\\PhysicalDrive01' is the disk of duts[1] ('PhysicalDrive1'): "
        "//./PhysicalDrive1",
    ):
        assert expected in text, (expected, text)


def test_a_hosts_bmc_is_judged_with_every_problem_and_its_password_never_in_the_inventory(tmp_path: Path) -> None:
    """lab_agent_bmc (playbooks/roles/lab_agent, docs/power.md): the agent's --bmc keys, the password's and the CA's
    files on the control node by absolute path; a password itself or an unknown key is refused."""
    a2 = "duts:\n  - {name: d, path: /dev/disk/by-id/nvme-X_2, serial: S2}\n"
    good = write(tmp_path / "good", {"hosts.yml": HOSTS, "host_vars/a2.yml": a2, "host_vars/a1.yml": """\
        duts: [{name: d, path: /dev/disk/by-id/nvme-X_1, serial: S1}]
        lab_agent_bmc: {url: "https://bmc-a1.lab", user: storagelab, password_src: /srv/lab/bmc-a1.pw,
                        ca_src: /srv/lab/bmc-ca.pem, interval_s: 1, chassis: 1U}
        """})
    assert load_inventory(good).host("a1").vars["lab_agent_bmc"]["url"] == "https://bmc-a1.lab"
    bad = write(tmp_path / "bad", {"hosts.yml": HOSTS, "host_vars/a2.yml": a2, "host_vars/a1.yml": """\
        duts: [{name: d, path: /dev/disk/by-id/nvme-X_1, serial: S1}]
        lab_agent_bmc: {url: "ftp://user:pw@bmc", user: "", password_src: ../pw, password: hunter2, interval_s: 0}
        lab_agent_bmc_config: relative/bmc.yaml
        """})
    with pytest.raises(InventoryError) as err:
        load_inventory(bad)
    text = str(err.value)
    for key in ("lab_agent_bmc.url", "lab_agent_bmc.user", "lab_agent_bmc.password_src", "lab_agent_bmc.password:",
                "lab_agent_bmc.interval_s", "lab_agent_bmc_config"):
        assert key in text, (key, text)
    assert "hunter2" not in text.replace("password: hunter2", "")
