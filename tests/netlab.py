"""A network test lab built from namespaces: one target host, initiator hosts, two paths each.

Lab hosts in the real lab are an iSCSI array and initiator hosts joined by two NICs each. On
a single VM we build the same shape from Linux network namespaces::

    labnet-<tag>-tgt  ── path a (veth, tbf rate R) ──  labnet-<tag>-ini0
                      ── path b (veth, tbf rate R) ──
                      ── path a ──  labnet-<tag>-ini1   (more initiators: more pairs)

* Addresses come only from 198.18.128.0/20 (RFC 2544 benchmarking space); every path is a
  /30 that exists only inside the two namespaces it joins.
* Every veth end is shaped with ``tbf`` at ``rate_mbit``: the target end for reads, the
  initiator end for writes and requests. The bucket is large enough for a 64 KiB GSO packet
  and a few ms of traffic so one TCP stream reaches more than 0.9 R (docs/network-tests.md).
* The target namespace runs ``tgtd`` (foreground, its own control port, so it never talks to
  another tgtd on the VM) with one LUN backed by a file, with one portal per path address,
  and one ``nbdkit`` per path address serving the same file (``--exit-with-parent``).
* :meth:`NetLab.close` removes exactly what :meth:`NetLab.open` made: processes by pid,
  namespaces and veths by name, the LUN file, tgtd's control socket. It is safe after a
  partial open.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from labcontract.errors import ConfigError, ServiceError
from labcontract.procs import stop_group

BENCH_NET = ipaddress.IPv4Network("198.18.128.0/20")
PATH_NAMES = ("a", "b")
ISCSI_PORT = 3260
NBD_PORT = 10809
TGTD_SOCKET_DIR = Path("/var/run/tgtd")
MTUS = (1500, 9000)
DEFAULT_RATE_MBIT = 300
# tbf: a bucket of this many ms at rate R (at least 128 KiB so a 64 KiB GSO skb always
# fits), and a queue of QUEUE_MS at rate R behind it.
BURST_MS = 20
MIN_BURST = 128 * 1024
QUEUE_MS = 25
READY_TIMEOUT_S = 10.0


class NetLabError(ServiceError):
    """A lab piece (namespace, link, tgtd, nbdkit) could not be made or did not come up."""


@dataclass(frozen=True)
class NetPath:
    """One path: a veth pair from the target namespace to an initiator namespace."""

    initiator: int
    name: str
    tgt_if: str
    ini_if: str
    tgt_addr: str
    ini_addr: str
    prefix: int
    mtu: int
    rate_mbit: int

    @property
    def key(self) -> str:
        """``ini0.a``: unique in a lab; the per-path key of every measurement."""
        return f"ini{self.initiator}.{self.name}"


@dataclass(frozen=True)
class LabSpec:
    initiators: int = 1
    rate_mbit: int = DEFAULT_RATE_MBIT
    mtu: int = 1500
    lun_size: int = 256 * 1024 * 1024
    lun_dir: Path = Path("/dev/shm")
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def check(self) -> None:
        if not 1 <= self.initiators <= 8:
            raise ConfigError("netlab", "initiators", f"must be 1..8, got {self.initiators}")
        if self.mtu not in MTUS:
            raise ConfigError("netlab", "mtu", f"must be one of {MTUS}, got {self.mtu}")
        if not 1 <= self.rate_mbit <= 100_000:
            raise ConfigError("netlab", "rate_mbit", f"must be 1..100000, got {self.rate_mbit}")
        if self.lun_size < 1024 * 1024 or self.lun_size % 512:
            raise ConfigError("netlab", "lun_size", "must be a multiple of 512 and at least 1 MiB")
        if not (len(self.tag) == 6 and self.tag.isalnum()):
            raise ConfigError("netlab", "tag", f"must be 6 alphanumerics, got {self.tag!r}")


def tbf_params(rate_mbit: int, mtu: int) -> tuple[int, int]:
    """``(burst_bytes, limit_bytes)`` for a tbf at ``rate_mbit`` carrying packets of ``mtu``."""
    per_ms = rate_mbit * 1_000_000 // 8 // 1000
    burst = max(MIN_BURST, BURST_MS * per_ms, 2 * mtu)
    return burst, burst + QUEUE_MS * per_ms


def path_subnet(initiator: int, index: int) -> ipaddress.IPv4Network:
    """The /30 of path ``index`` of initiator ``initiator``; always inside :data:`BENCH_NET`."""
    net = ipaddress.IPv4Network((int(BENCH_NET.network_address) + (initiator * 64 + index) * 4, 30))
    if not net.subnet_of(BENCH_NET):
        raise ConfigError("netlab", "initiators", f"path subnet {net} leaves {BENCH_NET}")
    return net


def make_paths(spec: LabSpec) -> list[NetPath]:
    paths = []
    for k in range(spec.initiators):
        for i, name in enumerate(PATH_NAMES):
            net = path_subnet(k, i)
            tgt, ini = list(net.hosts())
            paths.append(NetPath(k, name, f"lnt{spec.tag}{k}{name}", f"lni{spec.tag}{k}{name}",
                                 str(tgt), str(ini), net.prefixlen, spec.mtu, spec.rate_mbit))
    return paths


def _run(args: Sequence[str], *, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetLabError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def wait_until(what: str, cond: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> None:
    """Poll ``cond`` until true; a short back-off, never one fixed sleep. Raises on timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not cond():
        if time.monotonic() > deadline:
            raise NetLabError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _free_control_port() -> int:
    """A tgtd control port no other tgtd on the VM uses (its socket lives in the host's /run)."""
    for _ in range(100):
        port = random.randrange(10_000, 32_000)  # tgtd -C takes at most 32767
        if not (TGTD_SOCKET_DIR / f"socket.{port}").exists():
            return port
    raise NetLabError("no free tgtd control port")


