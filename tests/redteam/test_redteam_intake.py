"""Red team on the controller's intake, on the real lab (redis-server, controller and agent processes, fio, a
loop-device DUT): poison commands and events, forged and oversized events, other protocol versions, a Redis
emptied under the controller. Each is refused with its reason in the dead-letter stream (or answered), the
controller stays up and keeps serving, and a restart does not die on what it refused.

``sim-*`` hosts are played by the test itself: it writes their events to their own streams, as an agent would."""

from __future__ import annotations

import base64
import hashlib
import json
import signal
import time
import zlib
from pathlib import Path
from typing import Any

from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    COMMANDS_STREAM,
    DEADLETTER_STREAM,
    ENTRY_MAX_BYTES,
    EVENTS_GROUP,
    PROTOCOL_VERSION,
    REPLY_PREFIX,
    Artifact,
    Event,
    Heartbeat,
    Register,
    StepEnded,
    StepStarted,
    Submit,
    agent_queue,
    events_stream,
)
from labcontract.transport import redis_client
from orchestrator.labs.lab import wait_for
from orchestrator.runs.client import ControllerClient
from orchestrator.store.models import Host
from tests.conftest import QUICK_SUITE, LabHandle, one_workload, unique

QUICK = "suite: q\nprofiles:\n  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1s}\n"


def raw(lab: LabHandle) -> Any:
    """A client that does not decode: refused entries may hold any bytes."""
    return redis_client(lab.broker, decode_responses=False)


def dead_letter(lab: LabHandle, stream: str, entry_id: str, timeout: float = 30) -> dict[str, Any]:
    """The dead-letter entry of ``entry_id`` of ``stream``, once the controller wrote it."""
    r = raw(lab)

    def find() -> dict[str, Any] | None:
        lab.check_alive()
        for _i, f in r.xrange(DEADLETTER_STREAM):
            d = {k.decode(): (v if k == b"data" else v.decode()) for k, v in f.items()}
            if d["stream"] == stream and d["id"] == entry_id:
                return d
        return None
    found = wait_for(find, timeout, f"a dead letter for {stream} {entry_id}", interval=0.05)
    assert isinstance(found, dict)
    return found


