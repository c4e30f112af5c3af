"""Step kinds, controller side: what the controller does with a step of each kind.

The controller's generic machinery (scheduling, attempts, retries, outcomes refused / timeout / cancelled /
error, watchdogs) knows nothing of a kind; everything kind-specific is here, one module per kind, looked up
by ``get(step.kind)``:

- which step kinds it handles (``names``) and whether the controller runs it itself (``local``: a playbook),
- the interlock operation of a step (``operation``: purge, op_mode, write, or None),
- how long it may take (``expected_seconds``, before the controller's margin),
- its start message (``start_message``),
- which steps start together with it (``cohort``: a network cell starts all its hosts' steps in one pass),
- how a successful end is stored (``store``: artifacts to Result rows or other tables, and what follows,
  e.g. a precondition round deciding the next; raises :class:`StepOutputError` when the output is unusable:
  the attempt then ends as an error with that reason),
- what follows any end (``after_end``: a failed precondition group is recorded, a network cell closes).

Modules: :mod:`.fio` (measure, precondition), :mod:`.purge`, :mod:`.net`, :mod:`.local` (provision,
dut_state, facts), :mod:`.app` (application workloads); :mod:`.common` holds what several share (the
provenance of a result row).
"""

from __future__ import annotations

from labcontract.registry import Registry
from orchestrator.kinds.base import KindContext, StepKind

_KINDS: Registry[StepKind] = Registry("step kind")


def register(kind: StepKind) -> StepKind:
    """Register ``kind`` for each of its names (a name registered twice is a programming error)."""
    for name in kind.names:
        _KINDS.add(name, kind)
    return kind


def get(name: str) -> StepKind:
    """The kind of a step; an unknown one raises LookupError naming the known ones."""
    return _KINDS.get_or_fail(name)


def names() -> frozenset[str]:
    return frozenset(_KINDS)


def agent_kinds() -> dict[str, tuple[str, int]]:
    """Each step kind an agent runs: the agent's kind (the start message's action) and the least version needed."""
    return {n: k.agent_kind for n, k in _KINDS.items() if k.agent_kind is not None}


def local_names() -> frozenset[str]:
    """The kinds the controller runs itself."""
    return frozenset(n for n, k in _KINDS.items() if k.local)


def _register_builtin() -> None:
    from orchestrator.kinds import app, fio, local, net, purge

    for kind in (fio.KIND, purge.KIND, net.KIND, local.KIND, app.KIND):
        register(kind)


_register_builtin()

__all__ = ["KindContext", "StepKind", "agent_kinds", "get", "local_names", "names", "register"]
