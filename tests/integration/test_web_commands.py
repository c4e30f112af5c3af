"""Protocol 7 on a real lab (redis with the lab's ACL users, controller, agent, loop-device DUT): rerun, the
max_rounds cap, tokens made through the web service's stream as broker user web, token commands refused on
labctl's stream, and the actor recorded as who submitted a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from labcontract.protocol import COMMANDS_STREAM, DEADLETTER_STREAM
from labcontract.suite import parse_suite
from labcontract.transport import redis_client
from orchestrator.labs.lab import wait_for
from orchestrator.runs.client import ControllerClient
from orchestrator.store.models import ApiToken, Run
from orchestrator.tokens import lookup, token_hash
from tests.conftest import THREE_STEPS, LabHandle
from tests.pg import PgServer, pg_server  # noqa: F401  (a fixture, used by name)

pytestmark = pytest.mark.integration

# b runs long enough for labctl to start and its cancel to land while it runs on a loaded machine (a cancel cuts it)
CANCEL_ME = """\
suite: three
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1s}
  - {name: b, rw: randread, bs: 8k, iodepth: 4, runtime: 20s}
  - {name: c, rw: read, bs: 64k, iodepth: 4, runtime: 1s}
"""
PRECONDITION = """\
suite: capped
phases:
  precondition: {numjobs: 1, iodepth: 4, round: 1s, max_rounds: 50, window: 5}
profiles:
  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 4, runtime: 1s}
