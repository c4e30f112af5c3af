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
