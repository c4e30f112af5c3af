"""Commands that act on a run after its end (rerun), on the web service's API tokens (protocol 7) and on the
regressions of the run history (Acknowledge, protocol 8).

Rerun: a run that ended with steps FAILED or CANCELLED gets those steps back to PENDING and goes back to
QUEUED; the scheduler starts them as any queued run's, each with a new attempt (the next number: the earlier
attempts stay as the step's history, shown in reports). Its steps that succeeded keep their results. A
precondition group whose round failed or was cancelled starts again at that round: its record (the rounds that
succeeded) is kept and reopened. A network cell reruns whole (its hosts start together): its earlier partial
results and its NetGroup are dropped.

Tokens: only their SHA-256 arrives and is stored; the commands are accepted only from the web service's stream
(see :meth:`orchestrator.controller.commands.CommandsMixin.handle_command`).
"""

from __future__ import annotations

import logging

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from labcontract.protocol import Acknowledge, Reply, Rerun, TokenCreate, TokenRevoke
from orchestrator.controller.core import ControllerCore
from orchestrator.states import ACTIVE_STEP, TERMINAL_RUN, RunState, StepState
from orchestrator.store.models import ApiToken, NetGroup, PreconditionRecord, RegressionAck, Result, Run, Step

log = logging.getLogger("orchestrator.controller")
RERUN_STATES = frozenset({StepState.FAILED, StepState.CANCELLED, StepState.LOST})
MAX_ACKS = 100_000     # rows of regression_acks (each history query reads them all); past it, Acknowledge is refused


def steps_to_rerun(run: Run) -> list[Step]:
    """The steps a rerun sets back to PENDING: those that failed, were cancelled (or lost and given up); with a
    network cell's every step when one of them is among them (its hosts start together)."""
    picked = [st for st in run.steps if st.state in RERUN_STATES]
    net_seqs = {st.seq for st in picked if st.kind == "net"}
    return [st for st in run.steps if st in picked or (st.kind == "net" and st.seq in net_seqs)]


class AdminMixin(ControllerCore):
    def rerun(self, cmd: Rerun, actor: str) -> Reply:
        with self.sessions.begin() as s:
            run = s.get(Run, cmd.run_id)
            if run is None:
                return Reply(ok=False, errors=(f"unknown run {cmd.run_id!r}",))
            if run.state not in TERMINAL_RUN:
                return Reply(ok=False, run_id=run.id, errors=(
                    f"run {run.id} is {run.state}: only a run that ended can be rerun (cancel it first)",))
            steps = steps_to_rerun(run)
            if not steps:
                return Reply(ok=False, run_id=run.id, errors=(
                    f"run {run.id} ({run.state}) has no failed or cancelled step to run again",))
            if any(st.state in ACTIVE_STEP and st.attempts and st.attempts[-1].state in ACTIVE_STEP
                   for st in steps):
                return Reply(ok=False, run_id=run.id, errors=(
                    f"run {run.id} still has an attempt in flight; rerun once it has ended",))
            self._reset_for_rerun(s, run, steps)
            log.info("run %s rerun by %s: %d step(s) to run again (%s)", run.id, actor, len(steps),
                     ", ".join(st.name for st in steps[:8]) + (" ..." if len(steps) > 8 else ""),
                     extra={"run": run.id, "host": run.host})
            return Reply(ok=True, run_id=run.id)

    def _reset_for_rerun(self, s: Session, run: Run, steps: list[Step]) -> None:
        # a terminal run and terminal steps have no way back in the state machines of a single run
        # (orchestrator.states): a rerun is a new start of what did not succeed, set here on purpose
        for st in steps:
            st.state, st.reason, st.ended_at = str(StepState.PENDING), f"rerun {run.rerun_count + 1}", None
        seqs = {st.seq for st in steps}
        for rec in s.scalars(select(PreconditionRecord).where(PreconditionRecord.run_id == run.id,
                                                              PreconditionRecord.seq.in_(seqs))):
            rec.steady = rec.reached_round = rec.ended_at = None
            rec.verdict = f"reopened by rerun {run.rerun_count + 1}"
        net = [st for st in steps if st.kind == "net"]
        if net:
            net_seqs = {st.seq for st in net}
            s.execute(delete(NetGroup).where(NetGroup.run_id == run.id, NetGroup.seq.in_(net_seqs)))
            s.execute(delete(Result).where(Result.run_id == run.id, Result.step_id.in_([st.id for st in net])))
        run.state, run.reason, run.ended_at = str(RunState.QUEUED), "", None
        run.notified_at, run.notified_sinks = None, None   # its new end is notified again, to every sink
        run.expires_at = None            # an expiry was about its first start
        run.rerun_count = (run.rerun_count or 0) + 1
        run.rerun_at = self.clock()      # the retry policy counts a step's attempts since (controller.retries)

    def acknowledge(self, cmd: Acknowledge, actor: str) -> Reply:
        """Record an acknowledged regression (its id is checked against the history by labctl and the web API,
        which read the store; here it is only recorded). Acknowledging again keeps the first record. Any
        lab:commands writer can name any well-formed id, so the table is bounded (:data:`MAX_ACKS`): past it a
        new acknowledgement is refused with its reason, never millions of rows read by every history query."""
        with self.sessions.begin() as s:
            if s.get(RegressionAck, cmd.regression_id) is None:
                if (s.scalar(select(func.count()).select_from(RegressionAck)) or 0) >= MAX_ACKS:
                    log.warning("acknowledgement of regression %s by %s refused: %d acknowledgements stored",
                                cmd.regression_id, actor, MAX_ACKS)
                    return Reply(ok=False, errors=(
                        f"{MAX_ACKS} regression acknowledgements are stored already: none is added (an operator "
                        "clears table regression_acks of those no longer wanted)",))
                s.add(RegressionAck(regression_id=cmd.regression_id, acknowledged_at=self.clock(), actor=actor,
                                    reason=cmd.reason))
                log.info("regression %s acknowledged by %s", cmd.regression_id, actor)
            return Reply(ok=True)

    def token_command(self, cmd: TokenCreate | TokenRevoke, actor: str) -> Reply:
        with self.sessions.begin() as s:
            row = s.get(ApiToken, cmd.name)
            if isinstance(cmd, TokenRevoke):
                if row is None:
                    return Reply(ok=False, errors=(f"no token {cmd.name!r}",))
                if row.revoked_at is None:
                    row.revoked_at = self.clock()
                    log.info("API token %s (%s) revoked by %s", row.name, row.role, actor)
                return Reply(ok=True)
            if row is not None and row.revoked_at is None:
                return Reply(ok=False, errors=(f"token {cmd.name!r} exists (revoke it first)",))
            if s.scalar(select(ApiToken.name).where(ApiToken.token_sha256 == cmd.token_sha256)) is not None:
                return Reply(ok=False, errors=("that token hash is already stored (make a new token)",))
            if cmd.expires_at is not None and cmd.expires_at <= self.clock():
                return Reply(ok=False, errors=("the token would be expired already (expires_at is past)",))
            if row is not None:            # a revoked token's name is taken again: the old row goes
                s.delete(row)
                s.flush()
            s.add(ApiToken(name=cmd.name, role=cmd.role, token_sha256=cmd.token_sha256, created_at=self.clock(),
                           created_by=actor, expires_at=cmd.expires_at, revoked_at=None))
            log.info("API token %s (%s) created by %s", cmd.name, cmd.role, actor)
            return Reply(ok=True)
