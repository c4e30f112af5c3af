"""The message protocol: versions, shapes, artifacts."""

from __future__ import annotations

import json

import pytest

from labcontract.errors import ProtocolError
from labcontract.facts import HostFacts
from labcontract.protocol import (
    PROTOCOL_VERSION,
    Artifact,
    Heartbeat,
    Register,
    StartStep,
    StepEnded,
    decode,
    decode_event,
)
from labcontract.suite import parse_suite


def start_msg() -> StartStep:
    w = parse_suite("suite: s\nprofiles:\n  - {name: a, rw: read, bs: 4k}\n", "s").workloads[0]
    return StartStep(run_id="r1", step_id="r1-s000", attempt_id="r1-s000-a1", host="h", devices=("/dev/x",),
                     job_name="a", workload=w, timeout_s=100, dispatched_at=1.0)


def test_events_round_trip() -> None:
    ev = Register(host="h", agent_version="0.1.0", facts=HostFacts(hostname="h"), duts=())
    back = decode_event(ev.model_dump_json())
    assert back == ev and back.v == PROTOCOL_VERSION
    hb = decode_event(Heartbeat(host="h", running=("a",)).model_dump_json())
    assert isinstance(hb, Heartbeat) and hb.running == ("a",)


def test_other_protocol_version_is_rejected() -> None:
    data = json.loads(Heartbeat(host="h").model_dump_json())
    data["v"] = PROTOCOL_VERSION + 1
    with pytest.raises(ProtocolError, match=f"protocol version {PROTOCOL_VERSION + 1} is not spoken here"):
        decode_event(json.dumps(data))
    payload = start_msg().model_dump(mode="json") | {"v": 99}
    with pytest.raises(ProtocolError) as info:
        decode(StartStep, payload)
    assert info.value.got_version == 99


def test_malformed_messages_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        decode_event('{"v": 1, "type": "nonsense", "host": "h"}')
    payload = start_msg().model_dump(mode="json")
    del payload["devices"]
    with pytest.raises(ProtocolError, match="malformed StartStep"):
        decode(StartStep, payload)


def test_start_message_is_plain_json() -> None:
    payload = start_msg().model_dump(mode="json")
    assert json.loads(json.dumps(payload)) == payload
    assert decode(StartStep, payload) == start_msg()


def test_artifact_keeps_content_and_checks_sha() -> None:
    data = b'{"fio version": "fio-3.33"}' * 1000
    art = Artifact.of("fio.json", data)
    assert art.size == len(data) and art.content() == data
    assert len(art.content_gz_b64) < len(data) / 5
    forged = art.model_copy(update={"sha256": "0" * 64})
    with pytest.raises(ProtocolError, match="sha256"):
        forged.content()
    ended = StepEnded(host="h", attempt_id="a", outcome="exited", exit_code=0, artifacts=(art,))
    assert decode_event(ended.model_dump_json()) == ended
