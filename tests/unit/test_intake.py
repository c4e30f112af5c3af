"""The controller's intake (orchestrator.controller.intake): bounded decoding, trust in events, poison entries
dead-lettered, transient faults told apart; on a real SQLite store with a recording redis stand-in."""

from __future__ import annotations

import base64
import errno
import json
import sqlite3
import tracemalloc
import zlib
from typing import Any

import pytest
import redis
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from labcontract.errors import ProtocolError
from labcontract.facts import DeclaredDut, HostFacts
from labcontract.protocol import (
    DEADLETTER_STREAM,
    ENTRY_MAX_BYTES,
    PROTOCOL_VERSION,
    Artifact,
    Heartbeat,
    Register,
    StepEnded,
    StepStarted,
    Submit,
    decode_command,
    decode_event,
    events_stream,
)
from orchestrator.controller.intake import Intake, Streams, transient, valid_reply_to
from orchestrator.runs.scheduling import decide
from orchestrator.store.models import Attempt, Host, Result, Run

SUITE = "suite: one\nprofiles:\n  - {name: a, rw: randread, bs: 4k, iodepth: 8, runtime: 1}\n"


class FakeRedis:
    """What the intake and the command path call on Redis, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lists: dict[str, list[str]] = {}

    def xadd(self, name: str, fields: dict[str, Any], **kw: Any) -> str:
        self.calls.append(("xadd", name, fields, kw))
        return "1-0"

    def xack(self, name: str, group: str, *ids: str) -> int:
        self.calls.append(("xack", name, *ids))
        return len(ids)

    def xdel(self, name: str, *ids: str) -> int:
        self.calls.append(("xdel", name, *ids))
        return len(ids)

    def pipeline(self, transaction: bool = True) -> FakeRedis:
        return self

    def execute(self) -> list[Any]:
        return []

    def lpush(self, name: str, value: str) -> int:
        self.lists.setdefault(name, []).append(value)
        return 1

    def expire(self, name: str, ttl: int) -> bool:
        return True

    def dead(self) -> list[dict[str, Any]]:
        return [c[2] for c in self.calls if c[0] == "xadd" and c[1] == DEADLETTER_STREAM]

    def acked(self) -> list[str]:
        return [i for c in self.calls if c[0] == "xack" for i in c[2:]]


@pytest.fixture
def fake(env: Any) -> tuple[Any, FakeRedis, Intake]:
    ctl = env[0]
    r = FakeRedis()
    ctl.redis = r
    intake = Intake(ctl)
    intake._streams = Streams(r)   # type: ignore[arg-type]
    return env, r, intake


def gz_bomb(plain_size: int) -> str:
    """gzip of ``plain_size`` zero bytes, made in chunks (never held whole)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [z.compress(chunk) for _ in range(plain_size >> 20)]
    out.append(z.flush())
    return base64.b64encode(b"".join(out)).decode()


