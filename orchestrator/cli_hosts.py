"""``labctl hosts``: the lab's hosts, their health and quarantine, and ad-hoc work on them."""

from __future__ import annotations

import time

import typer
from rich.table import Table

from orchestrator.cli_common import fails_cleanly, out, sessions_or_fail
from orchestrator.config import ControllerTuning

hosts_app = typer.Typer(help="Registered hosts: state, DUTs, quarantine (no subcommand: list them).",
                        invoke_without_command=True)


@hosts_app.callback()
@fails_cleanly
def hosts(ctx: typer.Context) -> None:
    """Registered hosts, their state and declared DUTs."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.queries import list_hosts

    table = Table("host", "state", "last heartbeat", "CPU", "mem GiB", "OS", "fio", "DUTs")
    with sessions_or_fail()() as s:
        for h in list_hosts(s):
            age = time.time() - (h.last_seen or 0)
            f = h.facts
            duts = ", ".join(f"{d.name}={d.path}" for d in h.devices if d.declared)
            table.add_row(h.name, "up" if age <= ControllerTuning().heartbeat_timeout_s else "DOWN",
                          f"{age:.0f}s ago", f"{f.get('cpu_model')} ({f.get('cpu_cores')}c)",
                          f"{(f.get('memory_bytes') or 0) / 2**30:.1f}", str(f.get("os")),
                          str(f.get("fio_version")), duts)
    out.print(table)
