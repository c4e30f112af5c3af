"""Which run gets which device next: a pure decision over the store's runs, used by the controller's
scheduler and by ``labctl queue`` (so the queue view says exactly what the scheduler does).

Rules, in order:

1. A started run (RUNNING or PAUSED) holds all its devices until it ends; nothing preempts it.
2. Waiting runs are considered by priority (high first), then submission time. One that may not start
   yet (``not_before``), whose host is down, or whose devices are held, waits, and reserves its devices
   against lower-priority runs, so it cannot starve.
   A run whose host or a DUT is quarantined waits (it reserves nothing) until ``labctl hosts release``;
   one on a host whose agent speaks another protocol version waits (with the reason) until it is upgraded, and
   a queued one on a host whose agent lacks a step kind the run needs (or has it at an older version than this
   controller's kinds need; the agent announces its kinds in its facts) waits before it starts, saying which (a
   started run is not held by it: a step its agent cannot run is refused by the agent and ends, freeing the run's
   devices, as before).
3. Backfill: a lower-priority run may still use devices reserved by a waiting run when it is expected
   to finish before that run could start (the holders' expected remaining time), so it delays nobody.
4. A run starts only when every device it names is free: all at once, never piecemeal. A network run
   holds every path of every host it uses (target and initiators) the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from labcontract.loadcurve import CURVE
from labcontract.rounds import is_wipc, round_of
from labcontract.suite import Precondition, Rounds, Workload, fio_kind_version
from orchestrator.runs.health import unavailable
from orchestrator.runs.loadcurve import is_maximum
from orchestrator.runs.netgroups import hosts_of
from orchestrator.runs.preconditioning import precondition_of, suite_of
from orchestrator.states import ACTIVE_STEP, RunState, StepState
from orchestrator.store.models import Host, Run, Step

Key = tuple[str, str]          # (host, device path)


@dataclass(frozen=True)
class StepSummary:
    """What the scheduler needs of the steps of many runs, from two queries instead of loading every
    step of every run on each pass: the runs with a step in flight, and each run's next PENDING step.

    Made ``lazy``, a run's next step is read when the scheduler asks for it (:meth:`next_of`: the few runs a pass
    starts), not for every idle run: the controller's pass, whose cost then no longer grows with the steps queued."""

    busy: frozenset[str]
    next: dict[str, Step]
    pending: dict[str, frozenset[tuple[str, str]]] = field(default_factory=dict)   # run -> {(step host, kind)}
    session: Session | None = None          # lazy: where next_of reads a run's next step

    @classmethod
    def of(cls, s: Session, run_ids: list[str], *, kinds: bool = True, lazy: bool = False) -> StepSummary:
        """``kinds``: read each idle run's pending (host, kind) pairs too (only needed when a host announced its
        step kinds: :func:`kinds_lacking`)."""
        if not run_ids:
            return cls(frozenset(), {})
        wanted = set(run_ids)          # the runs in flight are few: read them all, keep those asked about
        busy = frozenset(r for r in s.scalars(select(Step.run_id).where(
            Step.state.in_([str(x) for x in ACTIVE_STEP])).distinct()) if r in wanted)
        idle = [r for r in run_ids if r not in busy]          # a busy run dispatches nothing this pass
        if not idle:
            return cls(busy, {}, session=s if lazy else None)
        left: dict[str, set[tuple[str, str]]] = {}
        for run_id, host, kind in s.execute(select(Step.run_id, Step.host, Step.kind).where(
                Step.run_id.in_(idle), Step.state == StepState.PENDING).distinct()) if kinds else ():
            left.setdefault(run_id, set()).add((host, kind))
        pending_kinds = {r: frozenset(p) for r, p in left.items()}
        if lazy:
            return cls(busy, {}, pending_kinds, session=s)
        rank = func.row_number().over(partition_by=Step.run_id, order_by=(Step.seq, Step.round)).label("rank")
        pending = (select(Step.id, rank).where(Step.run_id.in_(idle), Step.state == StepState.PENDING)
                   .subquery())
        ids = list(s.scalars(select(pending.c.id).where(pending.c.rank == 1)))
        query = select(Step).where(Step.id.in_(ids)).options(selectinload(Step.attempts))
        steps = s.scalars(query).all() if ids else []
        return cls(busy, {st.run_id: st for st in steps}, pending_kinds)

    def next_of(self, run_id: str) -> Step | None:
        """The run's next PENDING step (None: none)."""
        if self.session is None or run_id in self.next:
            return self.next.get(run_id)
        step = self.session.scalars(select(Step).where(Step.run_id == run_id, Step.state == StepState.PENDING)
                                    .order_by(Step.seq, Step.round).limit(1)
                                    .options(selectinload(Step.attempts))).first()
        if step is not None:
            self.next[run_id] = step
        return step


