"""Network tool ``block`` on an initiator: fio on the kernel's own iSCSI stack, the way a lab host's application
sees a LUN. One path named: fio reads that path's SCSI disk (``/dev/sdX``, the session to the target's portal on that
path); several: fio reads the dm-multipath map that holds exactly those paths' disks. The kernel spreads the I/O
over the paths, so each path's Gbps comes from its NIC's counters (sampled ten times a second while fio runs) and
the IOPS and latency from fio's own reports (once a second, json+).

The disks are found by the udev links open-iscsi's sessions get (``/dev/disk/by-path/ip-PEER:PORT-iscsi-IQN-lun-N``)
and their holders in ``/sys/block``: nothing in the step names a device, and fio runs ``--readonly`` on a read-only
workload (the suite allows ``rw`` read or randread only: the initiator does not own the target's LUN). The agent
user needs read access to the disks and the map: ``playbooks/iscsi_initiator.yml`` gives it (docs/network-tests.md).

A path whose NIC stops carrying data (under :data:`MOVING_BYTES_S` a second: iSCSI keep-alives only) for
:data:`~agents.netmeasure.STALL_S` or longer while fio runs is a path failure: when it stopped, when (if) it came
back, what the other paths carried meanwhile, and how long fio completed no I/O at all after it stopped (the
failover window: the time dm-multipath took to fail the path and requeue its I/O).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.netmeasure import STALL_S, count_nic_bytes, fio_samples, gbps, split_reports
from labcontract.errors import FioError, NetStepError
from labcontract.fiojob import check_job, job_section, render_job
from labcontract.fioresult import parse_fio_groups
from labcontract.procs import stop_group
from labcontract.suite import Workload

BY_PATH = Path("/dev/disk/by-path")
SYS_BLOCK = Path("/sys/block")
MOVING_BYTES_S = 64 * 1024        # a path under this a second carries keep-alives (NOP-Out), not I/O
EXTRA_S = 90.0                    # past the workload's time: a failover's stall (within the step's 120 s margin)


@dataclass(frozen=True)
class BlockTarget:
    """What fio reads: one path's SCSI disk or the multipath map of every named path's disk."""

    device: str                  # /dev/sdX or /dev/dm-N
    disks: dict[str, str]        # path name -> its SCSI disk (sdX)
    map: str | None = None       # the dm-multipath map's name (several paths)

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "disks": self.disks, "map": self.map}


def lun_disk(peer: str, *, iqn: str | None, lun: int, port: int, path: str, by_path: Path = BY_PATH) -> str:
    """The SCSI disk (``sdX``) of LUN ``lun`` through the session to ``peer:port``; ``iqn`` None: the one target
    logged in there. Compared as strings, never globbed (the IQN comes from the wire)."""
    prefix, suffix = f"ip-{peer}:{port}-iscsi-", f"-lun-{lun}"
    try:
        names = sorted(p.name for p in by_path.iterdir())
    except OSError:
        names = []
    found = [n for n in names if n.startswith(prefix) and n.endswith(suffix) and len(n) > len(prefix) + len(suffix)
             and (iqn is None or n[len(prefix):-len(suffix)] == iqn)]
    if not found:
        raise NetStepError(f"path {path}: no iSCSI session to {peer}:{port} with LUN {lun}"
                           + (f" of {iqn}" if iqn else "") + " (log in on each path: playbooks/iscsi_initiator.yml)")
    if len(found) > 1:
        iqns = ", ".join(n[len(prefix):-len(suffix)] for n in found)
        raise NetStepError(f"path {path}: {len(found)} targets logged in through {peer}:{port} ({iqns[:300]}); "
                           "name one with network.iqn")
    disk = (by_path / found[0]).resolve().name
    if not disk.startswith("sd"):
        raise NetStepError(f"path {path}: {found[0]} is {disk}, not a SCSI disk")
    return disk


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def resolve(spec: dict[str, Any], *, by_path: Path = BY_PATH, sys_block: Path = SYS_BLOCK) -> BlockTarget:
    """The device of a block step from its resolved paths (name, iface, peer) and the target's IQN and LUN."""
    disks = {p["name"]: lun_disk(p["peer"], iqn=spec.get("iqn"), lun=int(spec["lun"]),
                                 port=int(spec["iscsi_port"]), path=p["name"], by_path=by_path)
             for p in spec["paths"]}
    if len(set(disks.values())) != len(disks):
        raise NetStepError(f"two paths lead to one disk ({disks}): each path must be a session of its own")
    if len(disks) == 1:
        return BlockTarget(f"/dev/{next(iter(disks.values()))}", disks)
    holders = {name: sorted(os.listdir(sys_block / d / "holders")) if (sys_block / d / "holders").is_dir() else []
               for name, d in disks.items()}
    maps = {h for hs in holders.values() for h in hs}
    if len(maps) != 1 or any(len(hs) != 1 for hs in holders.values()):
        raise NetStepError("the paths' disks are not held by one dm-multipath map ("
                           + "; ".join(f"{n}: {disks[n]} held by {', '.join(h) or 'nothing'}"
                                       for n, h in holders.items()) + "): start multipathd (iscsi_initiator.yml)")
    dm = maps.pop()
    if not _read(sys_block / dm / "dm" / "uuid").startswith("mpath-"):
        raise NetStepError(f"{dm}, which holds the paths' disks, is not a dm-multipath map")
    slaves = set(os.listdir(sys_block / dm / "slaves")) if (sys_block / dm / "slaves").is_dir() else set()
    extra = sorted(slaves - set(disks.values()))
    if extra:
        raise NetStepError(f"the multipath map {_read(sys_block / dm / 'dm' / 'name') or dm} also has paths the step "
                           f"does not name ({', '.join(extra)}): name every path of the map in network.paths")
    return BlockTarget(f"/dev/{dm}", disks, _read(sys_block / dm / "dm" / "name") or None)


