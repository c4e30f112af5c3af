"""``purge``: the agent discards every block of the run's devices before a measurement; nothing is stored."""

from __future__ import annotations

from labcontract import interlock
from labcontract.protocol import StartStep
from orchestrator.kinds.base import KindContext
from orchestrator.kinds.common import BaseKind, generic_start
from orchestrator.store.models import Attempt, Run, Step


class PurgeKind(BaseKind):
    names = ("purge",)
    agent_kind = ("purge", 1)
    retryable = True

    def operation(self, step: Step) -> str | None:
        rw = step.workload.get("rw") if step.workload else None
        return interlock.destructive_operation("purge", rw)

    def start_message(self, ctx: KindContext, run: Run, step: Step, att: Attempt) -> StartStep:
        return generic_start(ctx, run, step, att, action="purge")


KIND = PurgeKind()