def running_attempt(ctl: Any, disp: Any, clock: Any) -> str:
    assert ctl.submit(Submit(run_id="r1", suite_source="one.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                             reply_to="-")).ok
    ctl.schedule()
    att: str = disp.starts()[-1].attempt_id
    ctl.handle_event(StepStarted(host="h1", attempt_id=att, pid=7, fio_started_at=clock.t, job_sha256="x"))
    return att


# --- artifacts: bounded, streaming ------------------------------------------------------------------------

def test_a_gzip_bomb_is_refused_before_it_inflates() -> None:
    bomb = gz_bomb(1 << 30)                                       # 1 GiB of zeros in ~1 MB
    art = Artifact(name="fio.json", sha256="0" * 64, size=1024, content_gz_b64=bomb)
    tracemalloc.start()
    with pytest.raises(ProtocolError, match="inflates past its declared size of 1024 bytes"):
        art.content()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, peak                                 # the 1 MB bomb and a chunk, never 1 GiB
    big = Artifact(name="fio.json", sha256="0" * 64, size=8 << 20, content_gz_b64=gz_bomb(16 << 20))
    with pytest.raises(ProtocolError, match="inflates past the limit of 1048576 bytes"):
        big.content(limit=1 << 20)


@pytest.mark.parametrize(("content", "size", "why"), [
    (base64.b64encode(b"\x1f\x8b\x08\x00garbage-not-deflate").decode(), 5, "corrupt gzip"),
    (base64.b64encode(zlib.compress(b"hello")).decode(), 5, "corrupt gzip"),              # zlib, not gzip
    ("!!!not base64!!!", 5, "not base64"),
])
def test_corrupt_artifacts_are_protocol_errors(content: str, size: int, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        Artifact(name="fio.json", sha256="0" * 64, size=size, content_gz_b64=content).content()


def test_truncated_trailing_and_missized_artifacts_are_refused() -> None:
    good = Artifact.of("fio.json", b"x" * 10_000)
    packed = base64.b64decode(good.content_gz_b64)
    cut = good.model_copy(update={"content_gz_b64": base64.b64encode(packed[:-12]).decode()})
    with pytest.raises(ProtocolError, match="truncated"):
        cut.content()
    extra = good.model_copy(update={"content_gz_b64": base64.b64encode(packed + b"junk").decode()})
    with pytest.raises(ProtocolError, match="after the end"):
        extra.content()
    with pytest.raises(ProtocolError, match="10000 bytes, declared 20000"):
        good.model_copy(update={"size": 20_000}).content()
    with pytest.raises(ValueError):
        Artifact(name="../x", sha256="0" * 64, size=1, content_gz_b64="")
    with pytest.raises(ValueError):
        Artifact(name="fio.json", sha256="0" * 64, size=1 << 40, content_gz_b64="")
    assert good.content() == b"x" * 10_000


# --- decoding: every failure a ProtocolError, sizes bounded ---------------------------------------------------

@pytest.mark.parametrize("raw", ["[1,2,3]", "null", '"a string"', "{}", '{"v": 7}', "{not json",
                                 b"\xff\xfe\x00", '{"v": 7, "type": "nope"}', "1e999999"])
def test_any_entry_decodes_or_is_a_protocol_error(raw: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_event(raw)
    with pytest.raises(ProtocolError):
        decode_command(raw)


def test_sizes_are_bounded_before_parsing_and_in_fields() -> None:
    with pytest.raises(ProtocolError, match="larger than"):
        decode_event(b" " * (ENTRY_MAX_BYTES + 1))
    base = json.loads(StepEnded(host="h1", attempt_id="a1", outcome="error").model_dump_json())
    for field, value in [("reason", "x" * 5000), ("host", "h1\nx"), ("host", "x" * 65), ("attempt_id", "../a"),
                         ("artifacts", [Artifact.of("a", b"").model_dump()] * 33), ("fio_ended_at", "Infinity")]:
        with pytest.raises(ProtocolError, match="malformed event"):
            decode_event(json.dumps({**base, field: value}))


def test_reply_to_names_only_a_reply_list() -> None:
    for bad in ("lab:commands", "agent.h1", "lab:events:h1", "lab:reply:", "lab:reply:a b", "lab:reply:" + "a" * 65):
        assert not valid_reply_to(bad)
        with pytest.raises(ValueError):
            Submit(run_id="r", suite_source="s", suite_text="", host="h", devices=(), reply_to=bad)
    assert valid_reply_to("lab:reply:0123abcd")


# --- commands ---------------------------------------------------------------------------------------------

def test_poison_commands_are_refused_with_a_reply_when_one_can_be_sent(fake: Any) -> None:
    (ctl, *_), r, _intake = fake
    v = PROTOCOL_VERSION
    for raw in ("[1,2,3]", "null", '"x"', f'{{"v": {v}, "run_id": "r"}}', f'{{"v": {v}, "type": "submit", '
                                                                           '"reply_to": "lab:commands"}'):
        with pytest.raises(ProtocolError):
            ctl.handle_command(raw)
    assert r.lists == {}                             # no reply list could be named: nothing pushed anywhere
    with pytest.raises(ProtocolError, match="malformed command"):
        ctl.handle_command(f'{{"v": {v}, "type": "cancel", "reply_to": "lab:reply:r1"}}')
    (reply,) = r.lists["lab:reply:r1"]
    assert json.loads(reply)["ok"] is False and "run_id" in json.loads(reply)["errors"][0]


def test_a_wrong_version_command_is_answered_at_once(fake: Any) -> None:
    (ctl, *_), r, _intake = fake
    cmd = {"v": 4, "type": "cancel", "run_id": "r1", "reply_to": "lab:reply:old"}
    with pytest.raises(ProtocolError, match="not spoken here"):
        ctl.handle_command(json.dumps(cmd))
    reply = json.loads(r.lists["lab:reply:old"][0])
    assert reply["errors"] == [f"protocol version 4 is not spoken here; this controller speaks {PROTOCOL_VERSION} "
                               "— upgrade labctl"]


def test_client_shows_a_version_refusal() -> None:
    from labcontract.errors import ServiceError
    from orchestrator.runs.client import parse_reply

    with pytest.raises(ServiceError, match="upgrade labctl"):
        parse_reply(json.dumps({"v": PROTOCOL_VERSION, "ok": False, "errors": [
            "protocol version 4 is not spoken here; this controller speaks 5 — upgrade labctl"]}))
    with pytest.raises(ServiceError, match=f"protocol {PROTOCOL_VERSION + 1}"):
        parse_reply(json.dumps({"v": PROTOCOL_VERSION + 1, "ok": True, "new_field": 1}))
    assert parse_reply(json.dumps({"v": PROTOCOL_VERSION, "ok": True, "run_id": "r"})).run_id == "r"


# --- events: identity and state -------------------------------------------------------------------------------

def test_a_forged_end_from_another_host_stores_nothing_and_frees_nothing(env: Any, fio_outputs: dict[str, bytes],
                                                                         fake: Any) -> None:
    ctl, disp, clock, db = env
    _env, r, intake = fake
    ctl.handle_event(Register(host="h2", agent_version="0.1.0", facts=HostFacts(hostname="h2"), duts=()))
    att = running_attempt(ctl, disp, clock)
    forged = StepEnded(host="h2", attempt_id=att, outcome="exited", exit_code=0,
                       artifacts=(Artifact.of("fio.json", fio_outputs["4k-randread"]),))
    with pytest.raises(ProtocolError, match="from host h2; it was dispatched to h1"):
        ctl.handle_event(forged)
    # the same body on h1's stream: its host is not its stream's
    entry = ("1-0", {b"data": forged.model_dump_json().encode()})
    intake.events([(events_stream("h1"), [entry])])
    (dead,) = r.dead()
    assert "event of host 'h2' on the stream of host 'h1'" in dead["reason"] and dead["id"] == "1-0"
    assert r.acked() == ["1-0"]
    with db() as s:
        a = s.get(Attempt, att)
        assert a is not None and a.state == "RUNNING" and s.scalars(select(Result)).all() == []
    ctl.schedule()
    assert len(disp.starts()) == 1                                  # the device is still held


def test_events_for_unknown_or_superseded_attempts_are_refused(env: Any) -> None:
    ctl, disp, clock, _db = env
    with pytest.raises(ProtocolError, match="unknown attempt nope"):
        ctl.handle_event(StepEnded(host="h1", attempt_id="nope", outcome="error"))
    att = running_attempt(ctl, disp, clock)
    ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="timeout", reason="x"))   # retried
    ctl.schedule()
    ctl.handle_event(StepEnded(host="h1", attempt_id=att, outcome="timeout", reason="x"))   # duplicate: nothing
    assert len(disp.starts()) == 2


def test_a_batch_with_poison_applies_the_rest_and_acks_all(fake: Any) -> None:
    (_ctl, _disp, clock, db), r, intake = fake
    good = Heartbeat(host="h1").model_dump_json().encode()
    clock.t += 50
    entries = [("1-0", {b"data": b"[1,2,3]"}), ("2-0", {b"data": good}), ("3-0", {b"nodata": b"x"}),
               ("4-0", {b"data": b"\xff\xfe"}), ("5-0", {b"data": StepEnded(host="h1", attempt_id="zz",
                                                                           outcome="error").model_dump_json().encode()})]
    intake.events([(events_stream("h1"), entries)])
    assert sorted(r.acked()) == ["1-0", "2-0", "3-0", "4-0", "5-0"]
    reasons = {d["id"]: d["reason"] for d in r.dead()}
    assert set(reasons) == {"1-0", "3-0", "4-0", "5-0"}
    assert "not a message" in reasons["1-0"] and "without a data field" in reasons["3-0"]
    assert "unknown attempt zz" in reasons["5-0"]
    with db() as s:
        h = s.get(Host, "h1")
        assert h is not None and h.last_seen == clock.t              # the good heartbeat was applied


def test_legacy_stream_entries_are_dead_lettered(fake: Any) -> None:
    _env, r, intake = fake
    intake.events([("lab:events", [("1-0", {b"data": Heartbeat(host="h1").model_dump_json().encode()})])])
    (dead,) = r.dead()
    assert "legacy stream" in dead["reason"]


def test_another_protocol_version_marks_the_host_incompatible(env: Any, fake: Any) -> None:
    ctl, _disp, clock, db = env
    _env, r, intake = fake
    old = {"v": 4, "type": "register", "host": "h1", "agent_version": "0.9", "facts": {"whatever": 1}}
    intake.events([(events_stream("h1"), [("1-0", {b"data": json.dumps(old).encode()})])])
    assert "speaks protocol 4" in r.dead()[0]["reason"]
    assert ctl.submit(Submit(run_id="r1", suite_source="one.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                             reply_to="-")).ok
    with db() as s:
        h = s.get(Host, "h1")
        assert h is not None
        assert f"agent 0.9 speaks protocol 4; this controller speaks {PROTOCOL_VERSION} — upgrade the agent" \
            in h.incompatible
        runs = list(s.scalars(select(Run)))
        d = decide(runs, {h.name: h}, clock.t, ctl.host_up)
        assert d.dispatch == [] and "host h1 is incompatible" in d.waits["r1"]
    ctl.handle_event(Register(host="h1", agent_version="1.0", facts=HostFacts(hostname="h1"),
                              duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30),),
                              sent_at=clock.t + 2.5))
    with db() as s:
        h = s.get(Host, "h1")
        assert h is not None and h.incompatible == "" and h.clock_skew_s == pytest.approx(2.5)


# --- transient or data ----------------------------------------------------------------------------------------

def test_transient_faults_are_told_from_bad_data() -> None:
    locked = sa_exc.OperationalError("UPDATE", {}, sqlite3.OperationalError("database is locked"))
    faults: list[BaseException] = [redis.ConnectionError("down"), redis.ResponseError("NOGROUP No such key"), locked,
                                    OSError(errno.ENOSPC, "No space left on device")]
    for e in faults:
        assert transient(e), e
    dup = sa_exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))
    data: list[BaseException] = [redis.ResponseError("WRONGTYPE Operation against a key"), dup, ProtocolError("x"),
                                 ValueError("x"), OSError("Not a gzipped file"), KeyError("x")]
    for e in data:
        assert not transient(e), e