def _per_second(series: Sequence[Sequence[float]], t0: float) -> dict[int, float]:
    out: dict[int, float] = {}
    for iv in series:
        k = int(iv[0] - t0)
        out[k] = out.get(k, 0.0) + iv[2]
    return out


def path_failures(paths: dict[str, dict[str, Any]], io: Sequence[Sequence[float]], t0: float,
                  end: float) -> list[dict[str, Any]]:
    """Every stretch of at least ``STALL_S`` in which a path that had carried I/O carried none (see the module
    docstring), from each path's NIC series and fio's own (``[t_start, t_end, bytes, ios]``) series."""
    secs = {name: _per_second(p["series"], t0) for name, p in paths.items()}
    last = int(end - t0)                 # the partial last second is not judged
    out = []
    for name, per in secs.items():
        moving = [k for k in range(last) if per.get(k, 0.0) >= MOVING_BYTES_S]
        if not moving:
            continue
        k = moving[0]
        while k < last:
            if per.get(k, 0.0) >= MOVING_BYTES_S:
                k += 1
                continue
            stop = k
            while k < last and per.get(k, 0.0) < MOVING_BYTES_S:
                k += 1
            if k - stop < STALL_S:
                continue
            stopped, resumed = t0 + stop, (t0 + k if k < last else None)
            until = resumed or end
            others = [o for o in secs if o != name and any(secs[o].get(j, 0.0) >= MOVING_BYTES_S
                                                           for j in range(stop, k))]
            carried = sum(secs[o].get(j, 0.0) for o in others for j in range(stop, k))
            moving_s = sum(1 for j in range(stop, k) if any(secs[o].get(j, 0.0) >= MOVING_BYTES_S for o in others))
            stalled = sum(min(iv[1], until) - max(iv[0], stopped) for iv in io
                          if iv[3] == 0 and iv[1] > stopped and iv[0] < until)
            out.append({"path": name, "stopped_at": stopped, "resumed_at": resumed, "survivors": others,
                        "carried_on_s": float(moving_s), "survivor_gbps": gbps(carried, moving_s) if moving_s else 0.0,
                        "io_stalled_s": round(stalled, 3)})
    return out


