"""What the controller's loop reads per pass does not grow with the fleet (issue 30, a controller at 1,000
agents): a heartbeat writes the liveness column without loading its host, the watchdog reads every active attempt
in one query with the hosts' liveness columns only, and a scheduling pass reads the next step of the runs it starts,
not of every idle run. Real SQLite store; the statements are counted as the engine runs them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import HealthCheck, Heartbeat, Register, Submit
from orchestrator.config import ControllerTuning
from orchestrator.controller import Controller
from orchestrator.states import StepState
from orchestrator.store.models import Attempt, Host, Step

SUITE = """\
suite: three
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 8, runtime: 1}
  - {name: b, rw: randread, bs: 8k, iodepth: 8, runtime: 1}
  - {name: c, rw: randread, bs: 16k, iodepth: 8, runtime: 1}
"""


@contextmanager
def statements(ctl: Controller) -> Iterator[list[str]]:
    """The SQL the controller's store runs meanwhile."""
    engine = ctl.sessions.kw["bind"]
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        seen.append(" ".join(sql.split()))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


@contextmanager
def steps_loaded() -> Iterator[list[str]]:
    """The ids of the Step rows the ORM builds meanwhile."""
    ids: list[str] = []

    def note(target: Step, _ctx: Any) -> None:
        ids.append(target.id)

    event.listen(Step, "load", note)
    try:
        yield ids
    finally:
        event.remove(Step, "load", note)


def fleet(ctl: Controller, n: int, first: int = 0) -> list[str]:
    """``n`` more hosts (h1 is the env's), each with a queued run of three steps on its DUT."""
    names = [f"s{i}" for i in range(first, first + n)]
    for name in names:
        ctl.handle_event(Register(host=name, agent_version="0.1.0", facts=HostFacts(hostname=name, fio_version="x"),
                                  duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block",
                                                    size_bytes=1 << 30),)))
    for name in names:
        assert ctl.submit(Submit(run_id=f"r{name}", suite_source="s.yaml", suite_text=SUITE, host=name,
                                 devices=("dut0",), reply_to="-")).ok
    return names


def test_a_heartbeat_writes_liveness_without_loading_its_host(env: Any) -> None:
    ctl, _disp, clock, db = env
    clock.t += 5
    with statements(ctl) as sql:
        ctl.handle_event(Heartbeat(host="h1"))
        ctl.handle_event(Heartbeat(host="nobody"))          # an unknown host: nothing, no error
    assert not [q for q in sql if q.startswith("SELECT") and "hosts" in q], sql
    with db() as s:
        host = s.get(Host, "h1")
        assert host is not None and host.last_seen == clock.t and host.facts["hostname"] == "h1"
        assert s.get(Host, "nobody") is None


def test_a_heartbeat_after_a_registration_in_the_same_batch_is_seen_by_it(env: Any) -> None:
    """Events of one read are applied in one transaction: the heartbeat after the registration is written after it,
    and the row the transaction holds says so once it is written."""
    ctl, _disp, clock, db = env
    with ctl.sessions.begin() as s:
        ctl._apply_event(s, Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"),
                                     duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block",
                                                       size_bytes=1 << 30),)))
        clock.t += 3
        ctl._apply_event(s, Heartbeat(host="h1"))
        host = s.get(Host, "h1")
        assert host is not None
    assert host.last_seen == clock.t
    with db() as s:
        host = s.get(Host, "h1")
        assert host is not None and host.last_seen == clock.t and host.registered_at == clock.t - 3


def test_a_heartbeat_with_health_checks_still_counts_them(env: Any) -> None:
    ctl, _disp, clock, db = env
    clock.t += 3
    ctl.handle_event(Heartbeat(host="h1", health=(HealthCheck(check="present", target="/dev/loop9", ok=False,
                                                              detail="gone"),)))
    with db() as s:
        host = s.get(Host, "h1")
        assert host is not None and host.last_seen == clock.t
        assert host.health["present /dev/loop9"]["fails"] == 1 and host.health["present /dev/loop9"]["at"] == clock.t


