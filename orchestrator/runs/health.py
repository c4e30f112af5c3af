"""Host and DUT health: consecutive failed checks put a host or DUT in quarantine (out of scheduling)
until ``labctl hosts release``.

Checks come with agent heartbeats (see :class:`labcontract.protocol.HealthCheck`): the agent's
self-test (target: the host), each DUT present (``present``), its serial as read back (``serial``:
the controller compares it with the identity registered first), SMART/NVMe critical warning clear
(``smart``). A passing check resets its count; ``quarantine_after`` failures in a row quarantine the
target: the host for an agent check, else the device.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from labcontract.protocol import HealthCheck
from orchestrator.store.models import Device, Host

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quarantined:
    host: str
    device: str | None      # None: the whole host
    reason: str


def device_of(host: Host, target: str) -> Device | None:
    return next((d for d in host.devices if target in (d.path, d.name, d.by_id)), None)


def judge_serial(host: Host, check: HealthCheck) -> HealthCheck:
    """A serial check passes when the serial read back is the one registered first (None: unknown)."""
    dev = device_of(host, check.target)
    if dev is None or check.check != "serial" or not check.ok or dev.serial is None or check.observed is None:
        return check
    if check.observed == dev.serial:
        return check
    return check.model_copy(update={"ok": False, "detail": f"serial is {check.observed}; "
                                                            f"expected {dev.serial} (device replaced?)"})


def apply(host: Host, checks: Iterable[HealthCheck], now: float, quarantine_after: int) -> list[Quarantined]:
    """Count the checks into ``host.health``; quarantine what failed ``quarantine_after`` times in a row."""
    health = dict(host.health or {})
    out: list[Quarantined] = []
    for raw in checks:
        if raw.target != host.name and device_of(host, raw.target) is None:
            continue        # about nothing this host declares: never kept (1024 new keys a heartbeat grew host.health)
        check = judge_serial(host, raw)
        key = f"{check.check} {check.target}"
        prev = health.get(key, {})
        fails = 0 if check.ok else int(prev.get("fails", 0)) + 1
        health[key] = {"fails": fails, "detail": check.detail, "at": now, "observed": check.observed}
        if fails < quarantine_after:
            continue
        reason = f"{check.check} check failed {fails} times in a row: {check.detail}"
        q = quarantine(host, None if check.check == "agent" or check.target == host.name else check.target,
                       reason, now)
        if q is not None:
            out.append(q)
    host.health = health
    return out


def quarantine(host: Host, device_path: str | None, reason: str, now: float) -> Quarantined | None:
    """Take the host (``device_path`` None) or one of its declared DUTs out of scheduling until released;
    None when it already is, or the path is no DUT of the host. The agents' failed checks and the
    controller's own (a drifted canary) come here."""
    if device_path is None:
        if host.quarantined_at is not None:
            return None
        host.quarantined_at, host.quarantine_reason = now, reason
        log.error("host quarantined: %s", reason, extra={"host": host.name})
        return Quarantined(host.name, None, reason)
    dev = device_of(host, device_path)
    if dev is None or dev.quarantined_at is not None:
        return None
    dev.quarantined_at, dev.quarantine_reason = now, reason
    log.error("device %s quarantined: %s", dev.path, reason, extra={"host": host.name})
    return Quarantined(host.name, dev.path, reason)


def release(host: Host, device: str | None) -> list[str]:
    """Return the host (device None: the host and all its DUTs) or one DUT to scheduling; forget the
    failure counts, and take the serial now seen as the expected one. Returns what was released."""
    released = []
    targets = [d for d in host.devices if device is None or device in (d.path, d.name, d.by_id)]
    if device is None and host.quarantined_at is not None:
        host.quarantined_at, host.quarantine_reason = None, ""
        released.append(host.name)
    health = host.health or {}
    for dev in targets:
        observed = health.get(f"serial {dev.path}", {}).get("observed")
        if observed:
            dev.serial = observed                # the engineer accepts the device now in the slot
        if dev.quarantined_at is not None:
            dev.quarantined_at, dev.quarantine_reason = None, ""
            released.append(dev.path)
    names = {host.name} if device is None else set()
    names |= {x for d in targets for x in (d.path, d.name, d.by_id) if x}
    host.health = {k: v for k, v in health.items() if k.split(" ", 1)[-1] not in names}
    return released


def unavailable(host: Host | None, devices: Iterable[str]) -> str | None:
    """Why a run on (host, devices) may not be scheduled because of quarantine, else None."""
    if host is None:
        return None
    if host.quarantined_at is not None:
        return f"host {host.name} quarantined: {host.quarantine_reason}"
    for path in devices:
        dev = device_of(host, path)
        if dev is not None and dev.quarantined_at is not None:
            return f"device {dev.path} on {host.name} quarantined: {dev.quarantine_reason}"
    return None
