"""``labctl``'s entry (the console script): the client commands of :mod:`orchestrator.labctl.cli` plus the commands
that run a daemon or a lab on this machine (``serve``, ``controller``, ``agent``, ``demo``, ``lab up``). They live
here, with the daemons' own entries, so the labctl package (a client of the lab) never imports the controller, the
web service, the agent or the test labs. Parses options, builds, calls; nothing else."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cmd.notifyopts import NotifyChats, NotifyFiles, NotifyWebhooks, given_sinks
from orchestrator.config import ControllerTuning
from orchestrator.labctl.cli import app
from orchestrator.labctl.common import State, fails_cleanly, out
from orchestrator.labctl.groups import add_group
from orchestrator.labctl.reach import guard

add_group(app, "lab", "orchestrator.cmd.labcmd:lab_app")


@app.command()
@fails_cleanly
def serve(
    bind: Annotated[str, typer.Option(help="Address to listen on (behind a TLS proxy: keep 127.0.0.1).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8080,
    secret_file: Annotated[Path | None, typer.Option(help="HMAC key of the session cookies (made 0600 if "
                                                          "missing; default: LAB_DIR/web/session.key).")] = None,
    cookie_secure: Annotated[bool, typer.Option(help="Send the session cookie over HTTPS only.")] = False,
    log_level: Annotated[str, typer.Option()] = "INFO",
) -> None:
    """Run the web service (REST API and pages) on the store and the broker; --broker names the user web."""
    from orchestrator.cmd.web import config_from, main

    main(config_from(State.config, bind=bind, port=port, secret_file=secret_file, cookie_secure=cookie_secure),
         log_level=log_level)


@app.command()
@fails_cleanly
def controller(log_level: Annotated[str, typer.Option()] = "INFO",
               heartbeat_timeout: Annotated[float, typer.Option(help="Seconds of silence before a host "
                                                                    "is down.")] = 10.0,
               net_start_lead: Annotated[float, typer.Option(
                   min=0.5, max=60.0, help="Seconds between a network cell's dispatch and the moment every host "
                                           "starts it (longer on slow hosts: each must be ready by then).")] = 1.5,
               metrics_port: Annotated[int, typer.Option(help="Port of the Prometheus exporter (/metrics, "
                                                              "/health); 0: an ephemeral port, logged.")]
               = 9465,
               metrics_bind: Annotated[str, typer.Option(help="Address the exporter listens on (0.0.0.0: every "
                                                              "address; expose it only to Prometheus).")]
               = "127.0.0.1",
               no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Serve no metrics.")] = False,
               notify_webhook: Annotated[list[str] | None, typer.Option(
                   help="POST a JSON body here when a run ends (repeat).")] = None,
               notify_file: Annotated[list[Path] | None, typer.Option(
                   help="Append a JSON line here when a run ends (repeat).")] = None,
               notify_chat: Annotated[list[str] | None, typer.Option(
                   help="POST {\"text\": a line a person reads} to a chat's incoming webhook (Slack, Mattermost, "
                        "Google Chat, a Teams connector) when a run ends (repeat).")] = None,
               no_lab_notify: Annotated[bool, typer.Option(
                   "--no-lab-notify", help="Ignore the sinks of the lab file's notify table (only the --notify-* "
                                           "options' are delivered to).")] = False,
               inventory: Annotated[Path | None, typer.Option(
                   help="The lab's Ansible inventory directory: suites with phases.provision purge, set OP modes "
                        "and record DUT facts through playbooks/.")] = None,
               no_standby: Annotated[bool, typer.Option(
                   "--no-standby", help="When another controller holds the lease, exit (code 2) instead of "
                                        "standing by to take over when it stops.")] = False,
               ) -> None:
    """Run the controller daemon (the store's only writer; one at a time: the others stand by). It delivers the end
    of each run to the --notify-* sinks and to those of the lab file's notify table."""
    from orchestrator.cmd.controller import main
    from orchestrator.labfile import Notify

    lab = State.lab

    main(State.config, ControllerTuning(heartbeat_timeout_s=heartbeat_timeout, net_start_lead_s=net_start_lead),
         log_level=log_level,
         metrics_port=None if no_metrics else metrics_port, metrics_bind=metrics_bind,
         notify_webhooks=tuple(notify_webhook or ()), notify_files=tuple(notify_file or ()),
         notify_chats=tuple(notify_chat or ()), inventory=inventory,
         standby=not no_standby, lab_notify=Notify() if lab is None or no_lab_notify else lab.notify,
         lab_file=None if lab is None else lab.path)


@app.command()
@fails_cleanly
def agent(
    dut: Annotated[list[str] | None, typer.Option(help="Declared DUT: NAME=PATH or PATH (repeat).")] = None,
    host: Annotated[str | None, typer.Option(help="Host name (default: hostname).")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="Local state (attempts, fio output).")] = None,
    heartbeat: Annotated[float, typer.Option(help="Seconds between heartbeats.")] = 3.0,
    fio: Annotated[str, typer.Option(help="fio binary.")] = "fio",
    log_level: Annotated[str, typer.Option()] = "INFO",
    metrics_port: Annotated[int, typer.Option(help="Port of the Prometheus exporter (/metrics, /health); "
                                                   "0: an ephemeral port.")] = 9464,
    metrics_bind: Annotated[str | None, typer.Option(help="Address the exporter listens on (default: the host of "
                                                          "--metrics-advertise, else 127.0.0.1).")] = None,
    metrics_advertise: Annotated[str | None, typer.Option(help="HOST or HOST:PORT the exporter is reached at, "
                                                               "announced to the controller (default: "
                                                               "hostname:port).")] = None,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Serve no metrics.")] = False,
    net_path: Annotated[list[str] | None, typer.Option(help="Declared network path NAME=IFACE[@PEER]: its "
                                                            "interface bytes are exported, network steps name "
                                                            "it; PEER is the target's portal on that path "
                                                            "(repeat).")] = None,
    manage_mtu: Annotated[bool, typer.Option(help="Network steps set their paths' MTU (else they only check "
                                                  "it; Ansible sets it on lab hosts).")] = False,
    wipe_ok: Annotated[list[str] | None, typer.Option(help="DUT NAME whose filesystem / partition / LVM / MD "
                                                           "signatures a purge or write may destroy (repeat).")]
    = None,
    app_workloads: Annotated[Path | None, typer.Option(help="External workload declarations (YAML) that suites of "
                                                            "kind external may name (docs/external-workloads.md).")]
    = None,
    app_mount_root: Annotated[Path, typer.Option(help="Where application steps mount a DUT's filesystem "
                                                      "(<root>/<attempt id>; traversable by every OS user).")]
    = Path("/run/storagelab/apps"),
    bmc: Annotated[Path | None, typer.Option(help="The host's BMC (YAML: url, user, password_file, ca_file, ...; "
                                                  "docs/power.md): its power is read over Redfish once a second "
                                                  "during each fio step, for IOPS per watt.")] = None,
) -> None:
    """Run the agent daemon on a lab host."""
    from agents.cmd.agent import AgentOptions, main

    main(AgentOptions(broker_url=State.config.broker_url,
                      state_dir=state_dir or State.config.lab_dir / "agent", dut_specs=tuple(dut or ()),
                      host=host, heartbeat_s=heartbeat, fio_binary=fio, log_level=log_level,
                      metrics_port=None if no_metrics else metrics_port, metrics_bind=metrics_bind,
                      metrics_advertise=metrics_advertise, net_paths=tuple(net_path or ()),
                      manage_mtu=manage_mtu, wipe_ok=tuple(wipe_ok or ()), app_workloads=app_workloads,
                      app_mount_root=app_mount_root, bmc=bmc))


