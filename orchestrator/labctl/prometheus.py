"""``labctl prometheus``: Prometheus' file_sd targets from the registered agents or an inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.labctl.common import command_group, fails_cleanly
from orchestrator.labctl.common import sessions_or_fail as _sessions
from orchestrator.labctl.groups import HELP

prometheus_app = command_group(help=HELP["prometheus"], no_args_is_help=True)


@prometheus_app.command("targets")
@fails_cleanly
def prometheus_targets(
    out_dir: Annotated[Path, typer.Option("--dir", help="file_sd directory (deploy/prometheus/targets).")]
    = Path("deploy/prometheus/targets"),
    controller: Annotated[str | None, typer.Option(help="Controller metrics address host:port.")] = None,
    inventory: Annotated[Path | None, typer.Option(help="Lab inventory directory: its agents' metrics_address "
                                                        "(and the controller's) instead of the registered "
                                                        "agents; the store is not read.")] = None,
) -> None:
    """Write Prometheus file_sd targets: every registered agent's metrics address, or every agent of an
    inventory (labelled host and groups), and the controller's."""
    from orchestrator.labctl.promtargets import (
        agent_targets,
        controller_targets,
        inventory_controller_address,
        inventory_targets,
        write_file_sd,
    )

    if inventory is not None:
        from labcontract.inventory import load_inventory

        inv = load_inventory(inventory)
        agents, source = inventory_targets(inv), f"from the inventory {inventory}"
        controller = controller or inventory_controller_address(inv)
    else:
        with _sessions()() as s:
            agents, source = agent_targets(s), "registered"
    write_file_sd(out_dir / "agents.json", agents)
    print(f"{out_dir / 'agents.json'}: {len(agents)} agent target(s) {source}")
    if controller:
        write_file_sd(out_dir / "controller.json", controller_targets(controller))
        print(f"{out_dir / 'controller.json'}: {controller}")
