"""Entry of the agent daemon: read the options once, build the agent, run it."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from agents.daemon import DEFAULT_APP_MOUNT_ROOT, Agent, AgentConfig, EventPublisher, LivePublisher, run_agent
from agents.drivehealth import DEFAULT_HELPER_SOCKET, source_for
from agents.exporter import AgentCollector, parse_net_decl
from agents.facts import collect_host_facts, declare_dut
from agents.power import RedfishPower, load_bmc
from agents.runner import StepRunner
from agents.statelock import hold_state_dir
from agents.workloads import Workloads
from agents.workloads import load as load_workloads
from labcontract.brokerauth import check_agent_user
from labcontract.errors import ConfigError
from labcontract.facts import AppWorkloadFact
from labcontract.logs import setup_logging
from labcontract.metrics_http import MetricsServer, split_host_port
from labcontract.protocol import HOST_RE
from labcontract.telemetry import DEFAULT_AGENT_METRICS_PORT
from labcontract.transport import redis_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentOptions:
    broker_url: str
    state_dir: Path
    dut_specs: tuple[str, ...]
    host: str | None = None
    heartbeat_s: float = 3.0
    fio_binary: str = "fio"
    log_level: str = "INFO"
    logfile: str | None = None
    metrics_port: int | None = DEFAULT_AGENT_METRICS_PORT   # None: no exporter; 0: an ephemeral port
    drive_health_socket: Path | None = DEFAULT_HELPER_SOCKET   # the root helper (agents.drivehealth)
    metrics_bind: str | None = None         # None: the host of metrics_advertise, else 127.0.0.1 (metrics_bind_address)
    metrics_advertise: str | None = None    # HOST or HOST:PORT announced in the host facts
    net_paths: tuple[str, ...] = ()         # NAME=IFACE, declared network paths
    wipe_ok: tuple[str, ...] = ()           # DUT names whose on-disk signatures may be destroyed
    manage_mtu: bool = False                # network steps set their paths' MTU (else they check it)
    app_workloads: Path | None = None       # the external workload declarations (YAML; agents.workloads)
    app_mount_root: Path = DEFAULT_APP_MOUNT_ROOT   # application steps mount DUTs under it
    bmc: Path | None = None                 # the host's BMC (YAML; agents.power): its power during each step


def advertised_address(advertise: str | None, bind: str, port: int) -> str:
    """What the agent announces as its metrics address: ``--metrics-advertise`` (the bound port
    appended when it names no port), else the bind address, else this machine's hostname."""
    if advertise:
        host, p = split_host_port(advertise)
        if p is not None:
            return advertise
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if bind not in ("", "0.0.0.0", "::"):
        return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"
    return f"{socket.gethostname()}:{port}"


def metrics_bind_address(bind: str | None, advertise: str | None) -> str:
    """Where the exporter listens: ``--metrics-bind`` when given, else the host it is advertised at, else
    127.0.0.1 (never every address unless asked: ``--metrics-bind 0.0.0.0``)."""
    if bind:
        return bind
    if advertise:
        host, _port = split_host_port(advertise)
        return host.strip("[]") or "127.0.0.1"
    return "127.0.0.1"


def read_mtu_or_none(iface: str) -> int | None:
    return _read_int(f"/sys/class/net/{iface}/mtu")


def read_speed_or_none(iface: str) -> int | None:
    """The link speed in Mbit/s; None when the link is down (EINVAL), unknown (-1) or not reported."""
    speed = _read_int(f"/sys/class/net/{iface}/speed")
    return speed if speed is not None and speed > 0 else None


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text())
    except (OSError, ValueError):
        return None


def main(opts: AgentOptions) -> None:
    host = opts.host or socket.gethostname().split(".")[0]
    setup_logging(opts.log_level, host=host, logfile=opts.logfile)
    if not HOST_RE.fullmatch(host):       # the controller would refuse every event of this host's stream
        raise ConfigError("--host", host, f"not a valid host name (must match {HOST_RE.pattern})")
    check_agent_user(opts.broker_url, host)          # its broker user is agent-<host> (or a shared one)
    # validated here, once: a bad declarations file stops the agent at its start with every problem
    workloads = load_workloads(opts.app_workloads) if opts.app_workloads is not None else Workloads()
    bmc = RedfishPower(*load_bmc(opts.bmc)) if opts.bmc is not None else None
    decls = tuple(parse_net_decl(spec) for spec in opts.net_paths)
    twice = sorted({d.name for d in decls if sum(e.name == d.name for e in decls) > 1})
    if twice:
        raise ConfigError("--net-path", ",".join(twice), "a path name is declared twice")
    decls = tuple(d.model_copy(update={"mtu": read_mtu_or_none(d.iface), "speed_mbit": read_speed_or_none(d.iface)})
                  for d in decls)
    net_paths = tuple((d.name, d.iface) for d in decls)
    facts = collect_host_facts(hostname=host, fio_binary=opts.fio_binary).model_copy(update={"net_paths": decls})
    duts = tuple(declare_dut(spec, facts.block_devices) for spec in opts.dut_specs)
    unknown = sorted(set(opts.wipe_ok) - {d.name for d in duts})
    if unknown:
        raise ConfigError("--wipe-ok", ",".join(unknown), "names no declared DUT (use the NAME of a --dut)")
    duts = tuple(d.model_copy(update={"wipe_ok": d.name in opts.wipe_ok}) for d in duts)
    facts = facts.model_copy(update={"app_workloads": tuple(AppWorkloadFact.model_validate(w)
                                                             for w in workloads.facts())})
    config = AgentConfig(host=host, broker_url=opts.broker_url, state_dir=opts.state_dir, duts=duts,
                         heartbeat_s=opts.heartbeat_s, fio_binary=opts.fio_binary, net_paths=decls,
                         manage_mtu=opts.manage_mtu, workloads=workloads, app_mount_root=opts.app_mount_root)
    lock = hold_state_dir(opts.state_dir)    # noqa: F841  (held until the process ends)
    client = redis_client(opts.broker_url)
    publisher = EventPublisher(client, host)
    runner = StepRunner(opts.state_dir, opts.fio_binary)
    runner.health = source_for(opts.drive_health_socket)
    runner.power = bmc
    agent = Agent(config=config, facts=facts, runner=runner, publish=publisher.send,
                  publish_live=LivePublisher(client, host).send)
    runner.on_exit = agent.wake
    server = None
    if opts.metrics_port is not None:
        collector = AgentCollector(agent, net_paths)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        bind = metrics_bind_address(opts.metrics_bind, opts.metrics_advertise)
        server = MetricsServer(registry, collector.health, bind=bind, port=opts.metrics_port, name="agent-metrics")
        address = advertised_address(opts.metrics_advertise, bind, server.port)
        agent.facts = facts.model_copy(update={"metrics_address": address})
        server.start()
        log.info("metrics on %s (advertised as %s)", server.address, address)
    log.info("agent %s starting: %d DUT(s): %s; fio %s; external workloads: %s", host, len(duts),
             ", ".join(f"{d.name}={d.path}" for d in duts) or "none", facts.fio_version,
             ", ".join(workloads.names) or "none")
    log.info("drive health around each step: %s", runner.health.name if runner.health else
             f"not read (no root helper at {opts.drive_health_socket}, not root)")
    log.info("host power during each step: %s", bmc.name if bmc else "not measured (no --bmc declared)")
    try:
        run_agent(agent, opts.broker_url, loglevel=opts.log_level)
    finally:
        if server is not None:
            server.close()