def watch_statements(ctl: Controller) -> list[str]:
    with statements(ctl) as sql:
        ctl.watch()
    return sql


def test_the_watchdog_pass_costs_the_same_for_one_attempt_or_many(env: Any) -> None:
    ctl, disp, clock, db = env
    fleet(ctl, 1)
    ctl.schedule()
    one = watch_statements(ctl)
    fleet(ctl, 6, first=1)
    ctl.schedule()
    ctl.schedule()
    with db() as s:
        active = s.query(Attempt).filter(Attempt.state == "DISPATCHED").count()
    assert active == 7, active
    many = watch_statements(ctl)
    assert len(many) == len(one), (one, many)         # not a query per attempt
    assert not [q for q in many if "hosts.facts" in q], many
    # and it still watches: silent hosts' dispatched steps are re-sent only to hosts that are up
    clock.t += ControllerTuning().dispatch_expires_s + 6
    for host in ["h1", "s0", "s1", "s2"]:
        ctl.handle_event(Heartbeat(host=host))
    before = len(disp.starts())
    ctl.watch()
    assert {m.host for m in disp.starts()[before:]} == {"s0", "s1", "s2"}


def test_a_scheduling_pass_reads_the_next_step_of_the_runs_it_starts_only(env: Any) -> None:
    ctl, disp, _clock, _db = env
    ctl.tuning = ControllerTuning(dispatch_batch=2)
    fleet(ctl, 8)
    with steps_loaded() as ids:
        ctl.schedule()
    assert len(disp.starts()) == 2
    assert len(ids) == 2, ids                   # before: the next step of each of the 8 idle runs
    while len(disp.starts()) < 8:               # and every run is started, two a pass
        ctl.schedule()
    assert sorted(m.host for m in disp.starts()) == sorted(f"s{i}" for i in range(8))


@contextmanager
def hosts_loaded() -> Iterator[list[str]]:
    names: list[str] = []

    def note(target: Host, _ctx: Any) -> None:
        names.append(target.name)

    event.listen(Host, "load", note)
    try:
        yield names
    finally:
        event.remove(Host, "load", note)


def test_the_scheduler_keeps_its_hosts_until_one_is_written(env: Any) -> None:
    """The hosts are built once, not every pass; a registration, a quarantine or a release is seen at the next pass,
    and so is every heartbeat's liveness (a host that went silent gets nothing)."""
    ctl, disp, clock, _db = env
    fleet(ctl, 3)
    ctl.schedule()
    with hosts_loaded() as built:
        ctl.schedule()
    assert built == [], built                        # before: every host, every pass
    ctl.handle_command(Submit(run_id="rq", suite_source="s.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                              reply_to="-").model_dump_json())
    with ctl.sessions.begin() as s:                  # a host written (as a quarantine is): loaded again
        host = s.get(Host, "h1")
        assert host is not None
        host.quarantined_at, host.quarantine_reason = clock.t, "test"
    with hosts_loaded() as built:
        ctl.schedule()
    assert "h1" in built and not [m for m in disp.starts() if m.host == "h1"]
    with ctl.sessions.begin() as s:
        host = s.get(Host, "h1")
        assert host is not None
        host.quarantined_at = None
    clock.t += ControllerTuning().heartbeat_timeout_s + 1          # every host silent but h1
    ctl.handle_event(Heartbeat(host="h1"))
    for att in [m.attempt_id for m in disp.starts()]:
        with ctl.sessions.begin() as s:                           # the fleet's steps end: their runs are idle
            a = s.get(Attempt, att)
            assert a is not None
            ctl._move(a, StepState.CANCELLED, "test")
    before = len(disp.starts())
    ctl.schedule()
    assert [m.host for m in disp.starts()[before:]] == ["h1"]
