"""A run's provenance as people read it: platform, devices, how the device state was set, what was run.

Everything a result's ``provenance`` (and the run row) holds, turned into labelled text values: what a
review's "test platform" paragraph lists (server, BIOS, CPUs, memory, OS, kernel, fio, HBAs and drivers,
each device's model / serial / firmware / capacity / driver), how the OP mode was set (a footprint
emulation or the device itself), the purge, the preconditioning, and every override that makes a run
differ from the published suite. A value the host did not expose is ``"unknown"``, never ``None`` or an
empty cell. One view for the terminal, Markdown and HTML reports and the export.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labcontract.drivehealth import DriveHealth, HealthSnapshot, bytes_written, grew
from labcontract.errors import LabError
from labcontract.registry import Registry
from labcontract.suite import parse_suite
from labcontract.units import format_size
from orchestrator.cellmetrics import run_kind
from orchestrator.cells import op_modes as cell_op_modes
from orchestrator.fiorun import imported_rows
from orchestrator.queries import RunDetail
from orchestrator.runfacts import override_rows, steady_word
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.models import Result, Run, Step

UNKNOWN = "unknown"
DEVICE_COLUMNS = ("name", "path", "model", "serial", "firmware", "capacity", "sector", "driver")
ReadArtifact = Callable[[str], bytes]     # an artifact's bytes by its path under the artifact root
Rows = list[tuple[str, str]]


def text(value: Any) -> str:
    """A value for display: ``unknown`` for None / empty."""
    if value is None or (isinstance(value, str | list | tuple | dict) and not value):
        return UNKNOWN
    return str(value)


def _join(*parts: Any, sep: str = " ") -> str:
    """The known parts joined; ``unknown`` when none is known."""
    return text(sep.join(str(p) for p in parts if p not in (None, "")))


@dataclass(frozen=True)
class Provenance:
    device_label: str                 # what a legend calls the device(s): model and capacity, "2 x model" for groups
    os: str                           # "Debian GNU/Linux 12 (bookworm)" or "unknown"
    op_modes: list[str]               # the run's OP modes, e.g. ["stock"], ["hp:20"]
    partial: bool                     # the run has not ended: figures are what has been measured so far
    sections: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)   # title -> (label, value)
    devices: list[dict[str, str]] = field(default_factory=list)                      # DEVICE_COLUMNS -> value
    warnings: list[str] = field(default_factory=list)   # overrides that leave the published methodology


# --------------------------------------------------------------------------- platform


def _gb(size: Any) -> str:
    return f"{size / 1e9:,.1f} GB" if isinstance(size, int | float) and size > 0 else UNKNOWN


def _controllers(host: Mapping[str, Any]) -> str:
    out = []
    for c in host.get("storage_controllers") or []:
        ven, dev = (str(c.get(k) or "?").removeprefix("0x") for k in ("vendor_id", "device_id"))
        ids = f"[{ven}:{dev}]"
        out.append(f"{c.get('slot')} {c.get('name') or c.get('class_name')} {ids} driver {text(c.get('driver'))}")
    return text("; ".join(out))


def platform_rows(host: Mapping[str, Any], *, agent_version: Any = None, fio_version: Any = None) -> Rows:
    """A host's platform as a review lists it, from its registered facts (``HostFacts`` dump)."""
    cores, threads, sockets = host.get("cpu_cores"), host.get("cpu_threads"), host.get("cpu_sockets")
    if isinstance(sockets, int) and isinstance(cores, int) and sockets > 0 and cores % sockets == 0:
        topology = f"{sockets} x {cores // sockets} cores ({text(threads)} threads)"
    else:
        topology = f"{text(sockets)} socket(s), {text(cores)} cores ({text(threads)} threads)"
    mem = host.get("memory_bytes")
    bios = _join(host.get("bios_vendor"), host.get("bios_version"))
    if host.get("bios_date"):
        bios = f"{bios} ({host['bios_date']})"
    return [("host", text(host.get("hostname"))),
            ("server", _join(host.get("sys_vendor"), host.get("product_name"), host.get("product_version"))),
            ("board", _join(host.get("board_vendor"), host.get("board_name"))),
            ("BIOS", bios),
            ("CPU", text(host.get("cpu_model"))),
            ("sockets x cores (threads)", topology),
            ("memory", f"{mem / 2**30:,.1f} GiB" if isinstance(mem, int) and mem > 0 else UNKNOWN),
            ("OS", text(host.get("os"))),
            ("kernel", text(host.get("kernel"))),
            ("fio", text(fio_version or host.get("fio_version"))),     # what ran, else as registered
            ("agent version", text(agent_version)),
            ("storage controllers", _controllers(host))]