"""


def test_a_cancelled_run_reruns_only_its_cancelled_steps_and_succeeds(lab: LabHandle) -> None:
    run_id = lab.submit(CANCEL_ME)
    wait_for(lambda: lab.detail(run_id).steps[1].state == "RUNNING", 60, "the second step to run", interval=0.05)
    assert lab.labctl("cancel", run_id, check=True).returncode == 0
    d = lab.wait_run(run_id)
    assert d.run.state == "CANCELLED"
    before = {st.id: (st.state, len(st.attempts)) for st in d.steps}
    assert before[d.steps[0].id] == ("SUCCEEDED", 1) and before[d.steps[2].id] == ("CANCELLED", 0)
    res = lab.labctl("rerun", run_id)
    assert res.returncode == 0 and res.stdout.strip() == f"{run_id} queued again", res.stderr
    d = lab.wait_run(run_id)
    assert d.run.state == "SUCCEEDED" and d.run.rerun_count == 1, [(s.name, s.state, s.reason) for s in d.steps]
    for st in d.steps:
        state, n = before[st.id]
        numbers = [a.number for a in st.attempts]
        # a step that succeeded is not run again; a cancelled one gets the next attempt number, its old one kept
        assert numbers == list(range(1, n + 1 + (state == "CANCELLED"))), (st.name, state, numbers)
        assert st.attempts[-1].state == "SUCCEEDED"
    assert set(d.results) == {st.id for st in d.steps}
    again = lab.labctl("rerun", run_id)
    assert again.returncode == 1 and "has no failed or cancelled step" in again.stderr


def test_max_rounds_stops_preconditioning(lab: LabHandle, tmp_path: Path) -> None:
    suite = tmp_path / "capped.yaml"
    suite.write_text(PRECONDITION)
    res = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", "--max-rounds", "2")
    assert res.returncode == 0, res.stderr
    d = lab.wait_run(res.stdout.strip(), timeout=120)
    assert d.run.state == "SUCCEEDED" and d.run.max_rounds == 2 and d.run.submitted_by == "labctl"
    assert [st.round for st in d.steps if st.kind == "precondition"] == [1, 2]
    (rec,) = d.preconditions
    assert rec.steady is False and rec.verdict.startswith("not steady after 2 rounds (max_rounds 2)")
    bad = lab.labctl("submit", str(suite), "--host", lab.host, "--device", "dut0", "--max-rounds", "0")
    assert bad.returncode != 0


def test_tokens_are_made_and_revoked_through_the_web_stream(lab: LabHandle) -> None:
    assert lab.lab.web_url
    made = lab.labctl("token", "create", "--name", "ci", "--role", "engineer", "--expires-in", "30d",
                      broker=lab.lab.web_url)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("slab_") and "shown only now" in made.stderr
    with lab.sessions() as s:
        row = lookup(s, token)
        assert row is not None and (row.name, row.role, row.created_by) == ("ci", "engineer", "labctl-admin")
        assert row.token_sha256 == token_hash(token) and row.expires_at is not None
    listed = lab.labctl("token", "list", check=True).stdout
    assert "ci" in listed and "engineer" in listed and "active" in listed and token_hash(token) not in listed
    dup = lab.labctl("token", "create", "--name", "ci", "--role", "admin", broker=lab.lab.web_url)
    assert dup.returncode == 1 and "exists (revoke it first)" in dup.stderr
    assert lab.labctl("token", "revoke", "ci", broker=lab.lab.web_url, check=True).stdout.strip() == \
        "token ci revoked"
    with lab.sessions() as s:
        row = s.get(ApiToken, "ci")
        assert row is not None and row.revoked_at is not None and lookup(s, token) is None
    assert "revoked" in lab.labctl("token", "list", check=True).stdout
    unknown = lab.labctl("token", "revoke", "nobody", broker=lab.lab.web_url)
    assert unknown.returncode == 1 and "no token 'nobody'" in unknown.stderr


def test_token_commands_need_the_web_user_and_are_refused_on_labctls_stream(lab: LabHandle) -> None:
    as_labctl = lab.labctl("token", "create", "--name", "x", "--role", "admin")
    assert as_labctl.returncode == 1
    assert "token commands need the broker user web (--broker redis://web@...)" in as_labctl.stderr
    assert lab.lab.labctl_url
    r = redis_client(lab.broker)
    before = r.xlen(DEADLETTER_STREAM)
    reply = ControllerClient(redis_client(lab.lab.labctl_url), 30).token_create("x", "admin", "0" * 64, None)
    assert reply is not None and not reply.ok
    assert reply.errors == ("token commands are accepted only on the web service's stream (lab:commands:web)",)
    wait_for(lambda: r.xlen(DEADLETTER_STREAM) > before, 10, "the refused command to be dead-lettered")
    (_id, fields), = r.xrevrange(DEADLETTER_STREAM, count=1)
    assert fields["stream"] == COMMANDS_STREAM and "token_create" in fields["reason"]
    with lab.sessions() as s:
        assert s.get(ApiToken, "x") is None


def test_the_actor_is_recorded_from_the_web_stream_only(lab: LabHandle) -> None:
    suite = parse_suite(THREE_STEPS, "three.yaml")
    web_run, reply = lab.web_client(actor="token:alice").submit(suite, lab.host, ["dut0"], runtime=1)
    assert reply is not None and reply.ok, reply
    lab_run, reply = ControllerClient(lab.redis(), 30, actor="token:mallory").submit(suite, lab.host, ["dut0"],
                                                                                       runtime=1)
    assert reply is not None and reply.ok
    with lab.sessions() as s:
        runs = {rid: s.get(Run, rid) for rid in (web_run, lab_run)}
        assert {rid: run.submitted_by for rid, run in runs.items() if run} == {web_run: "token:alice",
                                                                               lab_run: "labctl"}
    log = lab.controller.log.read_text(errors="replace")
    assert f"command submit {web_run} from token:alice (lab:commands:web)" in log
    assert f"command submit {lab_run} from labctl (lab:commands)" in log
    for rid in (web_run, lab_run):
        assert lab.wait_run(rid).run.state == "SUCCEEDED"
    again = lab.web_client().rerun(web_run)
    assert again is not None and not again.ok and "no failed or cancelled step" in again.errors[0]


def test_schema_0011_on_postgresql_upgrades_a_0010_store_and_downgrades(pg_server: PgServer) -> None:  # noqa: F811
    from alembic import command
    from sqlalchemy import inspect, text

    from orchestrator.store.db import alembic_config, make_engine, migrate, schema_drift

    engine = make_engine(pg_server.create_database("m0011"))
    try:
        command.upgrade(alembic_config(engine), "0010")
        with engine.begin() as c:
            c.execute(text(
                "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, devices,"
                " live, state, reason, priority, submitted_at) VALUES ('r1', 's', 's.yaml', 'suite: s', 'x', 'h1',"
                " '/dev/loop3', '[]', true, 'FAILED', '', 0, 1.0)"))
        migrate(engine)
        with engine.connect() as c:
            assert schema_drift(c) == []
            row = c.execute(text("SELECT submitted_by, max_rounds, rerun_count, rerun_at FROM runs")).one()
            assert tuple(row) == ("", None, 0, None)
        with engine.begin() as c:
            c.execute(text("INSERT INTO api_tokens (name, role, token_sha256, created_at, created_by) VALUES "
                           "('ci', 'admin', :h, 1.0, 'labctl-admin')"), {"h": "a" * 64})
        command.downgrade(alembic_config(engine), "0010")
        insp = inspect(engine)
        assert "api_tokens" not in insp.get_table_names()
        assert "submitted_by" not in {col["name"] for col in insp.get_columns("runs")}
    finally:
        engine.dispose()
