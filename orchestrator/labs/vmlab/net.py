"""The VM lab's network: a network namespace of its own holding one bridge per segment and every VM's tap device.

Nothing leaves the namespace: it has no route out and no link to the machine's own namespaces, so the VMs can
reach each other and the namespace's own addresses, nothing else (QEMU runs inside it, so its taps are made
there). Segments:

- ``mgmt`` (10.80.0.0/24, the namespace itself is 10.80.0.1): SSH, the broker, Prometheus; every VM's first NIC;
- ``a`` and ``b`` (10.81.0.0/24, 10.82.0.0/24): the two data paths of the network tests, taps at MTU 9000 so the
  VMs can run either MTU (the agent's ``--manage-mtu`` sets theirs).

Everything here runs ``ip`` as root; the commands a test or an engineer runs against the VMs go through
:meth:`Network.exec` (``ip netns exec``).
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from labcontract.errors import ServiceError


@dataclass(frozen=True)
class Segment:
    name: str
    subnet: str              # CIDR
    mtu: int

    def address(self, n: int) -> str:
        """The ``n``-th host address of the segment, with its prefix (``10.80.0.11/24``)."""
        net = ipaddress.ip_network(self.subnet)
        return f"{net.network_address + n}/{net.prefixlen}"

    @property
    def gateway(self) -> str:
        return self.address(1)


SEGMENTS = (Segment("mgmt", "10.80.0.0/24", 1500), Segment("a", "10.81.0.0/24", 9000),
            Segment("b", "10.82.0.0/24", 9000))


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise ServiceError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


@dataclass
class Network:
    """The namespace ``name`` with a bridge per segment (``br-<segment>``)."""

    name: str
    segments: dict[str, Segment] = field(default_factory=lambda: {s.name: s for s in SEGMENTS})
    taps: list[str] = field(default_factory=list)

    def create(self) -> None:
        ip("netns", "add", self.name)
        ip("-n", self.name, "link", "set", "lo", "up")
        for seg in self.segments.values():
            br = self.bridge(seg.name)
            ip("-n", self.name, "link", "add", br, "type", "bridge")
            ip("-n", self.name, "link", "set", br, "mtu", str(seg.mtu))
            ip("-n", self.name, "addr", "add", seg.gateway, "dev", br)
            ip("-n", self.name, "link", "set", br, "up")

    @staticmethod
    def bridge(segment: str) -> str:
        return f"br-{segment}"

    def add_tap(self, tap: str, segment: str) -> None:
        """A tap on ``segment``'s bridge (QEMU opens it by name)."""
        seg = self.segments[segment]
        ip("-n", self.name, "tuntap", "add", "dev", tap, "mode", "tap")
        ip("-n", self.name, "link", "set", tap, "mtu", str(seg.mtu), "master", self.bridge(segment))
        ip("-n", self.name, "link", "set", tap, "up")
        self.taps.append(tap)

    def set_link(self, tap: str, up: bool) -> None:
        """A cable pulled (or put back) between a VM's NIC and its segment."""
        ip("-n", self.name, "link", "set", tap, "up" if up else "down")

    def exec(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def delete(self) -> None:
        ip("netns", "delete", self.name, check=False)

    def exists(self) -> bool:
        return self.name in ip("netns", "list", check=False).stdout.split()
