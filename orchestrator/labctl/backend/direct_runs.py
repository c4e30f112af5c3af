"""The direct backend's runs: submit and the run commands to the controller over the broker; the queue, the runs,
a run and its live view read from the store (and the agents' live keys in the broker)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.labctl.backend.base import QueueView
from orchestrator.labctl.backend.directbase import DirectBase

if TYPE_CHECKING:
    from labcontract.errors import Problem


class DirectRuns(DirectBase):

    def submit(self, suite_ref: str, host: str | None, devices: list[str], *, initiators: list[str],
               runtime: int | None, scale: float | None, live: bool, priority: int, not_before: float | None,
               expires_at: float | None, max_rounds: int | None, repeat: int | None, problems: list[Problem],
               wait: bool) -> str:
        from labcontract.errors import Problem, SubmissionError
        from orchestrator.runs.client import ControllerClient, check_submission

        try:          # judged as the controller will judge it (orchestrator.runs.submission.judge)
            suite = check_submission(suite_ref, host or "", devices, self.sessions(), initiators, runtime=runtime,
                                     scale=scale, repeat=repeat, max_rounds=max_rounds)
        except SubmissionError as e:
            raise SubmissionError(e.source, [*e.problems, *problems]) from None
        problems = list(problems)
        if suite.network is None and host is None:
            problems.append(Problem("--host", "required (the host whose DUTs the suite runs on)"))
        if problems:
            raise SubmissionError(suite.source, problems)
        client = ControllerClient(self.redis())
        run_id, reply = client.submit(
            suite, host or "", devices, runtime, scale, live, priority=priority, not_before=not_before,
            expires_at=expires_at, initiators=initiators, max_rounds=max_rounds, repeat=repeat)
        if reply is None:
            seen = client.controller_seen()
            when = f" (last seen {time.time() - seen:,.0f} s ago)" if seen is not None else ""
            print(f"warning: the controller{when} has not answered yet; the submission waits in the broker",
                  file=sys.stderr)
        return run_id

    def run_command(self, run_id: str, what: str, reason: str | None = None) -> None:
        from orchestrator.labctl.common import checked_reply

        client = self.controller()
        if what == "cancel":
            reply = client.cancel(run_id, reason or "cancelled by user")
        elif what in ("pause", "resume", "rerun"):
            reply = getattr(client, what)(run_id)
        else:
            raise ValueError(f"not a run command: {what!r}")
        checked_reply(reply)

    def watch(self, run_id: str, timeout_s: float | None, console: Any) -> int:
        from orchestrator.labctl.watch import watch_run

        return watch_run(self.sessions(), self.redis(), run_id, console, timeout_s=timeout_s)

    def queue(self) -> QueueView:
        """What runs, what waits, and what each waiting run waits for (the scheduler's own decision)."""
        from sqlalchemy import select

        from orchestrator.kinds import agent_kinds
        from orchestrator.queries import heartbeat_timeout, host_up
        from orchestrator.runs.scheduling import decide
        from orchestrator.store.models import Host, Run

        now = time.time()

        db = self.sessions()
        gone = controller_unreachable(db, now)     # then the hosts only look silent: nothing is applied
        warning = (f"the controller is unreachable: {gone}; the states below are as it left them (hosts may look "
                   "down because nobody reads their heartbeats)") if gone else None
        rows: list[tuple[str, ...]] = []
        with db() as s:
            runs = list(s.scalars(select(Run).where(Run.state.in_(["QUEUED", "RUNNING", "PAUSED"]))))
            hosts = {h.name: h for h in s.scalars(select(Host))}
            limit = heartbeat_timeout(s)      # the controller's own: a host is down when it says so

            def up(h: Host | None) -> bool:
                return host_up(h, now, limit)

            decision = decide(runs, hosts, now, up, needs=agent_kinds())
            if gone:
                decision.waits.update({r.id: "controller unreachable" for r in runs})
            starting = {r.id for r, _st in decision.dispatch} if not gone else set()
            order = sorted(runs, key=lambda r: (r.state == "QUEUED", -r.priority, r.submitted_at))
            for r in order:
                done = sum(1 for st in r.steps if st.state in ("SUCCEEDED", "FAILED", "CANCELLED"))
                running = next((st.name for st in r.steps if st.state in ("DISPATCHED", "RUNNING", "LOST")), None)
                status = decision.waits.get(r.id) or (f"running {running}" if running else
                                                      "starting" if r.id in starting else "")
                rows.append((r.id, r.suite_name, str(r.priority), f"{r.host}:{','.join(r.devices or [r.device])}",
                             r.state, f"{done}/{len(r.steps)}", status))
        return QueueView(rows, warning)

    def runs_table(self, limit: int) -> Any:
        from rich.table import Table

        from orchestrator.queries import list_runs

        table = Table("run", "suite", "target", "state", "steps", "submitted", "reason")
        with self.sessions()() as s:
            for r, done, total in list_runs(s, limit):
                lab = f"{r.lab}: " if r.lab else ""          # a run imported from another lab (labctl import)
                table.add_row(r.id, r.suite_name, f"{lab}{r.host}:{r.device}", r.state, f"{done}/{total}",
                              time.strftime("%m-%d %H:%M:%S", time.localtime(r.submitted_at)), r.reason[:60])
        return table

    def show_run(self, ref: str, rounds: bool, console: Any) -> None:
        from orchestrator.queries import run_detail
        from orchestrator.report import print_run

        with self.sessions()() as s:
            print_run(console, run_detail(s, ref), rounds=rounds, artifact_root=self.config.artifact_dir)

    def markdown_report(self, ref: str) -> Path:
        from orchestrator.queries import run_detail
        from orchestrator.report import write_markdown

        with self.sessions()() as s:
            return write_markdown(run_detail(s, ref), self.config.report_dir, self.config.artifact_dir)


def controller_unreachable(db: Any, now: float) -> str | None:
    """Why the controller is not working the queue (its lease, orchestrator.store.lease), or None when it is."""
    from orchestrator.store.lease import absence, current

    try:
        lease = current(db)
    except Exception:             # a store from before the lease (no table): cannot tell
        return None
    return absence(lease, now)
