"""Linux platform facts (DMI, CPU sockets, PCI storage controllers, block drivers): moved to
:mod:`agents.platform.linux_hw` with the rest of the Linux platform layer; re-exported here for the callers
and tests that import them from their old place."""

from __future__ import annotations

from agents.platform.linux_hw import DMI_FIELDS, block_driver, cpu_sockets, dmi_facts, storage_controllers

__all__ = ["DMI_FIELDS", "block_driver", "cpu_sockets", "dmi_facts", "storage_controllers"]
