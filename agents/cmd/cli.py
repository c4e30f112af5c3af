"""``storagelab-agent``: the agent daemon's own command line, for a lab host with the slim install.

The base install (``pip install storagelab``) holds what the agent needs and nothing of the controller
(no typer, SQLAlchemy, Ansible...), so this parser is argparse and imports nothing of ``orchestrator``.
Its options are those of ``labctl agent`` plus the broker options ``labctl`` takes before a command
(``--broker``, ``--broker-password-file``, ``--broker-ca``...), with the same environment variables.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from labcontract import __version__
from labcontract.brokerauth import is_tls, redact_url, with_credentials
from labcontract.errors import ConfigError, LabError
from labcontract.telemetry import DEFAULT_AGENT_METRICS_PORT

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"      # as labctl's (orchestrator.config.DEFAULT_BROKER)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="storagelab-agent", description="Run the storagelab agent daemon on a lab "
                                "host: it runs the controller's steps on this host's declared DUTs.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    b = p.add_argument_group("broker")
    b.add_argument("--broker", default=os.environ.get("LAB_BROKER_URL", DEFAULT_BROKER),
                   help="Redis URL (Celery broker and streams); env LAB_BROKER_URL.")
    b.add_argument("--broker-password-file", type=Path, default=_env_path("LAB_BROKER_PASSWORD_FILE"),
                   help="File holding the broker user's password; env LAB_BROKER_PASSWORD_FILE.")
    b.add_argument("--broker-ca", type=Path, default=_env_path("LAB_BROKER_CA"),
                   help="CA certificate the broker's TLS certificate is checked with (rediss://); env LAB_BROKER_CA.")
    b.add_argument("--broker-cert", type=Path, default=_env_path("LAB_BROKER_CERT"),
                   help="Client certificate for a broker requiring one; env LAB_BROKER_CERT.")
    b.add_argument("--broker-key", type=Path, default=_env_path("LAB_BROKER_KEY"),
                   help="Key of --broker-cert; env LAB_BROKER_KEY.")
    p.add_argument("--dut", action="append", default=[], help="Declared DUT: NAME=PATH or PATH (repeat).")
    p.add_argument("--host", help="Host name (default: hostname).")
    p.add_argument("--state-dir", type=Path, help="Local state (attempts, fio output); default: $LAB_DIR/agent, "
                   "else ~/.storagelab/agent.")
    p.add_argument("--heartbeat", type=float, default=3.0, help="Seconds between heartbeats.")
    p.add_argument("--fio", default="fio", help="fio binary.")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--metrics-port", type=int, default=DEFAULT_AGENT_METRICS_PORT,
                   help="Port of the Prometheus exporter (/metrics, /health); 0: an ephemeral port.")
    p.add_argument("--metrics-bind", help="Address the exporter listens on (default: the host of "
                   "--metrics-advertise, else 127.0.0.1).")
    p.add_argument("--metrics-advertise", help="HOST or HOST:PORT the exporter is reached at, announced to the "
                   "controller (default: hostname:port).")
    p.add_argument("--no-metrics", action="store_true", help="Serve no metrics.")
    p.add_argument("--net-path", action="append", default=[], help="Declared network path NAME=IFACE[@PEER] "
                   "(repeat).")
    p.add_argument("--manage-mtu", action=argparse.BooleanOptionalAction, default=False,
                   help="Network steps set their paths' MTU (else they only check it).")
    p.add_argument("--wipe-ok", action="append", default=[], help="DUT NAME whose filesystem / partition / LVM / "
                   "MD signatures a purge or write may destroy (repeat).")
    p.add_argument("--app-workloads", type=Path, default=None, help="External workload declarations (YAML) that "
                   "suites of kind external may name; see docs/external-workloads.md.")
    p.add_argument("--app-mount-root", type=Path, default=Path("/run/storagelab/apps"),
                   help="Where application steps mount a DUT's filesystem (<root>/<attempt id>; every OS user must "
                   "be able to traverse it: PostgreSQL runs as its own user).")
    p.add_argument("--drive-health-socket", type=Path, default=Path("/run/storagelab/drive-health.sock"),
                   help="The root helper that reads the DUTs' NVMe smart-log / SMART around each fio step "
                   "(deployed by the lab_agent role); without it an agent running as root reads them itself, "
                   "any other leaves them out.")
    p.add_argument("--bmc", type=Path, default=None, help="The host's BMC (YAML: url, user, password_file, ca_file, "
                   "...; docs/power.md): its power is read over Redfish once a second during each fio step, for "
                   "IOPS per watt; without it the host's power is not measured.")
    return p


def broker_url(ns: argparse.Namespace) -> str:
    """The broker URL naming the credential files (read by the client when it connects, never here)."""
    try:
        parts = urlsplit(ns.broker)
    except ValueError:
        raise ConfigError("--broker", "url", "not a URL") from None
    if parts.password:
        print(f"warning: the broker URL holds a password ({redact_url(ns.broker)}): anyone on this machine can "
              "read it in the process list; use --broker-password-file / LAB_BROKER_PASSWORD_FILE", file=sys.stderr)
    if (ns.broker_ca or ns.broker_cert) and not is_tls(parts.scheme):
        raise ConfigError("--broker-ca/--broker-cert", redact_url(ns.broker),
                          "need a rediss:// or rediss+sentinel:// URL")
    if (ns.broker_cert is None) != (ns.broker_key is None):
        raise ConfigError("--broker-cert/--broker-key", "", "go together")
    return with_credentials(ns.broker, password_file=ns.broker_password_file, ca=ns.broker_ca,
                            cert=ns.broker_cert, key=ns.broker_key)


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    from agents.cmd import agent  # after parsing: --help needs nothing more

    lab_dir = Path(os.environ.get("LAB_DIR") or Path.home() / ".storagelab")
    try:
        agent.main(agent.AgentOptions(
            broker_url=broker_url(ns), state_dir=ns.state_dir or lab_dir / "agent", dut_specs=tuple(ns.dut),
            host=ns.host, heartbeat_s=ns.heartbeat, fio_binary=ns.fio, log_level=ns.log_level,
            metrics_port=None if ns.no_metrics else ns.metrics_port, metrics_bind=ns.metrics_bind,
            metrics_advertise=ns.metrics_advertise, net_paths=tuple(ns.net_path), manage_mtu=ns.manage_mtu,
            wipe_ok=tuple(ns.wipe_ok), app_workloads=ns.app_workloads,
            app_mount_root=ns.app_mount_root, drive_health_socket=ns.drive_health_socket,
            bmc=ns.bmc))
    except LabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