@app.command()
@fails_cleanly
def demo(
    runtime: Annotated[int, typer.Option(help="Seconds per workload.")] = 3,
    size_mib: Annotated[int, typer.Option(help="Size of the file-backed DUT.")] = 512,
    reuse_broker: Annotated[bool, typer.Option(help="Use --broker if it answers instead of starting "
                                                    "a redis-server.")] = False,
    keep_dut: Annotated[bool, typer.Option("--keep-dut", help="Keep the DUT's image file when the demo ends "
                                                              "(removed by default: it is --size-mib large).")]
    = False,
    notify_webhook: NotifyWebhooks = None,
    notify_file: NotifyFiles = None,
    notify_chat: NotifyChats = None,
) -> None:
    """Start a one-machine lab (redis, controller, agent, file-backed DUT) and run a short suite; its end goes to the
    lab file's notify-table sinks and the --notify-* ones (written into it)."""
    from orchestrator.labs.demo import run_demo

    raise typer.Exit(run_demo(State.config, out, runtime=runtime, size_mib=size_mib,
                              reuse_broker=reuse_broker, keep_dut=keep_dut,
                              notify=given_sinks(notify_webhook, notify_file, notify_chat)))


def _api_url() -> str | None:
    from orchestrator.labctl.apicmds import ApiOptions

    return ApiOptions.url


guard(app, _api_url)      # every command that cannot go through --api refuses it with the reason (labctl/reach.py)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app(prog_name="labctl")


if __name__ == "__main__":
    main()
