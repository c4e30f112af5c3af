"""A submission judged, in one place (:func:`judge`): the suite's overrides, repeats and round cap against its
bounds, and whether it can run where it names by what agents registered (the host, its declared DUTs, the suite's
device count, its engines on the host's OS, its Linux-only parts on a Windows host, its sizes against the smallest
named device; a network suite's target, initiators and paths). The controller applies it to every Submit (it trusts
no client); labctl and the web service apply the same function before they send one, so a user hears of every
problem at once, named by the input they typed (``Keys``). Only what needs the controller's own state (its
inventory, for a suite that provisions) is judged by the controller alone."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.engines import OS_NAMES, engine_for, engine_problem
from labcontract.errors import FioError, Problem
from labcontract.fioextra import URING_ONLY
from labcontract.suite import (
    Suite,
    capacity_problems,
    fio_kind_version,
    fio_options_used,
    override_problems,
    repeat_problems,
)
from orchestrator.runs.netgroups import net_problems
from orchestrator.runs.planner import net_hosts_of
from orchestrator.store.models import Device, Host, find_device


@dataclass(frozen=True)
class Keys:
    """How the inputs are named in the problems: labctl's options, or the web API's fields."""

    device: str = "--device"
    initiator: str = "--initiator"
    max_rounds: str = "--max-rounds"


CLI_KEYS = Keys()
API_KEYS = Keys(device="devices", initiator="initiators", max_rounds="max_rounds")


def judge(s: Session | None, suite: Suite | None, host: str, devices: Sequence[str], initiators: Sequence[str] = (),
          *, runtime: int | None = None, scale: float | None = None, repeat: int | None = None,
          max_rounds: int | None = None, keys: Keys = CLI_KEYS) -> list[Problem]:
    """Every problem of running ``suite`` (None: it did not parse, its own problems are the caller's) on ``host``'s
    ``devices`` (a network suite: from ``host`` to ``initiators``). ``s`` None judges the suite without the store
    (what agents registered is then not looked at)."""
    problems: list[Problem] = []
    if suite is not None:
        problems += override_problems(suite, runtime, scale) + repeat_problems(suite, repeat)
        if max_rounds is not None and suite.phases.precondition is None and suite.phases.rounds is None:
            problems.append(Problem(keys.max_rounds, f"suite {suite.name} has no precondition or rounds phase to "
                                                     "cap"))
    if suite is not None and suite.network is not None:
        if devices:
            problems.append(Problem(keys.device, "a network suite measures paths, not DUTs: name no device"))
        if s is not None:
            problems += net_problems(s, suite, host or None, initiators, repeat)
            hosts = net_hosts_of(suite, host or None, initiators)
            for name in dict.fromkeys(h for h in (hosts.target, *hosts.initiators) if h):
                known = s.get(Host, name)
                problems += linux_only_problems(suite, known) if known is not None else []
        return problems
    if initiators:
        if suite is None and not devices:
            return problems           # a network suite that does not parse: its problems are the news
        problems.append(Problem(keys.initiator, "only a network suite (key network) takes initiators"))
    elif s is not None:
        problems += submission_problems(s, host, devices, suite, device_key=keys.device)
    return problems


def new_run_id() -> str:
    return time.strftime("r%Y%m%d-") + uuid.uuid4().hex[:6]


def submission_problems(session: Session, host_name: str, devices: Sequence[str],
                        suite: Suite | None = None, *, device_key: str = "--device") -> list[Problem]:
    """What is wrong with running on (host, devices), judged by what agents registered."""
    problems = []
    if not devices:
        problems.append(Problem(device_key, "no device named"))
    if suite is not None and suite.devices is not None and devices and len(devices) != suite.devices:
        problems.append(Problem(device_key, f"suite {suite.name} takes {suite.devices} device(s); "
                                            f"{len(devices)} named"))
    host = session.get(Host, host_name)
    if host is None:
        known = ", ".join(session.scalars(select(Host.name).order_by(Host.name))) or "none registered"
        return [*problems, Problem("--host", f"unknown host {host_name!r} (known: {known})")]
    declared = ", ".join(f"{d.name} ({d.path})" for d in host.devices if d.declared) or "none"
    seen: dict[str, str] = {}
    named: list[Device] = []
    for device in devices:
        dev = find_device(host, device)
        if dev is None:
            problems.append(Problem(device_key, f"{device!r} is not a declared DUT of host {host_name} "
                                                f"(declared: {declared})"))
        elif dev.path in seen:
            problems.append(Problem(device_key, f"{device!r} names device {dev.path} twice in one device group "
                                                f"(also as {seen[dev.path]!r})"))
        else:
            seen[dev.path] = device
            named.append(dev)
    if suite is not None:
        problems += engine_problems(suite, host) + linux_only_problems(suite, host) + fio_version_problems(suite, host)
    if suite is not None and named:
        # sizes against the registered capacity of the smallest named device (a group shares one job)
        smallest = min(named, key=lambda d: d.size_bytes)
        problems += capacity_problems(suite, smallest.size_bytes, f"device {smallest.name} ({smallest.path})")
    return problems


def engine_problems(suite: Suite, host: Host) -> list[Problem]:
    """The suite's fio engines the host's OS has no counterpart of (windowsaio on Linux, pvsync2 on Windows;
    labcontract.engines), when the host registered its OS family; an older agent's host is not judged here
    (its agent refuses the step before fio starts)."""
    family = (host.facts or {}).get("os_family")
    if family not in OS_NAMES:
        return []
    out = []
    for engine in sorted({w.ioengine for w in suite.workloads}):
        why = engine_problem(str(family), engine)
        if why is not None:
            out.append(Problem("ioengine", f"{why} (host {host.name} runs {OS_NAMES[str(family)]})"))
    for flag, engines in URING_ONLY.items():       # engine options of an engine the host runs as another
        if any(getattr(w, flag) and engine_for_os(str(family), w.ioengine) not in engines for w in suite.workloads):
            out.append(Problem(flag, f"an option of ioengine {' / '.join(engines)}, which host {host.name} "
                                     f"({OS_NAMES[str(family)]}) does not run"))
    return out


def engine_for_os(family: str, declared: str) -> str | None:
    try:
        return engine_for(family, declared)
    except FioError:
        return None


def fio_version_problems(suite: Suite, host: Host) -> list[Problem]:
    """The suite's extended fio options (labcontract.fioextra) when the host's agent announced a fio kind too old to
    know them; an agent that announced no kinds is not judged here (it refuses a start it cannot read)."""
    have = (host.step_kinds or {}).get("fio")
    need = fio_kind_version(suite)
    if have is None or have >= need:
        return []
    used = fio_options_used(suite)
    return [Problem(used[0], f"{', '.join(used)}: host {host.name}'s agent runs fio steps at version {have}; these "
                             f"options need version {need} or later: upgrade the agent")]


def linux_only_problems(suite: Suite, host: Host) -> list[Problem]:
    """What of the suite only Linux agents run (purge, network and application steps: their agents' kinds use
    Linux tools; agents.kinds.StepKind.platforms) when the host registered that it runs Windows."""
    if (host.facts or {}).get("os_family") != "windows":
        return []
    parts = (("phases.purge", suite.phases.purge, "a purge"), ("phases.provision", suite.phases.provision,
                                                                 "provisioning (Ansible's lab_dut)"),
             ("network", suite.network is not None, "a network suite"), ("kind", suite.kind != "fio",
                                                                        f"a {suite.kind} application suite"))
    return [Problem(key, f"{what} runs on Linux agents only; host {host.name} runs Windows")
            for key, on, what in parts if on]
