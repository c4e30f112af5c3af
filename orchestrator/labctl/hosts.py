"""``labctl hosts``: the lab's hosts, their health and quarantine, and ad-hoc work on them."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labcontract.errors import InputError, Problem
from orchestrator.labctl.common import State, command_group, fail, fails_cleanly, out
from orchestrator.labctl.fleet import (
    DEFAULT_JOURNAL_UNIT,
    DEFAULT_STATE_DIR,
    FleetHost,
    HostResult,
    collect_logs,
    hosts_from_inventory,
    parse_host_specs,
    run_on_hosts,
)
from orchestrator.labctl.groups import HELP

if TYPE_CHECKING:
    from rich.table import Table

hosts_app = command_group(help=HELP["hosts"], invoke_without_command=True)


@hosts_app.callback()
@fails_cleanly
def hosts(ctx: typer.Context) -> None:
    """Registered hosts, their state and declared DUTs."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.labctl.backend import backend

    backend().show_hosts(out)


# --- ad-hoc work over SSH (orchestrator.labctl.fleet) ------------------------------------------------------

HostSpecs = Annotated[list[str] | None, typer.Option(
    "--host", help="A host to reach: NAME=user@address[:port] (repeat).")]
Identity = Annotated[Path | None, typer.Option(help="SSH private key (default: your keys and ssh-agent).")]
KnownHosts = Annotated[Path | None, typer.Option(help="known_hosts file; given, host keys are checked strictly.")]
StateDir = Annotated[str | None, typer.Option(help="The agents' --state-dir on the hosts ({host}: the host's name; "
                                                   f"default: the inventory's, else {DEFAULT_STATE_DIR}).")]
Parallel = Annotated[int, typer.Option(min=1, help="Hosts worked on at once.")]
Inventory = Annotated[Path | None, typer.Option(help="Lab inventory directory (inventory/<lab>): its hosts "
                                                      "of --group, reached as Ansible reaches them.")]
Group = Annotated[str, typer.Option(help="Inventory group worked on.")]


def _fleet(specs: list[str] | None, inventory: Path | None, group: str, identity: Path | None,
           known_hosts: Path | None, **where: Any) -> list[FleetHost]:
    """The hosts of --inventory (its --group) and of every --host, each once."""
    if not specs and inventory is None:
        raise InputError("--host", [Problem("", "no hosts: give --host NAME=user@address[:port] (repeat) "
                                                "or --inventory DIR")])
    given = {"key": identity, "known_hosts": known_hosts, **where}
    defaults = {k: v for k, v in given.items() if v is not None or k == "journal_unit"}
    hosts = hosts_from_inventory(inventory, group, **defaults) if inventory is not None else []
    named = parse_host_specs(specs or [], **defaults)
    clash = sorted({h.name for h in hosts} & {h.name for h in named})
    if clash:
        raise InputError("--host", [Problem(repr(n), f"host {n!r} is also in {inventory}") for n in clash])
    return hosts + named


@hosts_app.command("exec")
@fails_cleanly
def hosts_exec(
    command: Annotated[str, typer.Argument(help="Shell command line run on every host.")],
    host: HostSpecs = None,
    inventory: Inventory = None,
    group: Group = "agents",
    parallel: Parallel = 10,
    timeout: Annotated[float, typer.Option(help="Seconds the command may take on each host.")] = 60.0,
    identity: Identity = None,
    known_hosts: KnownHosts = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Run a command on many hosts over SSH at once; exit 1 if it failed on any."""
    hosts = _fleet(host, inventory, group, identity, known_hosts)
    results = run_on_hosts(hosts, command, timeout=timeout, parallel=parallel)
    if as_json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        out.print(_results_table(results))
    for r in results:
        if r.error:
            fail(r.error)
        elif r.exit_code != 0:
            fail(f"{r.host}: exit {r.exit_code}")
    if not all(r.ok for r in results):
        raise typer.Exit(1)


def _results_table(results: list[HostResult], lines: int = 3) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table("host", "exit", "seconds", "output")
    for r in results:
        text = r.error or "\n".join((r.stdout.splitlines() + r.stderr.splitlines())[:lines])
        exit_code = "-" if r.exit_code is None else str(r.exit_code)
        table.add_row(r.host, Text(exit_code, style="" if r.ok else "red"), f"{r.seconds:.2f}", Text(text))
    return table


@hosts_app.command("collect-logs")
@fails_cleanly
def hosts_collect_logs(
    run: Annotated[str, typer.Argument(help="A run id (a prefix or 'last' is looked up in the store).")],
    host: HostSpecs = None,
    inventory: Inventory = None,
    group: Group = "agents",
    state_dir: StateDir = None,
    log_path: Annotated[str | None, typer.Option(help="The agents' log file ({host}: the host's name).")] = None,
    journal_unit: Annotated[str, typer.Option(help="systemd unit whose journal is collected ('' for none).")]
    = DEFAULT_JOURNAL_UNIT,
    parallel: Parallel = 10,
    identity: Identity = None,
    known_hosts: KnownHosts = None,
) -> None:
    """Gather the run's attempt directories (fio outputs) and the agent logs from the hosts into
    LAB_DIR/artifacts/collected/RUN/HOST/; print the manifest. Exit 1 if a host gave nothing."""
    hosts = _fleet(host, inventory, group, identity, known_hosts, state_dir=state_dir, log_path=log_path,
                   journal_unit=journal_unit or None)
    run_id = _run_id(run)
    manifest = collect_logs(run_id, hosts, State.config.artifact_dir / "collected" / run_id, parallel=parallel)
    from rich.table import Table
    from rich.text import Text

    table = Table("host", "file", "bytes", "sha256")
    for f in manifest.files:
        table.add_row(f.host, Text(f.local_path), str(f.size), f.sha256)
    out.print(table)
    for note in manifest.notes:
        out.print(f"note: {note}", markup=False)
    out.print(f"{len(manifest.files)} files in {manifest.dest_dir} (manifest.json)", markup=False)
    for error in manifest.failures.values():
        fail(error)
    if manifest.failures:
        raise typer.Exit(1)


def _run_id(ref: str) -> str:
    """A full run id as given (no store needed); a prefix or 'last' through the store."""
    if re.fullmatch(r"r\d{8}-[0-9a-f]{6}", ref):
        return ref
    from orchestrator.labctl.backend import backend

    return backend().resolve(ref)


@hosts_app.command("release")
@fails_cleanly
def release(host: Annotated[str, typer.Argument(help="The quarantined host.")],
            device: Annotated[str | None, typer.Option(help="Release only this DUT (name or path); "
                                                            "default: the host and all its DUTs.")] = None) -> None:
    """Return a quarantined host or DUT to scheduling (its failure counts start again from zero)."""
    from orchestrator.labctl.backend import backend

    backend().release(host, device)
    print(f"released {host}{':' + device if device else ''}")