def dut_sum(lab: LabHandle) -> str:
    h = hashlib.sha256()
    with open(lab.duts["dut0"].path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fio_attempts(lab: LabHandle) -> int:
    from sqlalchemy import func, select

    from orchestrator.store.models import Attempt

    with lab.sessions() as s:
        return int(s.scalar(select(func.count()).select_from(Attempt).where(Attempt.host == lab.host)) or 0)


def send(lab: LabHandle, stream: str, data: Event | str | bytes) -> str:
    body = data.model_dump_json() if isinstance(data, Event) else data
    return str(lab.redis().xadd(stream, {"data": body})) if isinstance(body, str) else \
        raw(lab).xadd(stream, {"data": body}).decode()


def sim_host(lab: LabHandle, name: str | None = None) -> str:
    """A host the test plays: registered through its own stream, one file DUT."""
    name = name or f"sim-{unique()}"
    dut = DeclaredDut(name="dut0", path=f"/srv/{name}.img", kind="file", size_bytes=1 << 30)
    send(lab, events_stream(name), Register(host=name, agent_version="sim", facts=HostFacts(hostname=name),
                                            duts=(dut,)))

    def registered() -> bool:
        lab.check_alive()
        with lab.sessions() as s:
            h = s.get(Host, name)
            return bool(h and h.registered_at)
    wait_for(registered, 30, f"{name} to register")
    return name


def dispatched_attempt(lab: LabHandle, run_id: str) -> str:
    d = lab.wait_step_state(run_id, "DISPATCHED")
    return next(st.attempts[-1].id for st in d.steps if st.state == "DISPATCHED")


def serves(lab: LabHandle) -> None:
    """The controller is alive and a normal run on the real agent still completes."""
    d = lab.wait_run(lab.submit(QUICK), timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason


def gz_bomb(plain: int) -> str:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [z.compress(bytes(1 << 20)) for _ in range(plain >> 20)]
    return base64.b64encode(b"".join([*parts, z.flush()])).decode()


# --- commands -----------------------------------------------------------------------------------------------

def test_poison_commands_are_dead_lettered_and_the_controller_serves_on(lab: LabHandle) -> None:
    before, attempts = dut_sum(lab), fio_attempts(lab)
    queue = agent_queue(lab.host)
    valid = json.loads(Submit(run_id=f"r-{unique()}", suite_source="q.yaml", suite_text=QUICK, host=lab.host,
                              devices=("dut0",), reply_to="-").model_dump_json())
    cases: list[tuple[str | bytes, str]] = [
        ("[1,2,3]", "not a message: a JSON list"),
        ("null", "not a message: a JSON NoneType"),
        ('"just a string"', "not a message: a JSON str"),
        (json.dumps({"v": PROTOCOL_VERSION, "run_id": "x"}), "malformed command"),
        (json.dumps({**valid, "reply_to": COMMANDS_STREAM}), "reply_to"),
        (json.dumps({**valid, "reply_to": queue}), "reply_to"),
        (json.dumps({**valid, "reply_to": "lab:events:" + lab.host}), "reply_to"),
        (b"\xff\xfe not utf-8", "command is not JSON"),
        ("{" * 100_000, "command is not JSON"),
        (b" " * (ENTRY_MAX_BYTES + 1), f"larger than {ENTRY_MAX_BYTES}"),
    ]
    ids = [(send(lab, COMMANDS_STREAM, data), why) for data, why in cases]
    for entry_id, why in ids:
        d = dead_letter(lab, COMMANDS_STREAM, entry_id)
        assert why in d["reason"], (why, d["reason"])
        assert len(d["data"]) <= 4096
    r = lab.redis()
    assert r.type(COMMANDS_STREAM) == "stream"
    assert not any('"ok"' in m for m in r.lrange(queue, 0, -1))          # no reply pushed into the agent's queue
    assert r.type(events_stream(lab.host)) == "stream"
    assert r.xpending(COMMANDS_STREAM, EVENTS_GROUP)["pending"] == 0       # acknowledged ...
    wait_for(lambda: r.xlen(COMMANDS_STREAM) == 0, 10, "lab:commands to be trimmed")   # ... and deleted
    assert fio_attempts(lab) == attempts and dut_sum(lab) == before        # no fio started, the DUT untouched
    serves(lab)


def test_a_command_with_a_bad_body_but_a_reply_list_gets_an_error_reply(lab: LabHandle) -> None:
    reply_to = REPLY_PREFIX + unique()
    t0 = time.monotonic()
    send(lab, COMMANDS_STREAM, json.dumps({"v": PROTOCOL_VERSION, "type": "cancel", "reply_to": reply_to}))
    got = lab.redis().blpop([reply_to], timeout=10)
    assert got is not None and time.monotonic() - t0 < 1.0
    reply = json.loads(got[1])
    assert reply["ok"] is False and "malformed command" in reply["errors"][0] and "run_id" in reply["errors"][0]


def test_a_wrong_version_command_is_answered_at_once(lab: LabHandle) -> None:
    reply_to = REPLY_PREFIX + unique()
    cmd = {"v": 4, "type": "submit", "run_id": "r-old", "suite_source": "q.yaml", "suite_text": QUICK,
           "host": lab.host, "devices": ["dut0"], "reply_to": reply_to}
    t0 = time.monotonic()
    entry = send(lab, COMMANDS_STREAM, json.dumps(cmd))
    got = lab.redis().blpop([reply_to], timeout=10)
    elapsed = time.monotonic() - t0
    assert got is not None, "no reply"
    assert elapsed < 1.0, elapsed                                          # not the CLI's 30 s timeout
    print(f"\nwrong-version command answered in {elapsed * 1000:.0f} ms")
    assert json.loads(got[1])["errors"] == [
        f"protocol version 4 is not spoken here; this controller speaks {PROTOCOL_VERSION} — upgrade labctl"]
    assert "not spoken here" in dead_letter(lab, COMMANDS_STREAM, entry)["reason"]
    with lab.sessions() as s:
        from orchestrator.store.models import Run
        assert s.get(Run, "r-old") is None


# --- events -------------------------------------------------------------------------------------------------

def test_a_corrupt_gzip_end_fails_only_its_attempt(lab: LabHandle) -> None:
    sim = sim_host(lab)
    run_id = lab.submit(one_workload(1), host=sim)
    att = dispatched_attempt(lab, run_id)
    corrupt = Artifact(name="fio.json", sha256="0" * 64, size=100,
                       content_gz_b64=base64.b64encode(b"\x1f\x8b\x08\x00 this is no deflate stream").decode())
    send(lab, events_stream(sim), StepEnded(host=sim, attempt_id=att, outcome="exited", exit_code=0,
                                            artifacts=(corrupt,)))
    d = lab.wait_run(run_id, timeout=30)
    assert d.run.state == "FAILED" and "fio.json" in d.steps[0].reason and "corrupt gzip" in d.steps[0].reason
    assert d.results == {}


def test_a_gzip_bomb_is_refused_before_it_inflates(lab: LabHandle) -> None:
    sim = sim_host(lab)
    run_id = lab.submit(one_workload(1), host=sim)
    att = dispatched_attempt(lab, run_id)
    bomb = Artifact(name="fio.json", sha256="0" * 64, size=4096, content_gz_b64=gz_bomb(1 << 30))   # 1 GiB
    entry = send(lab, events_stream(sim), StepEnded(host=sim, attempt_id=att, outcome="exited", exit_code=0,
                                                    artifacts=(bomb,)))
    assert len(bomb.content_gz_b64) < 2 << 20
    d = lab.wait_run(run_id, timeout=30)
    assert d.run.state == "FAILED" and "inflates past its declared size of 4096 bytes" in d.steps[0].reason
    status = Path(f"/proc/{lab.controller.popen.pid}/status").read_text()
    peak_kib = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM:")))
    assert peak_kib < 700 * 1024, f"controller peak RSS {peak_kib} KiB"     # a 1 GiB inflation would pass 1 GiB
    assert lab.redis().xlen(events_stream(sim)) == 0 and entry                # applied, acknowledged, deleted
    # declared beyond the per-artifact limit: refused when decoded, before any inflation
    big = bomb.model_dump() | {"size": 1 << 40}
    ev = json.loads(StepEnded(host=sim, attempt_id=att, outcome="exited").model_dump_json()) | {"artifacts": [big]}
    e2 = send(lab, events_stream(sim), json.dumps(ev))
    assert "less than or equal" in dead_letter(lab, events_stream(sim), e2)["reason"]


def test_an_event_whose_host_is_not_its_streams_is_refused(lab: LabHandle) -> None:
    sim = sim_host(lab)
    entry = send(lab, events_stream(sim), Heartbeat(host=lab.host))
    d = dead_letter(lab, events_stream(sim), entry)
    assert f"event of host '{lab.host}' on the stream of host '{sim}'" in d["reason"]
    legacy = send(lab, "lab:events", Heartbeat(host=lab.host))
    assert "legacy stream" in dead_letter(lab, "lab:events", legacy)["reason"]


def test_a_forged_end_for_another_hosts_running_step_changes_nothing(lab: LabHandle,
                                                                     fio_outputs: dict[str, bytes]) -> None:
    sim = sim_host(lab)
    run_id = lab.submit(one_workload(30), device="dut0")
    d = lab.wait_step_state(run_id, "RUNNING")
    att = next(st.attempts[-1].id for st in d.steps if st.state == "RUNNING")
    good = (Artifact.of("fio.json", fio_outputs["4k-randread"]),)
    e1 = send(lab, events_stream(sim), StepEnded(host=sim, attempt_id=att, outcome="exited", exit_code=0,
                                                 artifacts=good))
    e2 = send(lab, events_stream(sim), StepEnded(host=lab.host, attempt_id=att, outcome="exited", exit_code=0,
                                                 artifacts=good))
    e3 = send(lab, events_stream(sim), StepStarted(host=sim, attempt_id=att, pid=1, fio_started_at=time.time(),
                                                   job_sha256="x"))
    assert f"from host {sim}; it was dispatched to {lab.host}" in dead_letter(lab, events_stream(sim), e1)["reason"]
    assert "on the stream of host" in dead_letter(lab, events_stream(sim), e2)["reason"]
    assert f"from host {sim}" in dead_letter(lab, events_stream(sim), e3)["reason"]
    d = lab.detail(run_id)
    assert [st.state for st in d.steps] == ["RUNNING"] and d.results == {}      # no result, device still held
    assert ControllerClient(lab.redis()).cancel(run_id, "red team done") is not None
    assert lab.wait_run(run_id, timeout=60).run.state == "CANCELLED"


def test_a_wrong_version_register_marks_the_host_incompatible_and_nothing_is_dispatched(lab: LabHandle) -> None:
    old = f"sim-{unique()}"
    reg = {"v": PROTOCOL_VERSION - 1, "type": "register", "host": old, "agent_version": "0.4.0",
           "facts": {"hostname": old, "from": "the past"}, "duts": [{"name": "dut0", "path": "/srv/x.img"}]}
    entry = send(lab, events_stream(old), json.dumps(reg))
    assert f"speaks protocol {PROTOCOL_VERSION - 1}" in dead_letter(lab, events_stream(old), entry)["reason"]
    with lab.sessions() as s:
        h = s.get(Host, old)
        assert h is not None and h.incompatible == (f"agent 0.4.0 speaks protocol {PROTOCOL_VERSION - 1}; this "
                                                   f"controller speaks {PROTOCOL_VERSION} — upgrade the agent")
    # a known host whose agent is replaced by an older one: a run for it waits, with the reason, and gets nothing
    sim = sim_host(lab)
    with lab.sessions() as s:
        h = s.get(Host, sim)
        assert h is not None and h.incompatible == "" and h.clock_skew_s is not None and abs(h.clock_skew_s) < 30
    entry = send(lab, events_stream(sim), json.dumps(reg | {"host": sim}))
    dead_letter(lab, events_stream(sim), entry)
    run_id = lab.submit(QUICK, host=sim)
    serves(lab)                                      # passes of the controller went by: nothing dispatched to sim
    d = lab.detail(run_id)
    assert d.run.state == "QUEUED" and all(not st.attempts for st in d.steps)
    out = lab.labctl("queue")
    assert out.returncode == 0, out.stderr
    said = f"host {sim} is incompatible: agent 0.4.0 speaks protocol {PROTOCOL_VERSION - 1}"
    assert said in out.stdout.replace("\n", " "), out.stdout
    # the upgraded agent registers again: the run starts (the test plays its agent no further: cancelled)
    sim_host(lab, sim)
    lab.wait_step_state(run_id, "DISPATCHED")
    assert ControllerClient(lab.redis()).cancel(run_id, "red team done") is not None


# --- restarts and an emptied Redis --------------------------------------------------------------------------

def test_poison_left_while_the_controller_was_down_does_not_kill_it(lab: LabHandle) -> None:
    lab.lab.stop_proc(lab.controller, signal.SIGKILL)
    c1 = send(lab, COMMANDS_STREAM, "[1,2,3]")
    c2 = send(lab, COMMANDS_STREAM, "null")
    e1 = send(lab, events_stream(lab.host), b"\x1f\x8b garbage")
    lab.restart_controller()
    for stream, entry in ((COMMANDS_STREAM, c1), (COMMANDS_STREAM, c2), (events_stream(lab.host), e1)):
        dead_letter(lab, stream, entry)
    serves(lab)
    lab.lab.stop_proc(lab.controller, signal.SIGTERM)       # and once more: nothing of it is left to replay
    lab.restart_controller()
    serves(lab)


def test_a_redis_emptied_under_the_controller_is_recovered(lab: LabHandle) -> None:
    redis_client(getattr(lab.lab, "admin_url", None) or lab.broker).flushall()     # the lab's admin user may
    t0 = time.monotonic()
    run_id = lab.submit(QUICK_SUITE)                 # the client waits for the controller's reply
    answered = time.monotonic() - t0
    d = lab.wait_run(run_id, timeout=90)
    assert d.run.state == "SUCCEEDED", d.run.reason
    assert answered < 15, answered
    print(f"\nafter FLUSHALL: a submission answered in {answered:.2f}s, its run done in {time.monotonic() - t0:.1f}s")
    assert lab.controller.alive()