def _device_row(d: Mapping[str, Any], host: Mapping[str, Any]) -> dict[str, str]:
    """One DEVICE_COLUMNS row; the driver says how the device is attached and through which controller."""
    slot = d.get("controller")
    ctrl = next((c for c in host.get("storage_controllers") or [] if c.get("slot") == slot), None)
    via = ", ".join(str(x) for x in (d.get("transport"), slot and (
        f"{slot} {ctrl.get('name') or ctrl.get('class_name')}" if ctrl else slot)) if x)
    driver = text(d.get("driver")) + (f" ({via})" if via and d.get("driver") else "")
    return {"name": text(d.get("name")), "path": text(d.get("path")), "model": text(d.get("model")),
            "serial": text(d.get("serial")), "firmware": text(d.get("firmware")),
            "capacity": _gb(d.get("size_bytes")), "sector": _sector(d), "driver": driver}


def _sector(d: Mapping[str, Any]) -> str:
    """``512 B``, ``512 B (physical 4,096 B)``: the logical block size (an NVMe namespace's LBA format in use)."""
    logical, physical = d.get("logical_block_size"), d.get("physical_block_size")
    if not isinstance(logical, int):
        return UNKNOWN
    return f"{logical:,} B" + (f" (physical {physical:,} B)" if isinstance(physical, int) and physical != logical
                               else "")


def device_label(devices: Sequence[Mapping[str, Any]]) -> str:
    """``QEMU HARDDISK 107.4 GB``; ``2 x loop 0.1 GB`` for a group (a device with no model is named by its
    driver or kind)."""
    if not devices:
        return UNKNOWN
    names = list(dict.fromkeys(str(d.get("model") or d.get("driver") or d.get("kind") or UNKNOWN) for d in devices))
    sizes = {d.get("size_bytes") for d in devices}
    cap = f" {_gb(next(iter(sizes)))}" if len(sizes) == 1 and _gb(next(iter(sizes))) != UNKNOWN else ""
    return (f"{len(devices)} x " if len(devices) > 1 else "") + " / ".join(names) + cap


# --------------------------------------------------------------------------- device state


def _mode_how(mode: str, steps: Sequence[Step], results: Mapping[str, Result]) -> str:
    """How an OP mode was set: on the device (dut_state's method and capacities) or emulated by fio's
    footprint (the size= every job of the mode carries)."""
    mine = [st for st in steps if (st.workload or st.kind == "app") and st.cell.get("op_mode", "stock") == mode]
    notes = [str((results[st.id].provenance.get("op_note") if st.id in results else None) or st.note or "")
             for st in mine]
    note = next((n for n in notes if "applied on the device" in n or "set on the device" in n), None)
    if note is not None:
        return f"on-device: {note}"
    if mode == "stock":
        return "stock: the device's full advertised capacity, no OP applied"
    apps = [st for st in mine if st.kind == "app"]
    if apps:       # an application's filesystem limited to the mode's share of the DUT (labcontract.appsuite)
        fs = [((results[st.id].provenance or {}).get("app") or {}).get("fs_size_bytes") if st.id in results else None
              for st in apps]
        size = next((format_size(int(b)) for b in fs if b), None)
        why = next((n for n in notes if n), "")
        return (f"emulated: filesystem limited to {size}" if size else "emulated: filesystem size limit") + \
            (f" ({why})" if why else "")
    prints = list(dict.fromkeys(str(st.workload.get("footprint")) for st in mine if st.workload
                                and st.workload.get("footprint") is not None))
    sizes = ", ".join(p if p.endswith("%") else format_size(int(p)) for p in prints) or UNKNOWN
    why = next((n for n in notes if n), "")
    return f"emulated: fio footprint size={sizes}" + (f" ({why})" if why else "")