def test_a_transient_fault_acks_nothing_and_propagates(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (ctl, *_), r, intake = fake

    def locked(*_a: Any, **_k: Any) -> None:
        raise sa_exc.OperationalError("UPDATE", {}, sqlite3.OperationalError("database is locked"))

    monkeypatch.setattr(ctl, "_apply_event", locked)
    with pytest.raises(sa_exc.OperationalError):
        intake.events([(events_stream("h1"), [("1-0", {b"data": Heartbeat(host="h1").model_dump_json().encode()})])])
    assert r.acked() == [] and r.dead() == []


def test_attempts_on_a_host_turned_incompatible_say_why(env: Any, fake: Any) -> None:
    ctl, disp, clock, db = env
    _env, _r, intake = fake
    att = running_attempt(ctl, disp, clock)
    old = {"v": PROTOCOL_VERSION + 1, "type": "register", "host": "h1", "agent_version": "9.0"}
    intake.events([(events_stream("h1"), [("1-0", {b"data": json.dumps(old).encode()})])])
    with db() as s:
        a = s.get(Attempt, att)
        assert a is not None and a.state == "RUNNING"
        assert ("its end cannot be received: host h1 is incompatible (agent 9.0 speaks protocol "
                f"{PROTOCOL_VERSION + 1}; this controller speaks {PROTOCOL_VERSION} — upgrade the controller)"
                == a.reason == a.step.reason)