class NetLab:
    """The lab; use :func:`open_lab` (a context manager) or :meth:`open` / :meth:`close`."""

    def __init__(self, spec: LabSpec) -> None:
        spec.check()
        self.spec = spec
        self.tag = spec.tag
        self.tgt_ns = f"labnet-{spec.tag}-tgt"
        self.paths = make_paths(spec)
        self.iqn = f"iqn.2026-11.lab.storagelab:netlab-{spec.tag}"
        self.lun = 1
        self.nbd_port = NBD_PORT
        self.iscsi_port = ISCSI_PORT
        self.control_port = 0
        self.workdir = Path(tempfile.mkdtemp(prefix=f"labnet-{spec.tag}-"))
        self.lun_file = spec.lun_dir / f"labnet-{spec.tag}.lun"
        self._namespaces: list[str] = []
        self._made_lun = False
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ names

    def ini_ns(self, initiator: int) -> str:
        return f"labnet-{self.tag}-ini{initiator}"

    def path(self, key: str) -> NetPath:
        for p in self.paths:
            if p.key == key or (p.initiator == 0 and p.name == key):
                return p
        raise ConfigError("netlab", "path", f"no path {key!r} (have {[p.key for p in self.paths]})")

    def paths_of(self, initiator: int) -> list[NetPath]:
        return [p for p in self.paths if p.initiator == initiator]

    # ------------------------------------------------------------------ build

    def open(self) -> NetLab:
        try:
            self._make_namespaces()
            for p in self.paths:
                self._make_path(p)
            self._make_lun_file()
            self._start_tgtd()
            for p in self.paths:
                self._start_nbdkit(p)
        except BaseException:
            self.close()
            raise
        return self

    def _make_namespaces(self) -> None:
        for ns in [self.tgt_ns, *(self.ini_ns(k) for k in range(self.spec.initiators))]:
            _run(["ip", "netns", "add", ns])
            self._namespaces.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _make_path(self, p: NetPath) -> None:
        ini_ns = self.ini_ns(p.initiator)
        _run(["ip", "-n", self.tgt_ns, "link", "add", p.tgt_if, "type", "veth",
              "peer", "name", p.ini_if, "netns", ini_ns])
        for ns, dev, addr in ((self.tgt_ns, p.tgt_if, p.tgt_addr), (ini_ns, p.ini_if, p.ini_addr)):
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/{p.prefix}", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "mtu", str(p.mtu), "up"])
            self._shape(ns, dev, p.rate_mbit, p.mtu)

    def _shape(self, ns: str, dev: str, rate_mbit: int, mtu: int) -> None:
        burst, limit = tbf_params(rate_mbit, mtu)
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
              "rate", f"{rate_mbit}mbit", "burst", str(burst), "limit", str(limit)])

    def _make_lun_file(self) -> None:
        try:
            with open(self.lun_file, "xb") as f:
                # real bytes, not a hole: reads then cost what reading a LUN costs
                chunk = os.urandom(1024 * 1024)
                for _ in range(self.spec.lun_size // len(chunk)):
                    f.write(chunk)
                f.truncate(self.spec.lun_size)
        except OSError as e:
            raise NetLabError(f"LUN file {self.lun_file}: {e.strerror}") from None
        self._made_lun = True

    def _popen(self, name: str, ns: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        try:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *args], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        self._procs[name] = proc
        return proc

    def _tgtadm(self, *args: str) -> str:
        return _run(["tgtadm", "-C", str(self.control_port), "--lld", "iscsi", *args]).stdout

    def _tgtd_ready(self) -> bool:
        self._check_alive("tgtd")
        return _run(["tgtadm", "-C", str(self.control_port), "--lld", "iscsi", "--mode", "target",
                     "--op", "show"], check=False).returncode == 0

    def _start_tgtd(self) -> None:
        TGTD_SOCKET_DIR.mkdir(parents=True, exist_ok=True)
        self.control_port = _free_control_port()
        portals = [f"portal={p.tgt_addr}:{self.iscsi_port}" for p in self.paths]
        self._popen("tgtd", self.tgt_ns, ["tgtd", "-f", "-C", str(self.control_port),
                                          "--iscsi", ",".join(portals)])
        wait_until("tgtd control socket", self._tgtd_ready)
        self._tgtadm("--mode", "target", "--op", "new", "--tid", "1", "--targetname", self.iqn)
        self._tgtadm("--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", str(self.lun),
                     "--backing-store", str(self.lun_file))
        self._tgtadm("--mode", "target", "--op", "bind", "--tid", "1", "--initiator-address", "ALL")
        for p in self.paths:
            wait_until(f"iSCSI portal {p.tgt_addr}", partial(self._listening, p.tgt_addr, self.iscsi_port))

    def _start_nbdkit(self, p: NetPath) -> None:
        name = f"nbdkit-{p.key}"
        pidfile = self.workdir / f"{name}.pid"
        self._popen(name, self.tgt_ns, ["nbdkit", "-f", "--exit-with-parent", "-P", str(pidfile),
                                        "-i", p.tgt_addr, "-p", str(self.nbd_port),
                                        "file", f"file={self.lun_file}"])
        wait_until(f"nbdkit on {p.tgt_addr}", lambda: self._check_alive(name) or pidfile.exists())

    def _check_alive(self, name: str) -> bool:
        proc = self._procs[name]
        if proc.poll() is not None:
            log = (self.workdir / f"{name}.log").read_text(errors="replace").strip()
            raise NetLabError(f"{name} exited with {proc.returncode}: {log[-500:]}")
        return False

    def _listening(self, addr: str, port: int) -> bool:
        out = _run(["ip", "netns", "exec", self.tgt_ns, "ss", "-Hltn", f"src {addr}:{port}"]).stdout
        return bool(out.strip())

    # ------------------------------------------------------------------ operate

    def set_link(self, key: str, up: bool) -> None:
        """Take a path down (both ends, like a pulled cable) or bring it back up."""
        p = self.path(key)
        state = "up" if up else "down"
        _run(["ip", "-n", self.tgt_ns, "link", "set", p.tgt_if, state])
        _run(["ip", "-n", self.ini_ns(p.initiator), "link", "set", p.ini_if, state])

    def fail_path_after(self, key: str, seconds: float) -> threading.Timer:
        """Take path ``key`` down ``seconds`` from now (mid-run); cancel the timer to call it off."""
        self.path(key)
        timer = threading.Timer(seconds, self.set_link, (key, False))
        timer.daemon = True
        timer.start()
        return timer

    def set_mtu(self, key: str, mtu: int) -> NetPath:
        """Set the MTU of both veth ends of a path (and re-size its tbf). Returns the new path."""
        if mtu not in MTUS:
            raise ConfigError("netlab", "mtu", f"must be one of {MTUS}, got {mtu}")
        p = self.path(key)
        for ns, dev in ((self.tgt_ns, p.tgt_if), (self.ini_ns(p.initiator), p.ini_if)):
            _run(["ip", "-n", ns, "link", "set", dev, "mtu", str(mtu)])
            self._shape(ns, dev, p.rate_mbit, mtu)
        new = NetPath(p.initiator, p.name, p.tgt_if, p.ini_if, p.tgt_addr, p.ini_addr, p.prefix, mtu, p.rate_mbit)
        self.paths = [new if q.key == p.key else q for q in self.paths]
        return new

    def link_mtu(self, key: str) -> int:
        """The MTU as the kernel reports it on the initiator end (what a result records)."""
        p = self.path(key)
        text = _run(["ip", "-n", self.ini_ns(p.initiator), "-o", "link", "show", p.ini_if]).stdout
        words = text.split()
        return int(words[words.index("mtu") + 1])

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        for name in reversed(list(self._procs)):
            stop_group(self._procs.pop(name))  # tgtd / nbdkit ignore SIGTERM while a connection is stuck
        for ns in reversed(self._namespaces):
            _run(["ip", "netns", "del", ns], check=False)
        self._namespaces.clear()
        if self.control_port:
            for suffix in ("", ".lock"):
                (TGTD_SOCKET_DIR / f"socket.{self.control_port}{suffix}").unlink(missing_ok=True)
        if self._made_lun:
            self.lun_file.unlink(missing_ok=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """Anything of this lab still present (for tests: must be empty after close)."""
        names = _run(["ip", "netns", "list"]).stdout
        left = [ns for ns in names.split() if ns.startswith(f"labnet-{self.tag}-")]
        links = _run(["ip", "-o", "link", "show"]).stdout
        left += [dev for p in self.paths for dev in (p.tgt_if, p.ini_if) if dev in links]
        left += [str(f) for f in (self.lun_file, self.workdir) if f.exists()]
        if self.control_port and (TGTD_SOCKET_DIR / f"socket.{self.control_port}").exists():
            left.append(f"tgtd socket {self.control_port}")
        return left


def ns_exec(ns: str, args: Sequence[str]) -> list[str]:
    """The argv that runs ``args`` inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *args]


@contextmanager
def open_lab(spec: LabSpec | None = None) -> Iterator[NetLab]:
    lab = NetLab(spec or LabSpec()).open()
    try:
        yield lab
    finally:
        lab.close()