def _artifact(step: Step, name: str, read: ReadArtifact | None) -> bytes | None:
    if read is None:
        return None
    for att in reversed(step.attempts):
        art = next((a for a in att.artifacts if a.name == name), None)
        if art is not None:
            try:
                return read(art.path)
            except OSError:
                return None
    return None


def _purge(steps: Sequence[Step], read: ReadArtifact | None) -> str:
    """The purge method: the agent's purge.sh commands, or what dut_state's purge items did; ``none``."""
    out: list[str] = []
    for st in steps:
        if st.kind == "purge":
            script = _artifact(st, "purge.sh", read)
            cmds = [ln for ln in (script or b"").decode(errors="replace").splitlines() if ln and ln != "set -eu"]
            how = "; ".join(cmds) or "agent discard (blkdiscard for block devices, fallocate --punch-hole for files)"
            out.append(f"{how} [{st.state}]")
        elif st.kind == "dut_state":
            out += [f"{p} [{st.state}]" for p in st.note.split("; ") if p.startswith("purge ")]
    return "; ".join(dict.fromkeys(out)) or "none"


def _dut_facts_rows(phase: str, facts: Mapping[str, Any]) -> Rows:
    rows = []
    for dut in facts.get("duts") or []:
        drv = dut.get("driver") or {}
        health = dut.get("health") or {}
        rows.append((f"DUT facts ({phase}): {text(dut.get('name'))}",
                     f"{text(dut.get('real_path') or dut.get('path'))} {text(dut.get('interface'))}, model "
                     f"{text(dut.get('model'))}, firmware {text(dut.get('firmware'))}, driver "
                     f"{_join(drv.get('name'), drv.get('version'))}, capacity {_gb(dut.get('capacity_bytes'))}, "
                     f"health {', '.join(f'{k}={v}' for k, v in health.items()) or UNKNOWN}"))
    return rows


def _precondition_rows(detail: RunDetail) -> Rows:
    rows = []
    for pc in detail.preconditions:
        st = next((s for s in detail.steps if s.kind == "precondition" and s.seq == pc.seq and s.workload), None)
        w = st.workload if st is not None and st.workload else {}
        mix = f" {w['rwmixread']}/{100 - w['rwmixread']}" if w.get("rwmixread") is not None else ""
        what = (f"{w.get('rw')}{mix} {format_size(int(w['bs']))} at {w.get('numjobs')}T/{w.get('iodepth')}Q, "
                f"{w.get('runtime')} s rounds") if w.get("bs") else UNKNOWN
        c = pc.criteria or {}
        if c.get("form") == "rounds":       # SNIA PTS-E's rounds (labcontract.rounds)
            what = (f"rounds of every measured cell{' after WIPC' if c.get('wipc') else ''}, tracking "
                    f"{c.get('cell_name')} {c.get('track')} (window {c.get('window')}, at most "
                    f"{c.get('max_rounds')} rounds)")
        rows.append((f"preconditioning {pc.name}", f"{what}; {len(pc.rounds)} round(s), {steady_word(pc.steady)}: "
                                                   f"{text(pc.verdict)}"))
    return rows


