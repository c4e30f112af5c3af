"""Prometheus file_sd targets from the store's hosts or from the lab inventory (orchestrator/labctl/promtargets.py,
``labctl prometheus targets``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from labcontract.inventory import load_inventory
from orchestrator.cmd.labctl import app
from orchestrator.labctl.promtargets import (
    agent_targets,
    controller_targets,
    file_sd_targets,
    groups_label,
    inventory_controller_address,
    inventory_targets,
    valid_address,
    write_file_sd,
)
from orchestrator.store.db import make_engine, migrate
from orchestrator.store.models import Base, Host

runner = CliRunner()


def host(name: str, address: object = None) -> Host:
    facts = {"hostname": name} if address is None else {"hostname": name, "metrics_address": address}
    return Host(name=name, facts=facts)


def test_one_group_per_host_with_an_address_sorted_by_name() -> None:
    hosts = [host("rd630-02", "10.0.0.2:9464"), host("old-agent"), host("rd630-01", "rd630-01.lab:9464"),
             host("v6", "[fd00::1]:9464")]
    assert file_sd_targets(hosts) == [
        {"targets": ["rd630-01.lab:9464"], "labels": {"host": "rd630-01"}},
        {"targets": ["10.0.0.2:9464"], "labels": {"host": "rd630-02"}},
        {"targets": ["[fd00::1]:9464"], "labels": {"host": "v6"}},
    ]


def test_bad_addresses_are_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    hosts = [host("a", "no-port"), host("b", "h:0"), host("c", "fd00::1:9464"), host("d", 9464),
             host("e", "http://h:9464"), host("f", "")]
    assert file_sd_targets(hosts) == []
    assert "host a: metrics_address 'no-port' is not host:port" in caplog.text
    assert "host f" not in caplog.text          # empty: no exporter, not an error


def test_valid_address() -> None:
    assert valid_address("h:1") and valid_address("127.0.0.1:65535") and valid_address("[::1]:9464")
    for bad in ("h", ":9464", "h:65536", "h:x", "::1:9464", "h :9464", None):
        assert not valid_address(bad), bad


def test_agent_targets_reads_the_store() -> None:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add_all([host("b", "b:9464"), host("a", "a:9464"), host("c")])
        s.commit()
        assert agent_targets(s) == [{"targets": ["a:9464"], "labels": {"host": "a"}},
                                    {"targets": ["b:9464"], "labels": {"host": "b"}}]


def test_controller_targets_have_no_host_label() -> None:
    assert controller_targets("lab-ctl:9465") == [{"targets": ["lab-ctl:9465"], "labels": {}}]
    with pytest.raises(ValueError, match="not host:port"):
        controller_targets("lab-ctl")


def test_write_file_sd_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "targets" / "agents.json"
    groups = [{"targets": ["a:9464"], "labels": {"host": "a"}}]
    write_file_sd(path, groups)
    assert json.loads(path.read_text()) == groups
    write_file_sd(path, [])
    assert json.loads(path.read_text()) == []
    assert [p.name for p in path.parent.iterdir()] == ["agents.json"]      # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o644


# --- from the lab inventory -------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_inventory_targets_are_the_agents_with_their_groups() -> None:
    inv = load_inventory(ROOT / "inventory" / "example")
    assert inventory_targets(inv) == [
        {"targets": ["10.20.0.11:9464"], "labels": {"host": "rd630-a", "groups": ",agents,"}},
        {"targets": ["10.20.0.12:9464"], "labels": {"host": "rd630-b", "groups": ",agents,"}},
        {"targets": ["10.20.0.13:9464"], "labels": {"host": "rd630-c", "groups": ",agents,"}},
        {"targets": ["10.20.0.21:9464"], "labels": {"host": "rd630-ini", "groups": ",agents,initiators,"}},
    ]
    assert inventory_controller_address(inv) == "10.20.0.10:9465"


def test_on_the_one_machine_lab_the_controller_host_is_the_agent() -> None:
    inv = load_inventory(ROOT / "inventory" / "local")
    assert inventory_targets(inv) == [{"targets": ["127.0.0.1:9464"],
                                       "labels": {"host": "localhost", "groups": ",agents,controller,"}}]
    assert inventory_controller_address(inv) is None       # its metrics_address is the agent's


def write_inventory(root: Path, hosts: dict[str, dict[str, Any]], groups: dict[str, list[str]]) -> Path:
    (root / "host_vars").mkdir(parents=True)
    children = {g: {"hosts": {h: None for h in members}} for g, members in groups.items()}
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": children}}))
    for name, hv in hosts.items():
        (root / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(hv))
    return root


def dut(serial: str) -> dict[str, Any]:
    return {"duts": [{"name": "d0", "path": f"/dev/disk/by-id/nvme-X_{serial}", "serial": serial}]}


def test_hosts_without_a_usable_address_are_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inv = load_inventory(write_inventory(tmp_path / "inv", {
        "ctl": {"metrics_address": "ctl:9465"},
        "quiet": dut("S1"),                                             # no exporter declared
        "v6": {**dut("S2"), "metrics_address": "fd00::1:9464"},         # passes the loader, not Prometheus
        "ok": {**dut("S3"), "metrics_address": "[fd00::1]:9464"},
    }, {"controller": ["ctl"], "agents": ["quiet", "v6", "ok"], "targets": ["ok"]}))
    assert inventory_targets(inv) == [{"targets": ["[fd00::1]:9464"], "labels": {"host": "ok",
                                                                                 "groups": ",agents,targets,"}}]
    assert "host v6: metrics_address 'fd00::1:9464' is not host:port" in caplog.text
    assert inventory_targets(inv, "targets") == inventory_targets(inv)
    assert groups_label(["all", "ungrouped"]) == "" and groups_label(["b", "a", "all"]) == ",a,b,"


def test_labctl_prometheus_targets_from_the_inventory_reads_no_store(tmp_path: Path) -> None:
    out = tmp_path / "targets"
    nowhere = ["--store", "postgresql+psycopg://nobody@127.0.0.1:1/none"]     # reading it would fail
    res = runner.invoke(app, [*nowhere, "prometheus", "targets", "--inventory", str(ROOT / "inventory" / "example"),
                              "--dir", str(out)])
    assert res.exit_code == 0, res.output
    agents = json.loads((out / "agents.json").read_text())
    assert [g["labels"]["host"] for g in agents] == ["rd630-a", "rd630-b", "rd630-c", "rd630-ini"]
    assert json.loads((out / "controller.json").read_text()) == [{"targets": ["10.20.0.10:9465"], "labels": {}}]
    assert "4 agent target(s) from the inventory" in res.stdout
    res = runner.invoke(app, [*nowhere, "prometheus", "targets", "--inventory", str(ROOT / "inventory" / "local"),
                              "--dir", str(out), "--controller", "127.0.0.1:9465"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "agents.json").read_text())[0]["targets"] == ["127.0.0.1:9464"]
    assert json.loads((out / "controller.json").read_text())[0]["targets"] == ["127.0.0.1:9465"]


def test_labctl_prometheus_targets_names_every_inventory_problem(tmp_path: Path) -> None:
    root = write_inventory(tmp_path / "bad", {"a1": {"metrics_address": "no-port", "duts": []}},
                           {"controller": [], "agents": ["a1"]})
    res = runner.invoke(app, ["prometheus", "targets", "--inventory", str(root), "--dir", str(tmp_path / "t")])
    assert res.exit_code == 1
    assert "metrics_address: 'no-port' is not host:port" in res.stderr
    assert "exactly one controller host" in res.stderr
    assert not (tmp_path / "t").exists()


def test_labctl_prometheus_targets_of_the_registered_agents(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    engine = make_engine(store)
    migrate(engine)
    with Session(engine) as s:
        s.add_all([host("b", "b:9464"), host("a", "a:9464")])
        s.commit()
    res = runner.invoke(app, ["--store", store, "prometheus", "targets", "--dir", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "t" / "agents.json").read_text()) == [
        {"targets": ["a:9464"], "labels": {"host": "a"}}, {"targets": ["b:9464"], "labels": {"host": "b"}}]
    assert "2 agent target(s) registered" in res.stdout and not (tmp_path / "t" / "controller.json").exists()
