"""Step kind ``net``: a network step (``python -m agents.netstep net-spec.json net.json``) on the declared
network paths it names (agent ``--net-path NAME=IFACE[@PEER]``); no DUT, nothing for the interlock."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import ClassVar

from agents.kinds.base import Host, Launch, StepKind, Targets
from labcontract.errors import StepError
from labcontract.facts import NetPathDecl
from labcontract.protocol import StartStep


def net_spec(msg: StartStep, paths: Sequence[NetPathDecl], *, manage_mtu: bool) -> str:
    """The input of ``agents.netstep``: the message's network part with its paths resolved."""
    if msg.net is None or msg.workload is None:
        raise StepError(f"attempt {msg.attempt_id}: a network step without its net part or workload")
    return json.dumps({**msg.net.model_dump(mode="json"), "host": msg.host, "manage_mtu": manage_mtu,
                       "workload": msg.workload.model_dump(mode="json"),
                       "paths": [p.model_dump(mode="json") for p in paths]}, indent=1)


def net_paths_for(msg: StartStep, declared_paths: Sequence[NetPathDecl]) -> tuple[list[NetPathDecl], list[str]]:
    """The declared paths a network step names, and what is wrong with the request."""
    declared = {p.name: p for p in declared_paths}
    problems, paths = [], []
    if msg.net is None:
        return [], ["a network step without its net part"]
    for name in msg.net.paths:
        p = declared.get(name)
        if p is None:
            problems.append(f"path {name!r} is not declared on this host (declared: "
                            f"{', '.join(declared) or 'none'}; agent --net-path NAME=IFACE[@PEER])")
        elif msg.net.role == "initiator" and not p.peer:
            problems.append(f"path {name!r} ({p.iface}) declares no peer address (the target's portal: "
                            f"--net-path {name}={p.iface}@ADDRESS)")
        else:
            paths.append(p)
    return paths, problems


class NetKind(StepKind):
    action: ClassVar[str] = "net"
    command_version: ClassVar[int] = 2        # 2: tool block (fio on the kernel's iSCSI LUN or dm-multipath map)
    platforms: ClassVar[frozenset[str]] = frozenset({"linux"})   # Linux tools (docs/windows.md)
    artifacts: ClassVar[tuple[str, ...]] = ("net-spec.json", "net.json", "fio.stderr")

    def targets(self, msg: StartStep, host: Host) -> tuple[Targets, str]:
        paths, problems = net_paths_for(msg, host.net_paths)
        return Targets(net_paths=tuple(paths)), "; ".join(problems)

    def launch(self, msg: StartStep, targets: Targets, host: Host) -> Launch:
        job = net_spec(msg, targets.net_paths, manage_mtu=host.manage_mtu)
        return Launch({"net-spec.json": job},
                      (sys.executable, "-m", "agents.netstep", "net-spec.json", "net.json"), job)


KIND = NetKind()