def device_state_rows(detail: RunDetail, modes: Sequence[str], prov: Mapping[str, Any],
                      read: ReadArtifact | None = None) -> Rows:
    steps = detail.steps
    rows: Rows = [("OP mode(s)", ", ".join(modes) or UNKNOWN)]
    rows += [(f"OP mode {m}", _mode_how(m, steps, detail.results)) for m in modes]
    rows += [(f"provisioned: {st.name}", f"{st.state}: {text(st.note)}") for st in steps if st.kind == "dut_state"]
    rows.append(("purge", _purge(steps, read)))
    if prov.get("dut_facts"):
        rows += _dut_facts_rows("before", prov["dut_facts"])
    after = next((st for st in steps if st.kind == "facts" and st.cell.get("phase") == "after"), None)
    raw = _artifact(after, "facts.json", read) if after is not None else None
    if raw is not None:
        try:
            rows += _dut_facts_rows("after", json.loads(raw))
        except ValueError:
            rows.append(("DUT facts (after)", f"unreadable facts.json of {after.name if after else '?'}"))
    elif after is not None:
        rows.append(("DUT facts (after)", f"{after.state} (facts.json not read)"))
    return rows + (_precondition_rows(detail) or [("preconditioning", "none")])


# --------------------------------------------------------------------------- run and overrides


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t is not None else UNKNOWN


def override_warnings(run: Run) -> list[str]:
    """Plain warnings for overrides that shorten the published suite (a 2 s run must not read like it)."""
    if run.runtime_override is None and (run.scale is None or run.scale >= 1):
        return []
    try:
        suite = parse_suite(run.suite_text, run.suite_source)
        app = suite.app is not None
        said: int | None = suite.app.time if suite.app is not None else \
            max((c.workload.runtime for c in suite.cells), default=None)
    except (LabError, ValueError):
        said, app = None, False
    out = []
    says = f"suite says {said} s" if said is not None else "the suite's own runtime unknown"
    if run.runtime_override is not None and (said is None or run.runtime_override < said):
        out.append(f"runtime overridden to {run.runtime_override} s per {'point' if app else 'cell'} ({says}): "
                   "not the published methodology")
    if run.scale is not None and run.scale < 1:
        what = "each point's time and warm-up, and the data set" if app else "runtimes, ramps, precondition rounds"
        out.append(f"{'durations and data' if app else 'durations'} scaled by {run.scale:g} ({what}; {says}): "
                   "not the published methodology")
    return out


def run_rows(run: Run, warnings: Sequence[str]) -> Rows:
    return [("run", run.id), ("suite", run.suite_name), ("suite source", text(run.suite_source)),
            ("suite sha256", text(run.suite_sha256)),
            *([] if run.topology else [("host", text(run.host))]), ("submitted", _when(run.submitted_at)),
            ("started", _when(run.started_at)), ("ended", _when(run.ended_at)),
            ("state", _join(run.state, run.reason, sep=": ")),
            *override_rows(run),
            ("live telemetry", "on (per-second fio snapshots)" if run.live else "off"),
            *(("warning", w) for w in warnings)]


# --------------------------------------------------------------------------- describe


def _app_tool(res: Result | None) -> str:
    """``sysbench 1.0.20, server 10.11.6-MariaDB``: what measured an application run (its latest result)."""
    if res is None:
        return UNKNOWN
    m: Any = res.metrics if isinstance(res.metrics, dict) else {}
    tool = getattr(res, "tool", None) or m.get("tool")
    version = getattr(res, "tool_version", None) or m.get("tool_version")
    server = m.get("server_version")
    return f"{text(tool)} {text(version)}" + (f", server {server}" if server else "")


def _main_result(detail: RunDetail) -> Result | None:
    """The result whose provenance stands for the run: the latest measured one (facts as last registered)."""
    measured = [detail.results[st.id] for st in detail.steps if st.id in detail.results]
    return measured[-1] if measured else None


def _change(name: str, steps: Sequence[tuple[Step, HealthSnapshot, HealthSnapshot]], attr: str) -> str | None:
    """``media errors 0 → 0`` over the steps: the first reading before, the last after, and how much it grew
    during the steps (None when the device does not report it)."""
    first, last = getattr(steps[0][1], attr), getattr(steps[-1][2], attr)
    if first is None or last is None:
        return None
    during = sum(g for _, b, a in steps if (g := grew(attr, b, a)) is not None)
    return f"{name} {first} → {last}" + (f" (+{during} during the steps)" if during else "")


