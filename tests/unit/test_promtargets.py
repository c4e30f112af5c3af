"""Prometheus file_sd targets from the store's hosts (orchestrator/promtargets.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from orchestrator.promtargets import (
    agent_targets,
    controller_targets,
    file_sd_targets,
    valid_address,
    write_file_sd,
)
from orchestrator.store.models import Base, Host


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
