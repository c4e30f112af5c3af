"""The direct backend's administration of the lab: hosts, schedules, tokens, regressions, canaries and
notification sinks, read from the store; every change a command to the controller over the broker."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from orchestrator.labctl.backend.base import CheckedSuite, ScheduleRow, TokenRow
from orchestrator.labctl.backend.directbase import DirectBase

if TYPE_CHECKING:
    from orchestrator.runs.client import ControllerClient
    from orchestrator.stats.history import HistoryStatus, Regression

ADMIN_ACTOR = "labctl-admin"        # who the token commands name on the web service's stream


class DirectAdmin(DirectBase):

    def show_hosts(self, console: Any) -> None:
        from orchestrator.hostview import print_hosts

        with self.sessions()() as s:
            print_hosts(console, s, time.time())

    def release(self, host: str, device: str | None) -> None:
        from orchestrator.labctl.common import checked_reply

        checked_reply(self.controller().release(host, device))

    # --- schedules ---

    def schedule_check(self, suite_ref: str, host: str, devices: list[str], runtime: int | None,
                       scale: float | None) -> CheckedSuite:
        from orchestrator.runs.client import check_submission

        suite = check_submission(suite_ref, host, devices, self.sessions(), runtime=runtime, scale=scale)
        return CheckedSuite(suite_ref, suite.source, suite)

    def schedule_add(self, name: str, suite: CheckedSuite, cron: str, host: str, devices: list[str], *,
                     priority: int, runtime: int | None, scale: float | None,
                     expires_after_s: int | None) -> None:
        from orchestrator.labctl.common import reply_or_fail

        reply = self.controller().schedule_add(name, cron, suite.suite, host, devices, runtime=runtime, scale=scale,
                                               priority=priority, expires_after_s=expires_after_s)
        reply_or_fail(reply, suite.source)

    def schedules(self) -> list[ScheduleRow]:
        from sqlalchemy import select

        from orchestrator.store.models import Schedule

        with self.sessions()() as s:
            return [ScheduleRow(sch.name, sch.cron, str(sch.submit.get("suite_source")), str(sch.submit.get("host")),
                                list(sch.submit.get("devices", [])), sch.next_fire_at, sch.last_fired_at,
                                sch.last_run_id, sch.last_error, sch.disabled_reason)
                    for sch in s.scalars(select(Schedule).order_by(Schedule.name))]

    def schedule_remove(self, name: str) -> None:
        from orchestrator.labctl.common import reply_or_fail

        reply_or_fail(self.controller().schedule_rm(name), name)

    # --- tokens: commands on the web service's stream (the broker user web) ---

    def _web_stream(self) -> ControllerClient:
        from labcontract.protocol import WEB_COMMANDS_STREAM
        from orchestrator.runs.client import ControllerClient

        return ControllerClient(self.redis(), stream=WEB_COMMANDS_STREAM, actor=ADMIN_ACTOR)

    def token_create(self, name: str, role: str, expires_at: float | None) -> str:
        """The token is made here; only its SHA-256 goes to the controller."""
        from orchestrator.labctl.common import checked_reply
        from orchestrator.tokens import new_token, token_hash

        token = new_token()
        checked_reply(self._web_stream().token_create(name, role, token_hash(token), expires_at))
        return token

    def tokens(self) -> list[TokenRow]:
        from sqlalchemy import select

        from orchestrator.store.models import ApiToken

        with self.sessions()() as s:
            return [TokenRow(t.name, t.role, t.created_at, t.created_by or "", t.expires_at, t.revoked_at)
                    for t in s.scalars(select(ApiToken).order_by(ApiToken.name))]

    def token_revoke(self, name: str) -> None:
        from orchestrator.labctl.common import checked_reply

        checked_reply(self._web_stream().token_revoke(name))

    # --- regressions ---

    def regressions(self, *, since: str | None, after: float | None, host: str | None,
                    include_acknowledged: bool) -> tuple[list[Regression], HistoryStatus]:
        from orchestrator.stats.history import find_regressions

        with self.sessions()() as s:
            return find_regressions(s, since=after, host=host, include_acknowledged=include_acknowledged)

    def acknowledge(self, regression_id: str, reason: str) -> None:
        from orchestrator.labctl.common import checked_reply

        checked_reply(self.controller().acknowledge(regression_id, reason))

    # --- canaries: a schedule each (orchestrator.canary) ---

    def canary_dut(self, host: str, device: str) -> str:
        from orchestrator.canary import resolve

        with self.sessions()() as s:
            return resolve(s, host, device)[0]

    def canary_add(self, host: str, device: str, name: str, cron: str, quarantine: bool, priority: int) -> None:
        from labcontract.errors import Problem, SubmissionError
        from labcontract.protocol import ScheduleAdd, Submit
        from orchestrator.canary import EXPIRES_AFTER_S, QUARANTINE_ACTOR, SUITE
        from orchestrator.labctl.common import reply_or_fail
        from orchestrator.runs.client import ControllerClient, _reply_to, check_submission
        from orchestrator.runs.cron import cron_problem

        suite = check_submission(SUITE, host, [device], self.sessions())
        if (why := cron_problem(cron, time.time())) is not None:     # the controller's own check, before sending
            raise SubmissionError(suite.source, [Problem("--cron", why)])
        template = Submit(run_id="-", suite_source=suite.source, suite_text=suite.source_text, host=host,
                          devices=(device,), priority=priority, actor=QUARANTINE_ACTOR if quarantine else None,
                          reply_to="-")
        client, reply_to = ControllerClient(self.redis()), _reply_to()
        reply = client._call(ScheduleAdd(name=name, cron=cron, submit=template, expires_after_s=EXPIRES_AFTER_S,
                                         actor=client.actor, reply_to=reply_to), reply_to)
        reply_or_fail(reply, suite.source)

    def canaries(self) -> list[dict[str, Any]]:
        from orchestrator.canary import listing

        with self.sessions()() as s:
            return listing(s)

    def notifications(self) -> list[dict[str, Any]]:
        from orchestrator.notifysinks import listing

        with self.sessions()() as s:
            return listing(s)