HEALTH_COUNTERS = (("media errors", "media_errors"), ("error log entries", "error_log_entries"),
                   ("minutes over the warning temperature", "warning_temp_minutes"),
                   ("thermal throttle transitions", "throttle_transitions"))


def _health_by_device(detail: RunDetail) -> tuple[dict[str, list[tuple[Step, HealthSnapshot, HealthSnapshot]]],
                                                  dict[str, str]]:
    """Per DUT name its (step, before, after) snapshots in the order of the steps, and per DUT the first reading
    that failed (with its step)."""
    steps: dict[str, list[tuple[Step, HealthSnapshot, HealthSnapshot]]] = {}
    errors: dict[str, str] = {}
    for st in sorted(detail.steps, key=lambda st: (st.seq, st.round)):
        res = detail.results.get(st.id)
        raw = (res.provenance or {}).get("drive_health") if res is not None else None
        if not isinstance(raw, dict):
            continue
        try:
            health = DriveHealth.model_validate(raw)
        except ValueError:
            continue
        after = {r.name: r for r in health.after}
        for r in (*health.before, *health.after):
            if r.error:
                errors.setdefault(r.name, f"{r.error} (step {st.name})")
        for b in health.before:
            a = after.get(b.name)
            if a is not None and b.snapshot is not None and a.snapshot is not None:
                steps.setdefault(b.name, []).append((st, b.snapshot, a.snapshot))
    return steps, errors


def drive_health_rows(detail: RunDetail) -> Rows:
    """Per DUT, what the drive itself said around the run's fio steps (labcontract.drivehealth): temperature
    (first, last, highest), what it counted written during the steps, errors, warnings and thermal throttling;
    every step after which the drive raised a critical warning or counted new media errors is named."""
    by_device, errors = _health_by_device(detail)
    rows: Rows = []
    for name, steps in by_device.items():
        temps = [t for _, b, a in steps for t in (b.temperature_c, a.temperature_c) if t is not None]
        parts = [f"{steps[0][1].source} around {len(steps)} step(s)"]
        if temps:
            parts.append(f"temperature {steps[0][1].temperature_c} → {steps[-1][2].temperature_c} °C "
                         f"(highest {max(temps)} °C)")
        written = [w for _, b, a in steps if (w := bytes_written(b, a)) is not None]
        if written:
            parts.append(f"the drive counted {_fmt_bytes(sum(written))} written during the steps")
        parts += [c for label, attr in HEALTH_COUNTERS if (c := _change(label, steps, attr)) is not None]
        warns = sorted({a.critical_warning for _, _, a in steps if a.critical_warning})
        parts.append(f"critical warning {', '.join(f'0x{w:02x}' for w in warns)}" if warns
                     else "no critical warning")
        if steps[-1][2].percent_used is not None:
            parts.append(f"{steps[-1][2].percent_used}% of its rated endurance used")
        rows.append((f"drive health: {name}", "; ".join(parts)))
        for st, b, a in steps:
            flagged = [f"critical warning 0x{a.critical_warning:02x}"] if a.critical_warning else []
            flagged += [f"{g} new media error(s)"] if (g := grew("media_errors", b, a)) else []
            if flagged:
                rows.append((f"drive health: {name}, after step {st.name}", ", ".join(flagged)))
    rows += [(f"drive health: {name}", f"not read: {why}") for name, why in errors.items() if name not in by_device]
    return rows


def _fmt_bytes(n: int) -> str:
    return f"{n / 1e9:,.2f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


