"""Prometheus file_sd target files for the lab's exporters (deploy/prometheus/prometheus.yml).

Two sources of targets:

- the registered agents: an agent reports its metrics address ("host:port",
  ``HostFacts.metrics_address``) when it registers; the store keeps it in the host's facts.
  ``agent_targets`` turns the registered hosts into file_sd target groups labelled ``host=<name>``;
- the lab inventory (``labcontract.inventory``): every host of the ``agents`` group with a
  ``metrics_address``, labelled ``host=<name>`` and ``groups=,<group>,<group>,`` (its inventory groups,
  sorted, in Prometheus' separator-enclosed form so ``groups=~".*,initiators,.*"`` selects a group);
  ``inventory_targets``. Hosts that are not up yet have targets too (Prometheus shows them down).

``write_file_sd`` writes them atomically, so Prometheus, which re-reads the file whenever it changes,
never sees half a file.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.inventory import Inventory
from orchestrator.store.models import Host

log = logging.getLogger(__name__)


def valid_address(address: object) -> bool:
    """``host:port`` (``[v6]:port`` too) with a port in 1..65535."""
    if not isinstance(address, str) or not address or any(c.isspace() for c in address) or "/" in address:
        return False
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return False
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return False               # a bare IPv6 address needs brackets
    return 0 < int(port) < 65536


def _target_groups(entries: Iterable[tuple[str, object, dict[str, str]]]) -> list[dict[str, Any]]:
    """One target group per (host name, address, extra labels) with an address, sorted by host name.

    An entry without an address is left out; an address that is not ``host:port`` is left out with
    a warning."""
    groups: list[dict[str, Any]] = []
    for name, address, labels in sorted(entries, key=lambda e: e[0]):
        if address is None or address == "":
            continue
        if not valid_address(address):
            log.warning("host %s: metrics_address %r is not host:port; left out", name, address)
            continue
        groups.append({"targets": [address], "labels": {"host": name, **{k: v for k, v in labels.items() if v}}})
    return groups


def file_sd_targets(hosts: Iterable[Host]) -> list[dict[str, Any]]:
    """One target group per host that reported a metrics address, sorted by host name.

    Hosts without an address (an agent older than the exporter, or one started without metrics)
    are left out; an address that is not ``host:port`` is left out with a warning.
    """
    return _target_groups((h.name, (h.facts or {}).get("metrics_address"), {}) for h in hosts)


def groups_label(groups: Iterable[str]) -> str:
    """A host's inventory groups as one label value: ``,agents,initiators,`` (sorted, without ``all``
    and ``ungrouped``; separators on both ends, as Prometheus writes list-valued meta labels)."""
    names = sorted(set(groups) - {"all", "ungrouped"})
    return f",{','.join(names)}," if names else ""


def inventory_targets(inventory: Inventory, group: str = "agents") -> list[dict[str, Any]]:
    """The file_sd groups of the inventory's hosts of ``group`` that declare a ``metrics_address``,
    labelled with the host's name and inventory groups (``targets/agents.json``)."""
    return _target_groups((h.name, h.metrics_address, {"groups": groups_label(h.groups)})
                          for h in inventory.group(group))


def inventory_controller_address(inventory: Inventory) -> str | None:
    """The controller's metrics address as the inventory declares it: the ``metrics_address`` of the
    ``controller`` group's host, unless that host is also an agent (a host has one ``metrics_address``,
    and on an agent it is the agent's exporter, as on the one-machine lab)."""
    for h in inventory.group("controller"):
        if "agents" not in h.groups and h.metrics_address:
            return h.metrics_address
    return None


def agent_targets(session: Session) -> list[dict[str, Any]]:
    """The file_sd groups of every registered agent (``targets/agents.json``)."""
    return file_sd_targets(session.scalars(select(Host)).all())


def controller_targets(address: str) -> list[dict[str, Any]]:
    """The file_sd group of the controller (``targets/controller.json``).

    No host label: the controller's series carry the agents' host label themselves.
    """
    if not valid_address(address):
        raise ValueError(f"controller metrics address {address!r} is not host:port")
    return [{"targets": [address], "labels": {}}]


def write_file_sd(path: Path, targets: list[dict[str, Any]]) -> None:
    """Write ``targets`` as a file_sd JSON file, atomically (temporary file in the same directory,
    fsync, rename), creating the directory if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(targets, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