@dataclass
class Decision:
    dispatch: list[tuple[Run, Step]] = field(default_factory=list)   # start these steps now
    waits: dict[str, str] = field(default_factory=dict)              # run id -> what it waits for


def devices_of(run: Run) -> set[Key]:
    """What a run reserves: its host's DUTs; for a network run, every path on every host it uses."""
    if run.topology:
        return {(h, f"net:{p}") for h in hosts_of(run) for p in run.topology["paths"]}
    return {(run.host, d) for d in (run.devices or [run.device])}


def hosts_down(run: Run, hosts: dict[str, Host], host_up: Callable[[Host | None], bool]) -> str | None:
    down = [h for h in hosts_of(run) if not host_up(hosts.get(h))]
    return f"host{'s' if len(down) > 1 else ''} {', '.join(down)} {'are' if len(down) > 1 else 'is'} down" \
        if down else None


def incompatible(run: Run, hosts: dict[str, Host]) -> str | None:
    """A host the run uses whose agent speaks another protocol version: nothing is dispatched to it."""
    why = [f"host {h} is incompatible: {host.incompatible}" for h in hosts_of(run)
           if (host := hosts.get(h)) is not None and host.incompatible]
    return "; ".join(why) or None


def kinds_lacking(run: Run, hosts: dict[str, Host], pending: Iterable[tuple[str, str]],
                  needs: Mapping[str, tuple[str, int]]) -> str | None:
    """Why a host the run's pending steps (``(step host, step kind)``; "" is the run's host) go to cannot run one of
    them: its agent announced no such kind, or an older version of it than ``needs`` (step kind -> (the agent's
    kind, least version)) asks for. None when every one can run (or a host announced nothing)."""
    why: list[str] = []
    for step_host, kind in sorted(set(pending)):
        name = step_host or run.host
        host, need = hosts.get(name), needs.get(kind)
        if host is None or need is None or not (have := host.step_kinds):
            continue
        action, version = need
        if action not in have:
            runs = ", ".join(f"{a} {v}" for a, v in sorted(have.items()))
            why.append(f"host {name}'s agent runs no {action} steps (it announced: {runs})")
        elif have[action] < version:
            why.append(f"host {name}'s agent runs {action} steps at version {have[action]}; this controller's "
                       f"{kind} steps need version {version} or later: upgrade the agent")
    return "; ".join(dict.fromkeys(why)) or None


def run_needs(run: Run, needs: Mapping[str, tuple[str, int]]) -> Mapping[str, tuple[str, int]]:
    """``needs`` for this run: its fio steps need the fio kind's version that knows every option its workloads set
    (labcontract.fioextra), so that an older agent is never sent one it does not know."""
    if run.topology:
        return needs
    try:
        version = fio_kind_version(suite_of(run))
    except Exception:  # a stored suite always parsed once; never let a judgement break scheduling
        return needs
    if version <= 1:
        return needs
    return {kind: (action, max(least, version)) if action == "fio" else (action, least)
            for kind, (action, least) in needs.items()}


def run_unavailable(run: Run, hosts: dict[str, Host]) -> str | None:
    """A quarantined host or DUT among what the run uses."""
    if run.topology:
        return next((why for h in hosts_of(run) if (why := unavailable(hosts.get(h), [])) is not None), None)
    return unavailable(hosts.get(run.host), [k[1] for k in devices_of(run)])


def _precondition(run: Run) -> Precondition | None:
    try:
        return precondition_of(run)
    except Exception:  # a stored suite always parsed once; never let an estimate break scheduling
        return None


def _rounds(run: Run) -> Rounds | None:
    try:
        return suite_of(run).phases.rounds
    except Exception:  # as _precondition: an estimate never breaks scheduling
        return None


def step_seconds(step: Step, pc: Precondition | None, *, upper: bool, rounds: Rounds | None = None) -> float:
    """Expected length of a step; a precondition round stands for its whole group, bounded above by
    max_rounds and below by the steady-state window; so does a rounds run's cell (its rounds to come)."""
    if step.workload is None:
        return 60.0                                   # a purge: discard is quick on SSDs
    seconds = float(Workload.model_validate(step.workload).expected_seconds)
    if is_maximum(step):                              # its curve's points follow it, once it has a result
        seconds *= 1 + len(step.cell.get(CURVE) or [])
    if step.kind == "precondition" and pc is not None and not is_wipc(step.cell):
        rounds_left = (pc.max_rounds if upper else pc.window) - step.round + 1
        seconds *= max(rounds_left, 1)
    elif rounds is not None and round_of(step.cell or {}) is not None and step.kind == "measure":
        rounds_left = (rounds.max_rounds if upper else rounds.window) - step.round + 1
        seconds *= max(rounds_left, 1)
    return seconds


