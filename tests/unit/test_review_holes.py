"""Holes found reviewing the trust change (issue 12): each test failed before its fix."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import time
from typing import Any

import pytest
import redis

from labcontract.brokerauth import ADMIN, CONTROLLER, LABCTL, agent_user, lab_users, render_acl
from labcontract.protocol import COMMANDS_STREAM, EVENTS_GROUP, ReportStep, events_stream
from labcontract.suite import check_footprint


def test_a_huge_clock_skew_claimed_at_registration_cannot_break_dispatch() -> None:
    """Register.sent_at is the agent's word: 1e12 made every message to that host (and the batch of starts it
    was in) raise OverflowError in the controller's main loop, which exits on a non-transient error."""
    from orchestrator.controller.dispatch import Dispatcher

    d = Dispatcher("redis://127.0.0.1:1/0", expires_s=60)   # no connection is made to encode
    try:
        for skew in (1e12, 1e300, 3.0e9):
            d.skew_s["h1"] = skew
            queue, payload = d._encode("lab.agent.report_step", "h1", ReportStep(attempt_id="a1"))
            assert queue == "agent.h1" and payload
    finally:
        d.close()


@pytest.mark.parametrize("value", ["50%\n", "4096\n"])
def test_a_footprint_with_a_trailing_newline_is_refused(value: str) -> None:
    """'$' matches before a final newline: the start message's footprint check let "50%\\n" through (it then
    reached the nbd job file of a network step unescaped)."""
    with pytest.raises(ValueError):
        check_footprint(value)


