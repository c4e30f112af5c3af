"""``labctl lab up``: the embedded lab and its web service on this machine until Ctrl-C (orchestrator/labs/up.py)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from labcontract.errors import LabError

lab_app = typer.Typer(help="The embedded one-machine lab with its web service.", no_args_is_help=True)


@lab_app.callback()
def lab() -> None:
    """The embedded one-machine lab (redis-server, controller, an agent, loop DUTs) with its web service."""


@lab_app.command("up")
def up(
    port: Annotated[int | None, typer.Option(help="Port of the web service on 127.0.0.1 (default: a free one).",
                                             min=1, max=65535)] = None,
    duts: Annotated[int, typer.Option(help="DUTs of the agent (loop devices when run as root, else files).",
                                      min=1, max=16)] = 2,
    size_mib: Annotated[int, typer.Option(help="Size of each DUT.", min=16, max=65536)] = 256,
    lab_dir: Annotated[Path | None, typer.Option(help="The lab's directory: store, broker data, secrets, logs "
                                                      "(default: a new temporary one).")] = None,
) -> None:
    """Start the lab and its web service, print the URL and an admin token, and keep everything running until
    Ctrl-C (or SIGTERM); then stop every process of it."""
    from orchestrator.labs.up import StopSignals, serve_until_stopped, start_lab_up

    root = (lab_dir or Path(tempfile.mkdtemp(prefix="storagelab-lab-"))).resolve()
    signals = StopSignals()
    code = 1
    try:
        try:
            up_ = start_lab_up(root, port=port, duts=duts, size_mib=size_mib,
                               progress=lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            print("interrupted while starting; stopped", file=sys.stderr)
            raise typer.Exit(130) from None
        except LabError as e:
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(1) from None
        signals.starting = False
        try:
            print(f"web service: {up_.url}", flush=True)
            print(f"admin token: {up_.token}", flush=True)
            print(f"token file: {up_.token_file}  (labctl --api {up_.url} --token-file {up_.token_file} runs)",
                  flush=True)
            print(f"lab directory: {root} (logs in {root / 'logs'}); Ctrl-C stops the lab", flush=True)
            code = serve_until_stopped(up_, signals.stop, lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            up_.lab.stop()
            print("lab stopped (web service, agent, controller, redis-server, DUTs)", flush=True)
    finally:
        signals.restore()
    raise typer.Exit(code)
