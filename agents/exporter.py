"""The agent's Prometheus exporter: every agent metric of :mod:`labcontract.telemetry`.

Series are computed at each scrape from what the agent already holds: the live status of its
running attempts (refreshed each second by the monitor thread, :mod:`agents.live`), its health
(last heartbeat, last error, running processes) and the byte counters of the declared network
paths (``/sys/class/net/<iface>/statistics``). The series of a step exist while it runs.

Several steps can run on one host at once (different devices, different runs). Series labelled
by device, and ``lab_step_info`` (labelled by run and step), have one series per step;
``lab_step_phase`` is 1 for every phase that runs; the host-only gauges (elapsed, expected,
precondition round) follow the step that started first (the precondition round: the highest
round running).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.registry import Collector

from agents.kinds import base as kinds
from labcontract import telemetry as T
from labcontract.errors import ConfigError
from labcontract.facts import NetPathDecl
from labcontract.live import LiveStatus
from labcontract.metrics_http import Family, counter, gauge, info

if TYPE_CHECKING:
    from agents.daemon import Agent

__all__ = ["PHASES", "AgentCollector", "parse_net_decl", "parse_net_path"]

PHASES = kinds.exported_phases()     # each agent kind's (agents.kinds.base.StepKind.exported_phases)
SYS_CLASS_NET = Path("/sys/class/net")
NS = 1e-9


def parse_net_path(spec: str) -> tuple[str, str]:
    """``NAME=IFACE[@PEER]`` (a declared network path, e.g. ``a=ens1f0@10.30.1.20``) -> ``(NAME, IFACE)``."""
    decl = parse_net_decl(spec)
    return decl.name, decl.iface


def parse_net_decl(spec: str) -> NetPathDecl:
    """``NAME=IFACE[@PEER]``: the path's name (as suites name it), its interface, and the address of
    the far end (on an initiator: the target's portal on that path)."""
    name, sep, rest = spec.partition("=")
    iface, _at, peer = rest.partition("@")
    name, iface, peer = name.strip(), iface.strip(), peer.strip()
    if not sep or not name or not iface or "/" in iface:
        raise ConfigError("--net-path", spec, "expected NAME=IFACE[@PEER] (an interface of /sys/class/net)")
    if peer:
        try:
            ipaddress.ip_address(peer)
        except ValueError:
            raise ConfigError("--net-path", spec, f"{peer!r} is not an IP address") from None
    return NetPathDecl(name=name, iface=iface, peer=peer or None)


def _read_counter(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class AgentCollector(Collector):
    """A custom collector over one :class:`~agents.daemon.Agent`; register it in a registry of its own."""

    def __init__(self, agent: Agent, net_paths: Sequence[tuple[str, str]] = (), *,
                 sys_class_net: Path = SYS_CLASS_NET, clock: Callable[[], float] = time.time) -> None:
        self.agent = agent
        self.net_paths = tuple(net_paths)
        self.sys_class_net = sys_class_net
        self.clock = clock

    # --- health -----------------------------------------------------------------------------

    def heartbeat_age(self, now: float | None = None) -> float:
        """Seconds since the last heartbeat the agent published (since its start when none yet)."""
        now = self.clock() if now is None else now
        last = self.agent.last_heartbeat_at or self.agent.started_at
        return max(now - last, 0.0)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """``/health``: healthy while the last heartbeat is at most 3 heartbeat intervals old."""
        age = self.heartbeat_age()
        limit = 3 * self.agent.config.heartbeat_s
        healthy = age <= limit
        return healthy, {"up": 1, "healthy": healthy, "host": self.agent.host,
                         "heartbeat_age_s": round(age, 3), "heartbeat_limit_s": limit,
                         "running": list(self.agent.running_ids),
                         "last_error_at": self.agent.last_error_at or None}

    # --- collect ------------------------------------------------------------------------------

    def collect(self) -> Iterator[Family]:
        host = self.agent.host
        now = self.clock()
        yield from self._step_families(host, tuple(self.agent.live), now)
        yield from self._app_families(host, tuple(self.agent.live))
        up, age, running, err = (gauge(m) for m in (T.AGENT_UP, T.AGENT_HEARTBEAT_AGE, T.AGENT_FIO_RUNNING,
                                                     T.AGENT_LAST_ERROR))
        up.add_metric([host], 1)
        age.add_metric([host], self.heartbeat_age(now))
        running.add_metric([host], len(self.agent.running_ids))
        err.add_metric([host], self.agent.last_error_at)
        yield from (up, age, running, err, self._net_family(host))

    def _step_families(self, host: str, live: Iterable[LiveStatus], now: float) -> Iterator[Family]:
        ios, nbytes = counter(T.FIO_IOS), counter(T.FIO_BYTES)
        lat = {"mean": gauge(T.FIO_LAT_MEAN), "max": gauge(T.FIO_LAT_MAX), "p99": gauge(T.FIO_LAT_P99)}
        threads, iodepth = gauge(T.FIO_THREADS), gauge(T.FIO_IODEPTH)
        phase, rnd = gauge(T.STEP_PHASE), gauge(T.PRECONDITION_ROUND)
        elapsed, expected = gauge(T.STEP_ELAPSED), gauge(T.STEP_EXPECTED)
        step_info = info(T.STEP_INFO)
        steps = sorted(live, key=lambda s: (s.started_at, s.attempt_id))
        seen_devices: set[str] = set()
        for s in steps:
            for dev in s.devices:
                if dev.device in seen_devices:     # one step per device; never a duplicate series
                    continue
                seen_devices.add(dev.device)
                threads.add_metric([host, dev.device], dev.threads)
                iodepth.add_metric([host, dev.device], dev.iodepth)
                for direction, d in (("read", dev.read), ("write", dev.write)):
                    labels = [host, dev.device, direction]
                    ios.add_metric(labels, d.ios_total)
                    nbytes.add_metric(labels, d.bytes_total)
                    for key, value in (("mean", d.lat_mean_ns), ("max", d.lat_max_ns), ("p99", d.lat_p99_ns)):
                        if value is not None:
                            lat[key].add_metric(labels, value * NS)
            step_info.add_metric([host, s.run_id, s.step_name, s.suite, s.phase], {})
        if steps:
            running = {s.phase for s in steps}
            for name in (*PHASES, *sorted(running - set(PHASES))):     # net / app: only while one runs
                phase.add_metric([host, name], 1 if name in running else 0)
            first = steps[0]
            elapsed.add_metric([host], max(now - first.started_at, 0.0))
            expected.add_metric([host], first.expected_s)
            rounds = [s.round for s in steps if s.phase == "precondition"]
            if rounds:
                rnd.add_metric([host], max(rounds))
        yield from (ios, nbytes, lat["mean"], lat["max"], lat["p99"], threads, iodepth, phase, rnd, elapsed,
                    expected, step_info)

    def _app_families(self, host: str, live: Iterable[LiveStatus]) -> Iterator[Family]:
        """Application steps' last second (TPS, QPS, latency, errors, point) on their DUT; none without figures."""
        fams = {m.name: gauge(m) for m in T.APP_METRICS}
        seen: set[str] = set()
        for s in sorted(live, key=lambda s: (s.started_at, s.attempt_id)):
            a = s.app
            if a is None or not a.device or a.device in seen:
                continue
            seen.add(a.device)
            labels = [host, a.device]
            figures = ((T.APP_TPS, a.tps, 1.0), (T.APP_QPS, a.qps, 1.0), (T.APP_LAT_AVG, a.lat_avg_ms, 1e-3),
                       (T.APP_LAT_P95, a.lat_p95_ms, 1e-3), (T.APP_LAT_P99, a.lat_p99_ms, 1e-3),
                       (T.APP_ERRORS, a.errors_per_s, 1.0), (T.APP_POINT, a.point, 1.0))
            for metric, value, scale in figures:
                if value is not None:
                    fams[metric.name].add_metric(labels, value * scale)
        yield from fams.values()

    def _net_family(self, host: str) -> Family:
        fam = counter(T.NET_PATH_BYTES)
        for name, iface in self.net_paths:
            stats = self.sys_class_net / iface / "statistics"
            for direction in ("rx", "tx"):
                value = _read_counter(stats / f"{direction}_bytes")
                if value is not None:          # a missing interface has no series (not a zero)
                    fam.add_metric([host, name, iface, direction], value)
        return fam
