"""The real controller process keeps answering whatever valid command it is sent (issue 29).

Hypothesis generates commands of every type of the protocol (``labcontract.protocol.AnyCommandType``) from their
own JSON schemas (tests/schemagen.py: every field within its declared bounds, every id within its pattern),
mixed with valid-but-extreme ones built here: schedules that never fire or fire every minute, runs not before
2100 or already expired, the largest repeat and priority, the empty and the largest suite (10,000 steps),
commands naming real runs, hosts and devices. Each is written to the controller's stream as labctl or the web
service would write it, and the test waits for its answer: the controller must answer every command (a refusal
is an answer) and stay alive, and it must still answer a probe and run a normal suite at the end.

The hosts the generated runs target are simulated (registered by the test, no agent): their steps are dispatched
and re-sent by the watchdogs, then fail, exercising dispatch and watchdogs without running fio."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labcontract.bounds import MAX_EPOCH
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    COMMANDS_STREAM,
    MAX_PRIORITY,
    MAX_ROUNDS_CAP,
    PROTOCOL_VERSION,
    REPLY_PREFIX,
    WEB_COMMANDS_STREAM,
    AnyCommandType,
    Cancel,
    Register,
    events_stream,
)
from labcontract.suite import MAX_REPEAT, MAX_RUNTIME_S
from labcontract.transport import redis_client
from orchestrator.labs.lab import wait_for
from orchestrator.store.models import Host, Run
from tests.conftest import LabHandle, start_lab
from tests.schemagen import from_schema

pytestmark = pytest.mark.integration

COMMAND_TYPES: tuple[type[Any], ...] = get_args(AnyCommandType)
ANSWER_S = 30.0          # a command's answer, under load
SIM = "sim-prop"
QUICK = "suite: q\nprofiles:\n  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1s}\n"
HUGE = ("suite: huge\ncell_limit: 10000\nprofiles:\n  - name: p\n    rw: randread\n    runtime: 1s\n"
        "    sweep: {iodepth: [" + ", ".join(str(i) for i in range(1, 101)) + "], "
        "bs: [" + ", ".join(f"{512 * i}" for i in range(1, 101)) + "]}\n")
CRONS = ["* * * * *", "0 0 30 2 *", "0 0 1 1 * 0 2027", "0 0 1 1 * 2027", "*/0 * * * *", "0 22 * * 1-5",
         "0 0 L 2 *", "0 0 * * 5#5", "", "@reboot", "59 23 31 12 *", "0 0 29 2 *"]
SENT: Counter[str] = Counter()
ANSWERS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def plab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    handle = start_lab(tmp_path_factory.mktemp("plab"))
    dut = DeclaredDut(name="d0", path=f"/srv/{SIM}.img", kind="file", size_bytes=1 << 40)
    handle.redis().xadd(events_stream(SIM), {"data": Register(host=SIM, agent_version="sim",
                                                              facts=HostFacts(hostname=SIM),
                                                              duts=(dut,)).model_dump_json()})

    def registered() -> bool:
        with handle.sessions() as s:
            return s.get(Host, SIM) is not None
    wait_for(registered, 30, f"{SIM} to register")
    yield handle
    print(f"\ncontroller property: {len(COMMAND_TYPES)} command types, {sum(SENT.values())} commands answered "
          f"({', '.join(f'{k} {v}' for k, v in sorted(SENT.items()))}); {ANSWERS['accepted']} accepted, "
          f"{ANSWERS['refused']} refused with their reasons, the rest answered by a probe")
    handle.lab.stop()


def ask(lab: LabHandle, body: dict[str, Any], *, web: bool = False) -> dict[str, Any] | None:
    """Write ``body`` as labctl (or the web service) would, with a reply list of its own, and wait for the answer
    (None when the command names no reply list: then a probe must be answered after it)."""
    reply = body.get("reply_to")
    url = lab.lab.web_url if web else lab.lab.labctl_url
    assert url
    client = redis_client(url)
    client.xadd(WEB_COMMANDS_STREAM if web else COMMANDS_STREAM, {"data": json.dumps(body)})
    SENT[str(body.get("type"))] += 1
    if not (isinstance(reply, str) and reply.startswith(REPLY_PREFIX)):
        probe(lab)
        return None
    got = wait_answer(lab, client, reply)
    assert got is not None, f"no answer within {ANSWER_S}s to {json.dumps(body)[:400]}"
    answer: dict[str, Any] = json.loads(got)
    return answer


def wait_answer(lab: LabHandle, client: Any, reply: str) -> str | None:
    """The answer on ``reply``, checking every 2 s that the controller lives (it fails the test if it died)."""
    until = time.monotonic() + ANSWER_S
    while time.monotonic() < until:
        lab.check_alive()
        got = client.blpop([reply], timeout=2)
        if got is not None:
            return str(got[1])
    return None


def probe(lab: LabHandle) -> None:
    """The controller answers a command: the cancel of a run that does not exist."""
    reply_to = REPLY_PREFIX + uuid.uuid4().hex
    client = redis_client(lab.lab.labctl_url or "")
    client.xadd(COMMANDS_STREAM, {"data": Cancel(run_id="no-such-run", reply_to=reply_to).model_dump_json()})
    got = wait_answer(lab, client, reply_to)
    assert got is not None and "unknown run" in got, f"the controller did not answer a probe ({got})"


def schema_commands() -> st.SearchStrategy[dict[str, Any]]:
    """Any command of any type, as its JSON schema allows, with this protocol's version and a reply list."""
    def fix(kind: str, body: dict[str, Any], reply: bool) -> dict[str, Any]:
        out = {**body, "type": kind, "v": PROTOCOL_VERSION}
        if reply:
            out["reply_to"] = REPLY_PREFIX + uuid.uuid4().hex
        return out
    per_type = [st.builds(fix, st.just(t.model_fields["type"].default), from_schema(t.model_json_schema()),
                          st.booleans() | st.just(True)) for t in COMMAND_TYPES]
    return st.one_of(per_type)


