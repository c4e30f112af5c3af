"""``labctl lab up``: the embedded lab and its web service on this machine until Ctrl-C (orchestrator/labs/up.py)."""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from labcontract.errors import LabError
from orchestrator.cmd.notifyopts import NotifyChats, NotifyFiles, NotifyWebhooks, given_sinks
from orchestrator.labctl.common import command_group
from orchestrator.labctl.groups import HELP
from orchestrator.labfile import Notify

lab_app = command_group(help=HELP["lab"], no_args_is_help=True)


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
    vms: Annotated[int | None, typer.Option(help="Instead: a lab of this many virtual hosts (QEMU, as root), the "
                                                 "controller host and N-1 agent hosts with NVMe controllers, to "
                                                 "deploy with site.yml (docs/vmlab.md). Run from the checkout's "
                                                 "root.", min=2, max=8)] = None,
    vm_cache: Annotated[Path, typer.Option(help="Where the guest image is cached (with --vms).")] = (
        Path.home() / ".cache" / "storagelab" / "vmlab"),
    notify_webhook: NotifyWebhooks = None,
    notify_file: NotifyFiles = None,
    notify_chat: NotifyChats = None,
) -> None:
    """Start the lab and its web service, print the URL and an admin token, and keep everything running until
    Ctrl-C (or SIGTERM); then stop every process of it. Its controller delivers the end of each run to the
    --notify-* sinks, written into the lab file's notify table with those it had. With --vms N: boot N virtual hosts
    instead and print the inventory and the command that deploys the lab onto them."""
    from orchestrator.labs.up import StopSignals, serve_until_stopped, start_lab_up

    root = (lab_dir or Path(tempfile.mkdtemp(prefix="storagelab-lab-"))).resolve()
    if vms is not None:
        if notify_webhook or notify_file or notify_chat:
            print("error: --notify-* is not for --vms: the VM lab's controller is deployed by site.yml (its "
                  "lab_controller_args, or a [notify] table in its LAB_DIR/lab.toml)", file=sys.stderr)
            raise typer.Exit(2)
        raise typer.Exit(_vms_up(root, vms, vm_cache.resolve()))
    signals = StopSignals()
    code = 1
    try:
        try:
            up_ = start_lab_up(root, port=port, duts=duts, size_mib=size_mib,
                               notify=given_sinks(notify_webhook, notify_file, notify_chat),
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
            lab_file = up_.lab_file
            if up_.notify:
                print(f"notifications: {notify_summary(up_.notify)} (the lab file's [notify]; labctl notifications "
                      "lists their state)", flush=True)
            print(f"lab directory: {root} (logs in {root / 'logs'}); Ctrl-C stops the lab", flush=True)
            print(f"labctl with this lab: LAB_DIR={root} labctl runs  (its lab file: {lab_file})", flush=True)
            code = serve_until_stopped(up_, signals.stop, lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            up_.lab.stop()
            print("lab stopped (web service, agent, controller, redis-server, DUTs)", flush=True)
    finally:
        signals.restore()
    raise typer.Exit(code)


def notify_summary(notify: Notify) -> str:
    """The sinks named without a secret: a file's path, a webhook's scheme and host (its URL may hold a token)."""
    from orchestrator.controller.notify import Notifier

    sinks = Notifier(list(notify.webhook), list(notify.file), chats=list(notify.chat)).sinks()
    return ", ".join(s.label for s in sinks)


def _vms_up(root: Path, n: int, cache: Path) -> int:
    from orchestrator.labs.up import StopSignals
    from orchestrator.labs.vmlab.up import serve_vms_until_stopped, start_vm_lab

    checkout = Path.cwd()
    signals = StopSignals()
    try:
        try:
            up_ = start_vm_lab(root, checkout, n, cache, progress=lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            print("interrupted while starting; stopped", file=sys.stderr)
            return 130
        except LabError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        signals.starting = False
        try:
            for name, vm in up_.lab.vms.items():
                print(f"{name}: {vm.spec.address} (booted in {up_.boots.get(name, 0):.0f} s)  "
                      f"ssh: {shlex.join(vm.ssh_argv('')[:-1])}", flush=True)
            print(f"inventory: {up_.inventory}", flush=True)
            print(f"deploy: {up_.deploy_command(checkout)}", flush=True)
            print(f"lab directory: {root}; Ctrl-C stops the VMs", flush=True)
            return serve_vms_until_stopped(up_, signals.stop, lambda line: print(line, file=sys.stderr, flush=True))
        finally:
            up_.lab.cleanup()
            print(f"VM lab stopped ({len(up_.lab.vms)} VMs, their disks removed; the image stays in {cache})",
                  flush=True)
    finally:
        signals.restore()