def _run_fio(job: Path, out: Path, err: Path, deadline_s: float) -> int | None:
    argv = ["fio", "--readonly", "--output-format=json+", "--status-interval=1", str(job)]
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(deadline_s)
    except subprocess.TimeoutExpired:
        stop_group(proc, signal.SIGKILL, 3.0)
        return None


def run_block(spec: dict[str, Any], target: BlockTarget, workload: Workload, workdir: Path) -> dict[str, Any]:
    """fio on ``target`` for the workload's time, each path's NIC counted meanwhile; what ``net.json`` holds."""
    workdir.mkdir(parents=True, exist_ok=True)
    job = render_job(workload, target.device)
    if any(section.writes for section in check_job(job)):
        raise NetStepError(f"refusing to run {workload.rw} through the initiator: tool block only reads")
    (workdir / "block.fio").write_text(job)
    stop = threading.Event()
    counted: dict[str, Any] = {}
    counter = threading.Thread(target=lambda: counted.update(count_nic_bytes(
        spec["paths"], workload.expected_seconds + EXTRA_S, stop=stop)), daemon=True)
    t0 = time.time()
    counter.start()
    try:
        rc = _run_fio(workdir / "block.fio", workdir / "block.json", workdir / "block.stderr",
                      workload.expected_seconds + EXTRA_S)
    finally:
        stop.set()
        counter.join(10)
    text = (workdir / "block.json").read_text(errors="replace")
    reports = split_reports(text)
    stderr = (workdir / "block.stderr").read_text(errors="replace")[-2000:].strip()
    if rc != 0 or not reports:
        why = "killed past its time" if rc is None else f"exit {rc}"
        raise FioError(f"fio on {target.device} ({why}): {stderr or 'no report'}")
    metrics = parse_fio_groups(json.dumps(reports[-1]), source=f"fio {target.device}")[job_section(workload.name)]
    io: list[list[float]] = []
    prev = (0.0, 0, 0)
    for smp in fio_samples(reports, t0 * 1000.0):
        if smp.t - prev[0] >= 0.2:
            io.append([t0 + prev[0], t0 + smp.t, float(smp.bytes - prev[1]), float(smp.ios - prev[2])])
            prev = (smp.t, smp.bytes, smp.ios)
    ended = io[-1][1] if io else time.time()
    paths = {name: {**p, "iops": None, "lat_mean_ns": None, "read_gbps": None, "write_gbps": None,
                    "disk": target.disks.get(name)} for name, p in counted.get("paths", {}).items()}
    first = io[0][1] if io else t0
    measure_from = min(max(first, t0 + workload.ramp_time), ended)
    c = metrics.combined
    return {"started_at": t0, "ended_at": ended, "measure_from": measure_from, "measure_to": ended, "paths": paths,
            "failures": path_failures(paths, io, t0, ended), "job": job, "block": target.describe(),
            "io": {"gbps": c.bw_bytes * 8 / 1e9, "iops": c.iops, "lat_mean_ns": c.lat_mean_ns,
                   "lat_p99_ns": c.percentiles_ns.get("p99"), "read_bw_bytes": metrics.read.bw_bytes,
                   "write_bw_bytes": metrics.write.bw_bytes, "bytes": metrics.read.io_bytes + metrics.write.io_bytes,
                   "seconds": metrics.runtime_ms / 1000.0, "errors": metrics.errors, "series": io},
            "total": {"gbps": c.bw_bytes * 8 / 1e9, "bytes": metrics.read.io_bytes + metrics.write.io_bytes,
                      "seconds": metrics.runtime_ms / 1000.0, "iops": c.iops}}