def _network_sections(detail: RunDetail) -> list[tuple[str, Rows]]:
    topo = detail.run.topology or {}
    by_host: dict[str, Result] = {}
    for st in detail.steps:
        if st.id in detail.results:
            by_host[st.host] = detail.results[st.id]
    hosts = [topo.get("target"), *(topo.get("initiators") or [])]
    net = [("target", text(topo.get("target"))), ("initiators", text(", ".join(topo.get("initiators") or []))),
           ("tool", text(topo.get("tool"))), ("paths", text(", ".join(map(str, topo.get("paths") or [])))),
           ("MTUs", text(", ".join(dict.fromkeys(str(st.cell.get("mtu")) for st in detail.steps
                                                 if st.cell.get("mtu") is not None)))),
           ("path modes", text(", ".join(dict.fromkeys(str(st.cell.get("paths")) for st in detail.steps
                                                       if st.cell.get("paths")))))]
    out: list[tuple[str, Rows]] = [("Network", net)]
    for i, h in enumerate(hosts):
        res = by_host.get(str(h))
        p = res.provenance if res is not None else {}
        role = "target" if i == 0 else "initiator"
        out.append((f"Platform: {role} {text(h)}", platform_rows(p.get("host") or {"hostname": h},
                                                                 agent_version=p.get("agent_version"))))
    return out


def describe(detail: RunDetail, read_artifact: ReadArtifact | None = None) -> Provenance:
    """The run's provenance (see the module docstring), as its result kind describes it (:data:`DESCRIBERS`).
    ``read_artifact`` (``ArtifactStore.read``) lets it name the exact purge commands and the DUT facts recorded
    after the run; without it they are summarised."""
    return DESCRIBERS.get_or_fail(run_kind(detail))(detail, read_artifact)


def _describe_network(detail: RunDetail, _read_artifact: ReadArtifact | None) -> Provenance:
    """A network run: the topology, then each host's platform (the target's first)."""
    run = detail.run
    warnings = override_warnings(run)
    sections = [*_network_sections(detail), ("Run", run_rows(run, warnings))]
    os_name = text(next((s[1] for t, rows in sections if t.startswith("Platform") for s in rows
                         if s[0] == "OS" and s[1] != UNKNOWN), None))
    return Provenance(device_label=f"network {text((run.topology or {}).get('tool'))}", os=os_name,
                      op_modes=_modes(detail), partial=run.state not in TERMINAL_RUN, sections=sections,
                      warnings=warnings)


def _describe_devices(detail: RunDetail, read_artifact: ReadArtifact | None, *,
                      extra_platform: Callable[[Result | None], Rows] = lambda _res: []) -> Provenance:
    """A run on a host's DUTs (storage, application): its platform, the devices' state and health, the run."""
    run = detail.run
    res = _main_result(detail)
    prov: dict[str, Any] = res.provenance if res is not None else {}
    host = prov.get("host") or {}
    modes = _modes(detail)
    warnings = override_warnings(run)
    devices = prov.get("devices") or [{"path": p} for p in (run.devices or [run.device])]
    platform = platform_rows(host, agent_version=prov.get("agent_version"),
                             fio_version=res.fio_version if res is not None else None) + extra_platform(res)
    sections = [("Platform", platform),
                ("Device state", device_state_rows(detail, modes, prov, read_artifact)),
                ("Run", run_rows(run, warnings))]
    health = drive_health_rows(detail)
    if health:
        sections.insert(2, ("Drive health", health))
    imported = imported_rows(detail)   # orchestrator.fiorun
    if imported:      # measured outside the lab (labctl import-fio): what each result was computed from
        sections.insert(0, ("Imported fio output", imported))
    return Provenance(device_label=device_label(devices), os=text(host.get("os")), op_modes=modes,
                      partial=run.state not in TERMINAL_RUN, sections=sections,
                      devices=[_device_row(d, host) for d in devices], warnings=warnings)


def _modes(detail: RunDetail) -> list[str]:
    return cell_op_modes(st.cell for st in detail.steps if st.kind not in ("net", "facts"))


Describe = Callable[[RunDetail, "ReadArtifact | None"], Provenance]
# the provenance of each result kind (orchestrator.cellmetrics.RESULT_KINDS; a test checks every kind has one)
DESCRIBERS: Registry[Describe] = Registry("provenance of a result kind")
DESCRIBERS.add("storage", _describe_devices)
DESCRIBERS.add("app", lambda detail, read: _describe_devices(detail, read,
                                                             extra_platform=lambda res: [("workload", _app_tool(res))]))
DESCRIBERS.add("net", _describe_network)