EXTREMES: list[tuple[str, Any]] = [
    ("suite_text", HUGE), ("suite_text", ""), ("suite_text", "suite: x\n"),
    ("suite_text", Path("labcontract/suites/demo.yaml").read_text()),
    ("host", "nohost"), ("host", ""), ("devices", []), ("devices", ["d0", "d0"]), ("devices", ["dut0"]),
    ("runtime_override", 1), ("runtime_override", MAX_RUNTIME_S), ("runtime_override", MAX_RUNTIME_S + 1),
    ("scale", 1e-9), ("scale", 1000.0), ("priority", MAX_PRIORITY), ("priority", -MAX_PRIORITY),
    # past the bound too: a not_before of 1e300 broke time.localtime in every scheduling pass
    ("not_before", 0.0), ("not_before", MAX_EPOCH), ("not_before", MAX_EPOCH + 1), ("not_before", 1e300),
    ("expires_at", 0.0), ("expires_at", MAX_EPOCH), ("expires_at", 1e300),
    ("max_rounds", 1), ("max_rounds", MAX_ROUNDS_CAP), ("repeat", MAX_REPEAT), ("live", False),
]


def extreme_submit(lab: LabHandle) -> st.SearchStrategy[dict[str, Any]]:
    """A valid submission on the simulated host (its steps are dispatched and never run) with one or two of its
    fields at, or past, their bounds."""
    def build(changes: list[tuple[str, Any]]) -> dict[str, Any]:
        return {"type": "submit", "v": PROTOCOL_VERSION, "run_id": f"p{uuid.uuid4().hex[:12]}",
                "suite_source": "prop.yaml", "suite_text": QUICK, "host": SIM, "devices": ["d0"],
                "reply_to": REPLY_PREFIX + uuid.uuid4().hex, **dict(changes)}
    return st.builds(build, st.lists(st.sampled_from(EXTREMES), max_size=2))


def extreme_schedule(lab: LabHandle) -> st.SearchStrategy[dict[str, Any]]:
    """Schedules of a valid template whose cron fires every minute, rarely, never, or once (a year)."""
    template = {"type": "submit", "v": PROTOCOL_VERSION, "run_id": "-", "suite_source": "q.yaml",
                "suite_text": QUICK, "host": SIM, "devices": ["d0"], "reply_to": "-"}

    def build(cron: str, name: str, expires: int | None) -> dict[str, Any]:
        return {"type": "schedule_add", "v": PROTOCOL_VERSION, "name": name, "cron": cron, "submit": template,
                "expires_after_s": expires, "reply_to": REPLY_PREFIX + uuid.uuid4().hex}
    return st.builds(build, st.sampled_from(CRONS), st.sampled_from(["p-" + "x" * 62, "p.every.minute", "p-once"]),
                     st.sampled_from([None, 0, 10 * 365 * 86400]))


def about_real_things(lab: LabHandle) -> st.SearchStrategy[dict[str, Any]]:
    """Commands naming runs, hosts and devices that exist."""
    def build(kind: str, which: int) -> dict[str, Any]:
        with lab.sessions() as s:
            runs = [r.id for r in s.query(Run).order_by(Run.submitted_at).all()] or ["none"]
        run_id = runs[which % len(runs)]
        body: dict[str, Any] = {"type": kind, "v": PROTOCOL_VERSION, "reply_to": REPLY_PREFIX + uuid.uuid4().hex}
        if kind in ("cancel", "pause", "resume", "rerun"):
            body["run_id"] = run_id
        elif kind == "release":
            body |= {"host": [SIM, lab.host][which % 2], "device": [None, "d0", "dut0"][which % 3]}
        elif kind == "schedule_rm":
            body["name"] = ["p.every.minute", "p-once", "p-" + "x" * 62][which % 3]
        return body
    return st.builds(build, st.sampled_from(["cancel", "pause", "resume", "rerun", "release", "schedule_rm"]),
                     st.integers(0, 1000))


@pytest.mark.timeout(1200)
@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_controller_answers_every_generated_command(plab: LabHandle, data: st.DataObject) -> None:
    body = data.draw(st.one_of(schema_commands(), extreme_submit(plab), extreme_schedule(plab),
                               about_real_things(plab)))
    web = data.draw(st.booleans()) if body.get("type", "").startswith("token") else False
    answer = ask(plab, body, web=web)
    if answer is not None:
        ANSWERS["accepted" if answer["ok"] else "refused"] += 1
        assert set(answer) >= {"ok", "errors"}, answer
        assert all(not e.startswith("the controller could not apply") for e in answer["errors"]), answer


def test_every_command_type_was_sent_and_the_lab_still_runs(plab: LabHandle) -> None:
    assert {t.model_fields["type"].default for t in COMMAND_TYPES} <= set(SENT), SENT
    probe(plab)
    plab.check_alive()
    d = plab.wait_run(plab.submit(QUICK), timeout=120)
    assert d.run.state == "SUCCEEDED", d.run.reason
