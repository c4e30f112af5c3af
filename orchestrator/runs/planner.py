"""Suite -> plan: the steps a suite expands to on a device (or device group).

Per OP mode, cells run in suite order. Consecutive cells of one profile that are the same
workload (rw, bs, read share, random share, footprint) form a group; with preconditioning,
each group is preceded by a purge (when the suite asks for it) and a precondition step: round 1
of the group's workload at the precondition's threads x queue depth. The controller appends
further rounds until steady state or ``max_rounds``.

A suite's ``repeat: N`` (or ``--repeat``) runs every measured cell N times: step ``<name>.rep<k>``, the cell
holding ``repeat: k`` (which never identifies the cell, see :mod:`orchestrator.cells`). ``interleaved`` (the
default) runs the segment's cells once, then all again, ...; a segment is a precondition group (its cells share
the steady state they were preconditioned to) or the cells of an OP mode without preconditioning. Drift of the
device or the host over the segment then spreads over every cell's repeats instead of landing on one cell.
``back_to_back`` runs each cell's repeats in a row (a cell's spread then shows short-term noise only).

A suite with ``phases.rounds`` (SNIA PTS-E's form, :mod:`labcontract.rounds`) plans per OP mode [purge], the
workload-independent preconditioning (two ``wipc.pass<N>`` steps of kind ``precondition``) and round 1: every
measured cell once, its cell holding ``round: 1``. The controller appends the next round when a round ends and the
tracked cell is not steady yet (:mod:`orchestrator.runs.rounds`).

A cell with a ``load_curve`` is measured as usual (its maximum); its cell holds the curve's percentages, and
when its result is stored the controller adds one rate-limited step per percentage right after it
(:mod:`orchestrator.runs.loadcurve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from labcontract.apps import ExternalParams
from labcontract.appsuite import app_start, fs_size_bytes, ladder, point_dim, test_name
from labcontract.fioextra import NOT_IN_PRECONDITION
from labcontract.fiojob import render_job, workload_lines
from labcontract.loadcurve import CURVE
from labcontract.rounds import ROUND, WIPC, WIPC_BS, WIPC_IODEPTH, WIPC_PASSES, round_of
from labcontract.stepkinds import StepKindName
from labcontract.suite import (
    Cell,
    Precondition,
    Suite,
    Workload,
    cell_name,
    op_footprint,
    starts_precondition_group,
    with_overrides,
)

StepKind = StepKindName
TARGET_PLACEHOLDER = "${TARGET}"


@dataclass(frozen=True)
class PlannedStep:
    seq: int
    kind: StepKind
    name: str
    workload: Workload | None
    job_text: str
    cell: dict[str, Any] = field(default_factory=dict)   # profile, op_mode, swept dims
    note: str = ""
    host: str | None = None       # a network step's host (None: the run's host)

    @property
    def round(self) -> int:
        """A precondition's round (1) or a rounds run's (:mod:`labcontract.rounds`); 0 for any other step."""
        return 1 if self.kind == "precondition" else (round_of(self.cell) or 0)

    def step_id(self, run_id: str) -> str:
        return f"{run_id}-s{self.seq:03d}" + (f"-r{self.round:03d}" if self.round else "")


@dataclass(frozen=True)
class NetHosts:
    """Who takes part in a network run: the target and its initiators."""

    target: str
    initiators: tuple[str, ...]

    @property
    def all(self) -> tuple[str, ...]:
        return (self.target, *self.initiators)


def net_hosts_of(suite: Suite, target: str | None = None, initiators: Sequence[str] = ()) -> NetHosts:
    """The suite's hosts, the submission's taking precedence; placeholders where neither names one."""
    net = suite.network
    assert net is not None
    inis = tuple(initiators) or net.initiators or ("${INITIATOR0}",)
    return NetHosts(target or net.target or TARGET_PLACEHOLDER, inis)


def net_step_text(role: str, workload: Workload, paths: Sequence[str], mtu: int, tool: str) -> str:
    """What a network step does, as ``labctl suite render`` shows it (the agent renders the fio job
    itself, one section per path, from the addresses its host declares)."""
    if role == "target":
        return (f"# target: count the NIC bytes of path(s) {', '.join(paths)} for the initiators' "
                f"{workload.expected_seconds}s and a little longer (MTU {mtu})\n")
    return (f"# initiator: {tool} over path(s) {', '.join(paths)} at MTU {mtu}, one process per path\n"
            + "\n".join(workload_lines(workload)) + f"\nruntime={workload.runtime}\n")


def precondition_workload(cell: Cell, pc: Precondition, n_op_modes: int) -> Workload:
    """The cell's own workload at the precondition's load, one round long (name without round)."""
    dims = {k: v for k, v in cell.dims.items() if k not in ("numjobs", "iodepth")}
    name = cell_name(cell.profile, dims, cell.op_mode, n_op_modes)
    return cell.workload.model_copy(update={
        "name": f"precondition.{name}", "numjobs": pc.numjobs, "iodepth": pc.iodepth, "runtime": pc.round,
        "ramp_time": 0, "time_based": True, **dict.fromkeys(NOT_IN_PRECONDITION)})   # full load, no verify


def round_workload(base: Workload, round_no: int) -> Workload:
    return base.model_copy(update={"name": f"{base.name}.round{round_no}"})


def repeat_order(items: Sequence[Any], repeat: int, order: str) -> list[tuple[Any, int]]:
    """``(item, k)`` for k in 1..repeat: each pass over ``items`` in turn (interleaved), or each item's
    repeats in a row (back_to_back)."""
    if order == "back_to_back":
        return [(it, k) for it in items for k in range(1, repeat + 1)]
    return [(it, k) for k in range(1, repeat + 1) for it in items]


def repeated(name: str, k: int, repeat: int) -> str:
    return f"{name}.rep{k}" if repeat > 1 else name


def plan(suite: Suite, devices: Sequence[str], *, runtime: int | None = None,
         scale: float | None = None, net_hosts: NetHosts | None = None,
         device_bytes: int | None = None, repeat: int | None = None) -> list[PlannedStep]:
    """The steps of ``suite`` on ``devices``. ``device_bytes`` (the smallest named DUT's size) sizes an
    application suite's emulated OP footprint (:func:`plan_app`); storage suites give fio a percentage.
    ``repeat`` (a submission's) replaces the suite's own."""
    suite = with_overrides(suite, runtime=runtime, scale=scale, repeat=repeat)
    if suite.app is not None:
        return plan_app(suite, device_bytes)
    if suite.network is not None:
        return plan_network(suite, net_hosts or net_hosts_of(suite))
    pc = suite.phases.precondition
    steps: list[PlannedStep] = []

    def add(kind: StepKind, name: str, workload: Workload | None, cell: dict[str, Any], note: str = "") -> None:
        job = render_job(workload, devices) if workload is not None else ""
        steps.append(PlannedStep(seq=len(steps), kind=kind, name=name, workload=workload, job_text=job,
                                 cell=cell, note=note))

    provision = suite.phases.provision
    purge_kind: StepKind = "dut_state" if provision else "purge"
    if provision:
        add("provision", "provision.host", None, {})
        add("facts", "facts.before", None, {"phase": "before"})
    for op_mode in suite.op_modes:
        cells = [c for c in suite.cells if c.op_mode == op_mode]
        any_pc = any(c.precondition for c in cells)
        mode = op_mode.replace(":", "")
        if (suite.phases.purge and not any_pc) or (provision and not suite.phases.purge):
            add(purge_kind, f"{purge_kind.replace('_', '-')}.{mode}", None,
                {"op_mode": op_mode, "purge": suite.phases.purge})
        _fp, note = op_footprint(op_mode, None)
        if suite.phases.rounds is not None:
            for i, w in enumerate(wipc_workloads(suite, cells) if suite.phases.rounds.wipc else ()):
                add("precondition", w.name, w, {"op_mode": op_mode, "profile": WIPC, WIPC: i + 1}, note)
            for c in cells:
                w = round_cell_workload(c.workload, 1)
                add("measure", w.name, w, {"op_mode": op_mode, "profile": c.profile, **c.dims, ROUND: 1}, note)
            continue
        for segment in _segments(cells, pc is not None):
            c = segment[0]
            if pc is not None and c.precondition:
                pw = precondition_workload(c, pc, len(suite.op_modes))
                if suite.phases.purge:
                    add(purge_kind, pw.name.replace("precondition.", f"{purge_kind.replace('_', '-')}.", 1), None,
                        {"op_mode": op_mode, "profile": c.profile, "purge": True})
                first = round_workload(pw, 1)
                add("precondition", first.name, first, {"op_mode": op_mode, "profile": c.profile, "round": 1}, note)
            for c, k in repeat_order(segment, suite.repeat, suite.repeat_order):
                w = c.workload if suite.repeat == 1 else \
                    c.workload.model_copy(update={"name": repeated(c.workload.name, k, suite.repeat)})
                rep = {"repeat": k} if suite.repeat > 1 else {}
                curve = {CURVE: list(c.load_curve)} if c.load_curve else {}   # its points follow its result
                add("measure", w.name, w, {"op_mode": op_mode, "profile": c.profile, **c.dims, **rep, **curve}, note)
    if provision:
        add("facts", "facts.after", None, {"phase": "after"})
    return steps


def round_cell_workload(w: Workload, round_no: int) -> Workload:
    """A rounds run's cell in round ``round_no`` (``<cell>.round<N>``: a job section's name)."""
    return w.model_copy(update={"name": f"{w.name.rsplit('.round', 1)[0]}.round{round_no}"})


def wipc_workloads(suite: Suite, cells: Sequence[Cell]) -> list[Workload]:
    """SNIA PTS-E's workload-independent preconditioning of one OP mode's footprint: two passes of 128 KiB
    sequential writes over it (not time based: each ends when the footprint is written, or at ``wipc_limit``)."""
    rounds = suite.phases.rounds
    assert rounds is not None and cells
    first = cells[0]
    prefix = f"{first.op_mode.replace(':', '')}." if len(suite.op_modes) > 1 else ""
    base = first.workload.model_copy(update={
        "rw": "write", "bs": WIPC_BS, "numjobs": 1, "iodepth": WIPC_IODEPTH, "runtime": rounds.wipc_limit,
        "ramp_time": 0, "time_based": False, "rwmixread": None, "percentage_random": None,
        **dict.fromkeys((*NOT_IN_PRECONDITION, "bssplit", "random_distribution", "offset", "offset_increment"))})
    return [Workload.model_validate({**base.model_dump(), "name": f"{prefix}wipc.pass{i}"})
            for i in range(1, WIPC_PASSES + 1)]


def _segments(cells: Sequence[Cell], preconditioned: bool) -> list[list[Cell]]:
    """An OP mode's cells cut where a precondition group starts (each group then one segment)."""
    out: list[list[Cell]] = []
    for i, c in enumerate(cells):
        if not out or (preconditioned and starts_precondition_group(cells, i)):
            out.append([])
        out[-1].append(c)
    return out


def plan_network(suite: Suite, hosts: NetHosts) -> list[PlannedStep]:
    """A network suite: per cell, one step per host with the same ``seq`` (the target's first), started
    together by the controller. The cell's dims carry the MTU and the path mode (single / multi)."""
    net = suite.network
    assert net is not None
    steps: list[PlannedStep] = []
    for seq, (c, k) in enumerate(repeat_order(suite.cells, suite.repeat, suite.repeat_order)):
        paths = net.paths_for(str(c.dims["paths"]))
        mtu = int(c.dims["mtu"])
        w = c.workload if suite.repeat == 1 else \
            c.workload.model_copy(update={"name": repeated(c.workload.name, k, suite.repeat)})
        rep = {"repeat": k} if suite.repeat > 1 else {}
        for role, host in (("target", hosts.target), *(("initiator", h) for h in hosts.initiators)):
            cell = {"op_mode": "stock", "profile": c.profile, **c.dims, **rep, "role": role, "tool": net.tool,
                    "net_paths": list(paths)}
            steps.append(PlannedStep(seq=seq, kind="net", name=f"{w.name}@{host}", workload=w,
                                     job_text=net_step_text(role, w, paths, mtu, net.tool), cell=cell,
                                     host=host))
    return steps


def app_step_name(name: str, op_mode: str, n_op_modes: int) -> str:
    """A step name with the OP mode prefix a storage cell gets when the suite runs several modes."""
    return f"{op_mode.replace(':', '')}.{name}" if n_op_modes > 1 else name


def plan_app(suite: Suite, device_bytes: int | None = None) -> list[PlannedStep]:
    """An application suite, per OP mode: [purge] -> ``<kind>-prepare.<mode>`` -> one step per point of the
    ladder (``oltp_read_write.t8``, ``tpcb-like.c8``; an external workload: one step named after it, no
    prepare). ``job_text`` is the step's :class:`~labcontract.apps.AppStart` as JSON; an ``hp:P`` mode
    limits the filesystem to (100-P)% of ``device_bytes`` (unknown size: the whole device, said in the note)."""
    params, kind = suite.app, suite.kind
    assert params is not None
    steps: list[PlannedStep] = []
    n_modes = len(suite.op_modes)
    dim = point_dim(kind)
    test = test_name(params)

    def add(step_kind: StepKind, name: str, cell: dict[str, Any], job: str = "", note: str = "") -> None:
        steps.append(PlannedStep(seq=len(steps), kind=step_kind, name=name, workload=None, job_text=job,
                                 cell=cell, note=note))

    provision = suite.phases.provision
    purge_kind: StepKind = "dut_state" if provision else "purge"
    if provision:
        add("provision", "provision.host", {})
        add("facts", "facts.before", {"phase": "before"})
    for op_mode in suite.op_modes:
        mode = op_mode.replace(":", "")
        fs = fs_size_bytes(op_mode, device_bytes)
        note = "" if op_mode == "stock" else (
            f"{op_mode} emulated by a filesystem limit: {fs} bytes ({100 - int(op_mode[3:])}% of the DUT)"
            if fs is not None else f"{op_mode}: device size unknown at plan time, the filesystem takes the whole DUT")
        if suite.phases.purge or provision:
            add(purge_kind, f"{purge_kind.replace('_', '-')}.{mode}", {"op_mode": op_mode, "purge": suite.phases.purge})
        if kind != "external":
            add("app", f"{kind}-prepare.{mode}", {"op_mode": op_mode, "app": kind, "phase": "prepare"},
                app_start(kind, params, "prepare", 0, fs).model_dump_json(), note)
        for point, k in repeat_order(ladder(params), suite.repeat, suite.repeat_order):
            rep = {"repeat": k} if suite.repeat > 1 else {}
            if dim is None:
                assert isinstance(params, ExternalParams)
                cell: dict[str, Any] = {**params.params, "op_mode": op_mode, "profile": test, "app": kind, **rep}
                name = test
            else:
                cell = {"op_mode": op_mode, "profile": test, "app": kind, dim: point, **rep}
                name = f"{test}.{dim[0]}{point}"
            add("app", repeated(app_step_name(name, op_mode, n_modes), k, suite.repeat), cell,
                app_start(kind, params, "run", point, fs).model_dump_json(), note)
    if provision:
        add("facts", "facts.after", {"phase": "after"})
    return steps
