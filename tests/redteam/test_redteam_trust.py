"""Red team of issue 29 on the real lab (redis-server, controller and agent processes, fio, a loop-device DUT):
each input the controller or an agent once accepted as valid and that then stopped it, froze it or filled the
store, replayed against the processes themselves.

- a schedule with a year (seven cron fields) is refused by labctl and by the controller; one already in the store
  that can no longer fire is disabled with its reason, and the controller stays up across a restart;
- a registration with an 8 MB CPU model and 1,000 block devices is stored bounded, and a result row keeps at most
  64 KiB of its host;
- a gzip bomb aimed at an attempt that already ended is dead-lettered with its reason;
- an agent's broker user cannot list keys; an agent's worker refuses Celery's built-in tasks;
- a declared pattern that backtracks under Python's ``re`` answers at once and the host keeps heartbeating."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import select

from labcontract.facts import DeclaredDut
from labcontract.protocol import Artifact, Register, StepEnded, Submit, agent_queue, events_stream
from labcontract.suite import parse_suite
from labcontract.transport import celery_settings, redis_client
from orchestrator.controller.celery_wire import TaskEncoder
from orchestrator.labs.lab import wait_for
from orchestrator.runs.client import ControllerClient
from orchestrator.store.models import Host, Result, Schedule
from tests.conftest import LabHandle, start_lab, unique
from tests.redteam.test_redteam_intake import QUICK, dead_letter, gz_bomb, send, serves

pytestmark = pytest.mark.integration


def test_a_schedule_with_a_year_is_refused_by_labctl_and_by_the_controller(lab: LabHandle) -> None:
    res = lab.labctl("schedule", "add", f"once-{unique()}", "demo", "--cron", "0 0 1 1 * 0 2027", "--host", lab.host,
                     "--device", "dut0")
    assert res.returncode != 0
    assert "--cron: '0 0 1 1 * 0 2027' is not a cron expression of 5 fields" in res.stderr + res.stdout
    suite = parse_suite(QUICK, "q.yaml")
    reply = ControllerClient(lab.redis(), timeout_s=30).schedule_add(f"raw-{unique()}", "0 0 1 1 * 0 2027", suite,
                                                                     lab.host, ["dut0"])
    assert reply is not None and not reply.ok and "is not a cron expression of 5 fields" in reply.errors[0]


def test_a_schedule_that_can_no_longer_fire_is_disabled_and_the_controller_stays_up(lab: LabHandle) -> None:
    """What crash-looped the controller: a schedule whose next firing cannot be computed, due now. Written into
    the store directly, as a controller before the check accepted it."""
    name = f"once-{unique()}"
    template = Submit(run_id="-", suite_source="q.yaml", suite_text=QUICK, host=lab.host, devices=("dut0",),
                      reply_to="-")
    with lab.sessions.begin() as s:
        s.add(Schedule(name=name, cron="0 0 1 1 * 0 2020", next_fire_at=time.time() - 1, created_at=time.time(),
                       submit=template.model_dump(mode="json", exclude={"run_id", "reply_to", "not_before",
                                                                        "expires_at"})))

    def disabled() -> str | None:
        lab.check_alive()
        with lab.sessions() as s:
            sch = s.get(Schedule, name)
            return sch.disabled_reason if sch is not None and sch.disabled_reason else None
    reason = wait_for(disabled, 30, f"schedule {name} to be disabled")
    assert isinstance(reason, str) and "CroniterBadDateError" in reason
    listed = lab.labctl("schedule", "list")
    assert listed.returncode == 0 and name in listed.stdout and "DISABLED" in listed.stdout
    lab.restart_controller()             # it used to die again within a second of every start
    serves(lab)
    lab.check_alive()
    with lab.sessions() as s:
        sch = s.get(Schedule, name)
        assert sch is not None and sch.last_run_id is None     # never fired, never retried


def _forged_register(lab: LabHandle, *, cpu_model: str, disks: int) -> str:
    """The real host's registration as its agent would send it, with a CPU model and block devices an attacker
    chose, written to its own stream (the test has the admin user's rights)."""
    with lab.sessions() as s:
        host = s.get(Host, lab.host)
        assert host is not None
        facts = dict(host.facts or {})
        duts = [DeclaredDut(name=d.name, path=d.path, kind=d.kind, size_bytes=d.size_bytes,  # type: ignore[arg-type]
                            serial=d.serial, by_id=d.by_id) for d in host.devices if d.declared]
    reg = json.loads(Register(host=lab.host, agent_version="0.0", facts={"hostname": lab.host},  # type: ignore[arg-type]
                              duts=tuple(duts)).model_dump_json())
    reg["facts"] = facts | {"cpu_model": cpu_model, "block_devices": [
        {"name": f"sd{i}", "path": f"/dev/sd{i}", "size_bytes": 1 << 40, "model": "m" * 2000} for i in range(disks)]}
    return send(lab, events_stream(lab.host), json.dumps(reg))


def test_an_agent_cannot_fill_the_store_through_its_registration(lab: LabHandle) -> None:
    _forged_register(lab, cpu_model="x" * (8 << 20), disks=1000)

    def stored() -> dict[str, Any] | None:
        lab.check_alive()
        with lab.sessions() as s:
            host = s.get(Host, lab.host)
            facts = host.facts if host is not None else {}
            return facts if len(facts.get("block_devices") or []) == 1000 else None
    facts = wait_for(stored, 30, "the forged registration to be applied")
    assert isinstance(facts, dict)
    assert facts["cpu_model"] == "x" * 256                       # cut, not 8 MB
    assert {len(b["model"]) for b in facts["block_devices"]} == {256}
    assert len(json.dumps(facts)) < 1 << 20
    run_id = lab.submit(QUICK)
    d = lab.wait_run(run_id)
    assert d.run.state == "SUCCEEDED", d.run.reason
    with lab.sessions() as s:
        for r in s.scalars(select(Result).where(Result.run_id == run_id)):
            size = len(json.dumps(r.provenance))
            assert size < 70 << 10, f"a result row keeps {size} bytes of provenance"    # it kept 8.4 MB
            assert r.provenance["host"]["cpu_model"] == "x" * 256 and "block_devices" not in r.provenance["host"]
    lab.lab.stop_proc(lab.agent)         # its true facts again, for the other tests of the module
    lab.restart_agent()


def test_a_registration_over_the_facts_bound_is_dead_lettered(lab: LabHandle) -> None:
    entry = _forged_register(lab, cpu_model="x", disks=1025)
    assert "at most 1024 items" in dead_letter(lab, events_stream(lab.host), entry)["reason"]
    serves(lab)


def test_a_gzip_bomb_aimed_at_an_ended_attempt_is_dead_lettered(lab: LabHandle) -> None:
    d = lab.wait_run(lab.submit(QUICK))      # how it ended does not matter: the bomb must change none of it
    attempt = d.steps[0].attempts[-1].id
    with lab.sessions() as s:
        before = (d.run.state, d.steps[0].attempts[-1].state,
                  list(s.scalars(select(Result.id).where(Result.attempt_id == attempt))))
    bomb = Artifact(name="fio.json", sha256="0" * 64, size=4096, content_gz_b64=gz_bomb(1 << 30))
    entry = send(lab, events_stream(lab.host), StepEnded(host=lab.host, attempt_id=attempt, outcome="exited",
                                                         exit_code=0, artifacts=(bomb,)))
    assert "inflates past its declared size of 4096 bytes" in dead_letter(lab, events_stream(lab.host),
                                                                          entry)["reason"]
    after = lab.detail(d.run.id)
    with lab.sessions() as s:     # the run, the attempt and its stored results are as they were
        assert (after.run.state, after.steps[0].attempts[-1].state,
                list(s.scalars(select(Result.id).where(Result.attempt_id == attempt)))) == before


def test_an_agent_user_cannot_list_keys(lab: LabHandle) -> None:
    lab.redis().rpush(f"lab:reply:secret-{unique()}", "x")
    agent = redis_client(lab.lab.agent_url(lab.host))
    for command in (("SCAN", "0"), ("RANDOMKEY",), ("KEYS", "*")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            agent.execute_command(*command)
    assert agent.ping()


def test_an_agents_worker_refuses_celerys_own_tasks(lab: LabHandle) -> None:
    app = Celery("redteam", set_as_current=False)
    app.conf.update(celery_settings(lab.broker))
    encoder = TaskEncoder(app)
    queue = agent_queue(lab.host)
    log = Path(lab.agent.log)
    before = log.read_text(errors="replace").count("unregistered task")
    for task in ("celery.accumulate", "celery.backend_cleanup", "celery.chord_unlock"):
        lab.redis().lpush(queue, encoder.encode(task, [1], queue=queue, expires_s=60, argsrepr="(1,)"))

    def refused() -> bool:
        lab.check_alive()
        return log.read_text(errors="replace").count("unregistered task") >= before + 3
    wait_for(refused, 30, "the agent to refuse Celery's built-in tasks")
    assert lab.redis().llen(queue) == 0
    serves(lab)


EVIL = ("workloads:\n  - name: tagger\n    command: [/bin/true]\n    timeout_s: 60\n    destructive: false\n"
        "    params:\n      tag: {type: str, pattern: '^(a+)+$', max_length: 256}\n")


@pytest.mark.timeout(240)
def test_a_backtracking_pattern_does_not_freeze_the_agent(tmp_path: Path) -> None:
    """``^(a+)+$`` and 50 'a' then '!': hours of CPU for Python's ``re`` in the agent's own process (its heartbeats
    stopped, the host showed DOWN). With RE2 the step is refused at once and the host stays up."""
    decl = tmp_path / "workloads.yaml"
    decl.write_text(EVIL)
    lab = start_lab(tmp_path / "lab", agent_extra=("--app-workloads", str(decl)))
    try:
        suite = ("suite: tag\nkind: external\n"
                 "external: {workload: tagger, params: {tag: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!'}}\n")
        started = time.monotonic()
        d = lab.wait_run(lab.submit(suite), timeout=60)
        assert d.run.state == "FAILED"
        assert any("does not match '^(a+)+$'" in st.reason for st in d.steps), [st.reason for st in d.steps]
        assert time.monotonic() - started < 30
        with lab.sessions() as s:
            host = s.get(Host, lab.host)
            assert host is not None and host.last_seen is not None and time.time() - host.last_seen < 10
    finally:
        lab.lab.stop()
