"""Entry of the agent daemon: read the options once, build the agent, run it."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from agents.daemon import Agent, AgentConfig, EventPublisher, run_agent
from agents.facts import collect_host_facts, declare_dut
from agents.runner import FioRunner
from labcontract.logs import setup_logging
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


def main(opts: AgentOptions) -> None:
    host = opts.host or socket.gethostname().split(".")[0]
    setup_logging(opts.log_level, host=host, logfile=opts.logfile)
    facts = collect_host_facts(hostname=host, fio_binary=opts.fio_binary)
    duts = tuple(declare_dut(spec, facts.block_devices) for spec in opts.dut_specs)
    config = AgentConfig(host=host, broker_url=opts.broker_url, state_dir=opts.state_dir, duts=duts,
                         heartbeat_s=opts.heartbeat_s, fio_binary=opts.fio_binary)
    publisher = EventPublisher(redis_client(opts.broker_url))
    runner = FioRunner(opts.state_dir, opts.fio_binary)
    agent = Agent(config=config, facts=facts, runner=runner, publish=publisher.send)
    runner.on_exit = agent.wake
    log.info("agent %s starting: %d DUT(s): %s; fio %s", host, len(duts),
             ", ".join(f"{d.name}={d.path}" for d in duts) or "none", facts.fio_version)
    run_agent(agent, opts.broker_url, loglevel=opts.log_level)