def _redis_with_acl(tmp_path: Any) -> tuple[Any, Any]:
    """A redis-server on a free port with the lab's ACL file for agents h1, h2 (admin included)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pw = {u: f"pw-{u}" for u in lab_users(["h1", "h2"], admin=True)}
    (tmp_path / "users.acl").write_text(render_acl(pw))
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path),
                             "--aclfile", str(tmp_path / "users.acl")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def client(user: str) -> redis.Redis:
        return redis.Redis(port=port, username=user, password=pw[user], socket_timeout=5)

    deadline = time.monotonic() + 10
    while True:
        try:
            client(ADMIN).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.05)
    return proc, client


def test_an_agent_cannot_delete_or_expire_its_events_stream(tmp_path: Any) -> None:
    """With %W~lab:events:<host> among its root keys an agent could DEL or PEXPIRE its own events stream: the
    controller's XREADGROUP over every stream then fails with NOGROUP (each pass: no event of any host applied)."""
    proc, client = _redis_with_acl(tmp_path)
    try:
        ctl, agent = client(CONTROLLER), client(agent_user("h1"))
        for host in ("h1", "h2"):
            ctl.xgroup_create(events_stream(host), EVENTS_GROUP, id="0", mkstream=True)
        agent.xadd(events_stream("h1"), {"data": "x"}, maxlen=1000, approximate=True)   # what the agent does
        with pytest.raises(redis.exceptions.NoPermissionError):
            agent.xadd(events_stream("h2"), {"data": "x"})
        for cmd in (("DEL", events_stream("h1")), ("PEXPIRE", events_stream("h1"), 1),
                    ("RENAME", "lab:live:h1", events_stream("h1")), ("LPUSH", events_stream("h1"), "x")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                agent.execute_command(*cmd)
        with pytest.raises(redis.exceptions.ResponseError, match="access"):
            agent.eval("return redis.call('del', KEYS[1])", 1, events_stream("h1"))
        agent.set("lab:live:h1", "{}")                       # its own keys still work
        got = ctl.xreadgroup(EVENTS_GROUP, "c", {events_stream("h1"): ">", events_stream("h2"): ">"}, count=10)
        assert [s for s, _ in got] == [events_stream("h1").encode()]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("path", ["/srv/lab dut.img", "/srv/a=b.img", "/srv/$x.img", "/srv/x;y", "x/rel"])
def test_a_dut_path_fio_cannot_take_is_refused_at_declaration(tmp_path: Any, path: str) -> None:
    """A DUT whose path the controller cannot render (a file-backed DUT '/srv/lab dut.img') was accepted at
    registration and at submit; the first scheduling pass then raised StepError and the controller exited (and
    again at every restart: the run stays queued). Refused in the Register (the controller dead-letters it)."""
    from pydantic import ValidationError

    from labcontract.facts import DeclaredDut

    with pytest.raises(ValidationError):
        DeclaredDut(name="dut0", path=path, kind="file", size_bytes=1 << 20)
    DeclaredDut(name="dut0", path="/dev/disk/by-path/pci-0000:00:1f.2-ata-1", kind="block", size_bytes=1 << 20)


def test_the_agent_refuses_to_declare_such_a_dut(tmp_path: Any) -> None:
    from agents.facts import declare_dut
    from labcontract.errors import ConfigError

    img = tmp_path / "lab dut.img"
    img.write_bytes(b"\0" * 4096)
    with pytest.raises(ConfigError, match="DUT path holds only"):
        declare_dut(f"dut0={img}", [])
    ok = tmp_path / "dut.img"
    ok.write_bytes(b"\0" * 4096)
    assert declare_dut(f"dut0={ok}", []).path == str(ok)


def test_the_controller_survives_a_submit_to_such_a_dut(env: Any) -> None:
    """The Register is refused as a whole (ValidationError at decode): the DUT is never known, a submit to it is
    refused, and scheduling raises nothing."""
    from labcontract.errors import ProtocolError
    from labcontract.protocol import PROTOCOL_VERSION, Submit, decode_event
    from tests.unit.test_controller import SUITE

    ctl, disp, _clock, _db = env
    raw = ('{"v": ' + str(PROTOCOL_VERSION) + ', "type": "register", "host": "h1", "agent_version": "0.1.0", '
           '"facts": {"hostname": "h1", "fio_version": "fio-3.33"}, "duts": [{"name": "dut1", '
           '"path": "/srv/lab dut.img", "kind": "file", "size_bytes": 1048576}]}')
    with pytest.raises(ProtocolError, match="duts"):
        decode_event(raw)
    r = ctl.submit(Submit(run_id="r1", suite_source="two.yaml", suite_text=SUITE, host="h1", devices=("dut1",),
                          reply_to="-"))
    assert not r.ok
    ctl.schedule()
    assert disp.starts() == []


def test_command_fields_stored_or_forwarded_are_bounded() -> None:
    """A Cancel's reason was unbounded: stored on the run and on every step (a 30 MB reason on a run of 10,000
    pending steps: 300 GB of store writes), and over 4096 characters it failed CancelStep inside the transaction
    (no reply: labctl waited its 30 s). A cron expression, schedule and release names likewise."""
    from labcontract.errors import ProtocolError
    from labcontract.protocol import PROTOCOL_VERSION, decode_command

    def cmd(**kw: Any) -> str:
        return json.dumps({"v": PROTOCOL_VERSION, "reply_to": "lab:reply:x", **kw})

    submit = {"run_id": "-", "suite_source": "s", "suite_text": "suite: s", "host": "h1", "devices": ["d"],
              "reply_to": "-"}
    for bad in (cmd(type="cancel", run_id="r1", reason="x" * 4097), cmd(type="cancel", run_id="r" * 100_000),
                cmd(type="pause", run_id="r" * 100_000), cmd(type="resume", run_id="r" * 100_000),
                cmd(type="schedule_add", name="n", cron="* " * 100_000, submit=submit),
                cmd(type="schedule_add", name="n", cron="* * * * *", submit=submit, expires_after_s=10**30),
                cmd(type="schedule_rm", name="n" * 100_000), cmd(type="release", host="h" * 100_000),
                cmd(type="release", host="h1", device="d" * 100_000)):
        with pytest.raises(ProtocolError):
            decode_command(bad)
    decode_command(cmd(type="cancel", run_id="r1", reason="x" * 4096))
    decode_command(cmd(type="schedule_add", name="n", cron="*/5 * * * *", submit=submit, expires_after_s=3600))


def test_health_checks_about_unknown_targets_do_not_grow_the_host_record(env: Any) -> None:
    """host.health was keyed by the agent's free-text target: each heartbeat could add 1024 keys of ~6 KB, kept
    forever and rewritten whole at every beat (GBs within hours from one compromised agent)."""
    from labcontract.protocol import HealthCheck, Heartbeat
    from orchestrator.store.models import Host

    ctl, _disp, clock, db = env
    for beat in range(3):
        clock.t += 1
        checks = tuple(HealthCheck(check="present", target=f"/junk/{beat}/{i}", ok=True, detail="x" * 100)
                       for i in range(1023))
        ctl.handle_event(Heartbeat(host="h1", health=(*checks, HealthCheck(check="present", target="/dev/loop9",
                                                                           ok=True))))
    with db() as s:
        host = s.get(Host, "h1")
        assert host is not None and set(host.health or {}) == {"present /dev/loop9"}


@pytest.mark.parametrize("value", ["/dev/disk/by-id/ata-X\n", "/srv/dut.img\n", "h1\n", "ctl.lab\n"])
def test_inventory_values_with_a_trailing_newline_are_refused(value: str) -> None:
    """'$' matches before a final newline: these passed and the newline reached a udev rule (broken in two)."""
    from labcontract.inventory_values import BY_ID_PATH, DEV_PATH, HOST_NAME, host_address, safe_path

    assert not (BY_ID_PATH.match(value) or DEV_PATH.match(value) or HOST_NAME.match(value))
    with pytest.raises(ValueError):
        safe_path(value)
    with pytest.raises(ValueError):
        host_address(value)


def test_reply_lists_and_stream_hosts_are_matched_whole() -> None:
    from orchestrator.controller.intake import valid_reply_to

    assert valid_reply_to("lab:reply:abc") and not valid_reply_to("lab:reply:abc\n")


@pytest.mark.parametrize("mtu", [68, 1280, 65535])
def test_a_network_start_takes_only_the_mtus_a_suite_may_name(mtu: int) -> None:
    """NetStart.mtu took 68..65535 while a suite allows 1500 or 9000: a forged start made an agent run with
    --manage-mtu set MTU 68 on a declared interface (never restored)."""
    from pydantic import ValidationError

    from labcontract.protocol import NetStart

    with pytest.raises(ValidationError):
        NetStart(role="initiator", paths=("p0",), mtu=mtu, start_at=1.0, seconds=1)
    for ok in (1500, 9000):
        NetStart(role="initiator", paths=("p0",), mtu=ok, start_at=1.0, seconds=1)


def test_a_step_end_declares_at_most_so_many_artifact_bytes_and_each_name_once() -> None:
    """32 artifacts of 128 MiB each (a few KB of gzip each) made the controller inflate, hold and store 4 GiB for
    one event; the same name twice was stored twice."""
    import base64
    import gzip
    import hashlib

    from pydantic import ValidationError

    from labcontract.protocol import ARTIFACT_MAX_BYTES, Artifact, StepEnded

    packed = base64.b64encode(gzip.compress(b"\0" * 4096)).decode()
    big = [Artifact(name=f"a{i}", sha256=hashlib.sha256(b"").hexdigest(), size=ARTIFACT_MAX_BYTES,
                    content_gz_b64=packed) for i in range(32)]
    with pytest.raises(ValidationError, match="in all"):
        StepEnded(host="h1", attempt_id="a1", outcome="exited", artifacts=tuple(big))
    with pytest.raises(ValidationError, match="twice"):
        StepEnded(host="h1", attempt_id="a1", outcome="exited",
                  artifacts=(Artifact.of("fio.json", b"{}"), Artifact.of("fio.json", b"{}")))
    StepEnded(host="h1", attempt_id="a1", outcome="exited", artifacts=(*big[:2], Artifact.of("job.fio", b"x")))


@pytest.mark.parametrize("observed", [{"signatures": [{"x": 1}]}, {"exists": True}, {"path": "/d", "real_path": "/d",
                                      "mountpoints": 5}, {"path": "/d", "real_path": "/d", "signatures": "ab"},
                                      {"path": 1, "real_path": "/d"}, {"path": "/d", "real_path": "/d", "swap": "no"}])
def test_a_malformed_interlock_observation_is_refused_in_the_register(env: Any, observed: dict[str, Any]) -> None:
    """DeclaredDut.observed is the agent's dict: {"signatures": [{"x": 1}]} was stored, and the controller's
    interlock raised TypeError in every scheduling pass of a writing step on that DUT (the controller exited)."""
    from pydantic import ValidationError

    from labcontract.facts import DeclaredDut
    from labcontract.interlock import observe, observed_from_dict

    with pytest.raises(ValidationError, match="observed"):      # a typed, bounded model (issue 29)
        DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30, observed=observed)
    real = dataclasses.asdict(observe("/dev/null"))
    dut = DeclaredDut(name="d", path="/dev/null", kind="block", size_bytes=1, observed=real)
    assert dut.observed is not None and observed_from_dict(dut.observed.as_dict()) == observe("/dev/null")


def test_a_labctl_user_cannot_delete_the_commands_stream(tmp_path: Any) -> None:
    """%W~lab:commands with +del let a labctl user DEL lab:commands (its group and everyone's queued commands with
    it): NOGROUP on every read of the controller. It may still submit (XADD) and read and drop its replies."""
    proc, client = _redis_with_acl(tmp_path)
    try:
        ctl, labctl = client(CONTROLLER), client(LABCTL)
        ctl.xgroup_create(COMMANDS_STREAM, EVENTS_GROUP, id="0", mkstream=True)
        labctl.xadd(COMMANDS_STREAM, {"data": "{}"})
        for cmd in (("DEL", COMMANDS_STREAM), ("PEXPIRE", COMMANDS_STREAM, 1), ("XADD", "lab:reply:x", "*", "a", "b"),
                    ("LPUSH", COMMANDS_STREAM, "x")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                labctl.execute_command(*cmd)
        ctl.lpush("lab:reply:x", "r")
        assert labctl.blpop(["lab:reply:x"], timeout=1) == (b"lab:reply:x", b"r")
        assert labctl.delete("lab:reply:x") == 0
        assert ctl.xlen(COMMANDS_STREAM) == 1
    finally:
        proc.kill()
        proc.wait()