def remaining_seconds(run: Run, now: float, *, upper: bool) -> float:
    pc = _precondition(run) if any(st.kind == "precondition" for st in run.steps) else None
    rounds = _rounds(run) if any(st.kind == "measure" and round_of(st.cell or {}) for st in run.steps) else None
    total = 0.0
    for st in run.steps:
        if st.state == StepState.PENDING:
            total += step_seconds(st, pc, upper=upper, rounds=rounds)
        elif st.state in ACTIVE_STEP:
            att = st.attempts[-1] if st.attempts else None
            spent = now - att.fio_started_at if att is not None and att.fio_started_at else 0.0
            total += max(step_seconds(st, pc, upper=upper, rounds=rounds) - spent, 0.0)
    return total


def decide(runs: list[Run], hosts: dict[str, Host], now: float, host_up: Callable[[Host | None], bool],
           summary: StepSummary | None = None, needs: Mapping[str, tuple[str, int]] | None = None,
           limit: int | None = None) -> Decision:
    """``summary``: the runs' steps in brief (:meth:`StepSummary.of`); without it, each run's steps are read.
    ``needs``: each step kind's agent kind and least version (``orchestrator.kinds.agent_kinds``); None judges no
    host by its announced kinds. ``limit``: decide no further once that many steps are to start (the controller's
    pass starts no more): ``dispatch`` is the first ``limit`` of the whole decision's, ``waits`` partial."""
    d = Decision()

    def full() -> bool:
        return limit is not None and len(d.dispatch) >= limit

    def busy(run: Run) -> bool:
        return run.id in summary.busy if summary else any(st.state in ACTIVE_STEP for st in run.steps)

    def upcoming(run: Run) -> Step | None:
        return summary.next_of(run.id) if summary else next_pending(run)

    def lacking(run: Run) -> str | None:
        if not needs:
            return None
        pending = (summary.pending.get(run.id, frozenset()) if summary else
                   {(st.host, st.kind) for st in run.steps if st.state == StepState.PENDING})
        return kinds_lacking(run, hosts, pending, run_needs(run, needs))

    held: dict[Key, Run] = {}
    started = [r for r in runs if r.state in (RunState.RUNNING, RunState.PAUSED)]
    waiting = sorted((r for r in runs if r.state == RunState.QUEUED), key=lambda r: (-r.priority, r.submitted_at))
    for run in started:
        for key in devices_of(run):
            held[key] = run
    for run in started:
        if full():
            return d
        if run.state == RunState.PAUSED:
            d.waits[run.id] = "paused (holds its devices)"
        elif not busy(run):
            if (down := incompatible(run, hosts) or hosts_down(run, hosts, host_up)) is not None:
                d.waits[run.id] = down
            else:
                nxt = upcoming(run)
                if nxt is not None:
                    d.dispatch.append((run, nxt))
    reserved: dict[Key, tuple[Run, float]] = {}       # key -> (waiting run, seconds until it could start)
    for run in waiting:
        if full():
            return d
        keys = devices_of(run)
        if run.not_before and run.not_before > now:
            d.waits[run.id] = "not before " + time.strftime("%Y-%m-%d %H:%M", time.localtime(run.not_before))
            continue
        blockers = sorted({held[k].id for k in keys if k in held})
        if (down := incompatible(run, hosts) or hosts_down(run, hosts, host_up) or lacking(run)) is not None:
            d.waits[run.id] = down
            continue
        quarantined = run_unavailable(run, hosts)
        if quarantined is not None:
            d.waits[run.id] = quarantined
            continue
        if blockers:
            holders = [held[k] for k in keys if k in held]
            shadow = max(remaining_seconds(h, now, upper=False) for h in holders)
            for k in keys:
                reserved.setdefault(k, (run, shadow))
            taken = sorted(f"{k[1]}" for k in keys if k in held)
            d.waits[run.id] = f"device(s) {', '.join(taken)} held by run(s) {', '.join(blockers)}"
            continue
        conflicts = [(k, reserved[k]) for k in keys if k in reserved]
        if conflicts:
            need = remaining_seconds(run, now, upper=True)
            blocking = [(k, w, s) for k, (w, s) in conflicts if need > s]
            if blocking:
                k, w, _s = blocking[0]
                d.waits[run.id] = (f"device {k[1]} reserved for run {w.id} (priority {w.priority}); too long to "
                                   f"backfill (~{need:.0f}s)")
                continue
        nxt = upcoming(run)
        if nxt is None:
            continue
        for k in keys:
            held[k] = run
        d.dispatch.append((run, nxt))
    return d


def next_pending(run: Run) -> Step | None:
    """The plan's next step (a re-purge has a negative round: it goes before the step it precedes)."""
    return min((st for st in run.steps if st.state == StepState.PENDING), key=lambda st: (st.seq, st.round),
               default=None)
