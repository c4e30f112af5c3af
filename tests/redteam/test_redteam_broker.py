"""Red team, broker: who can reach what on a real redis-server with the lab's generated ACL file.

The attacker holds one agent host's credentials (``agent-otherhost``: a compromised lab host) or the
labctl user's, or none, and aims at host ``testhost`` (a real agent with a loop-device DUT) and the
controller. Every attempt is refused by Redis (NOPERM / NOAUTH / WRONGPASS), the controller stays up,
no fio starts on testhost and its DUT's checksum is unchanged. The controller's log holds no password.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from labcontract.brokerauth import unacked_keys
from labcontract.protocol import COMMANDS_STREAM, DEADLETTER_STREAM, TASK_START, agent_queue, events_stream
from labcontract.transport import redis_client
from orchestrator.labs.lab import Lab, wait_for
from tests.conftest import LabHandle, start_lab

pytestmark = pytest.mark.integration

VICTIM = "testhost"
ATTACKER = "otherhost"
FOOTPRINT_EXPLOIT = "1%\nexec_prerun=touch /tmp/pwned\n[evil]\nfilename=/dev/null\nrw=write\n;%"


@pytest.fixture(scope="module")
def rt_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    handle = start_lab(tmp_path_factory.mktemp("rtbroker"))
    yield handle
    handle.lab.stop()


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _attempts(handle: LabHandle) -> list[str]:
    return sorted(p.name for p in (handle.lab.root / "agents" / VICTIM / "attempts").glob("*"))


def _forged_start() -> str:
    """A Celery start message as the dispatcher encodes it, carrying issue 12's footprint exploit."""
    from celery import Celery

    from labcontract.transport import celery_settings
    from orchestrator.controller.celery_wire import TaskEncoder

    app = Celery("forger", set_as_current=False)
    app.conf.update(celery_settings("memory://"))
    payload = {"run_id": "r-evil", "step_id": "r-evil-s000", "attempt_id": "r-evil-s000-a1", "host": VICTIM,
               "devices": ["/dev/null"], "job_name": "evil", "timeout_s": 60, "dispatched_at": time.time(),
               "workload": {"footprint": FOOTPRINT_EXPLOIT}}
    return TaskEncoder(app).encode(TASK_START, [payload], queue=agent_queue(VICTIM), expires_s=60, argsrepr="(x)")


def _refused(call: Callable[[], Any], what: str) -> str:
    with pytest.raises(redis.exceptions.NoPermissionError) as err:
        call()
    return f"{what}: {err.value}"


def _held(handle: LabHandle, before_sha: str, before_attempts: list[str]) -> None:
    handle.check_alive()                                         # controller and agent still up
    assert _attempts(handle) == before_attempts                  # no attempt, so no fio, on the victim
    assert _sha(handle.duts["dut0"].backing) == before_sha       # the DUT untouched


def test_an_agent_of_another_host_can_reach_nothing_of_the_victim_nor_the_controller(rt_lab: LabHandle) -> None:
    sha, attempts = _sha(rt_lab.duts["dut0"].backing), _attempts(rt_lab)
    evil = redis_client(rt_lab.lab.agent_url(ATTACKER))
    assert evil.ping()
    forged_event = {"data": json.dumps({"type": "step_ended", "host": VICTIM, "attempt_id": "x", "iops": 9999999})}
    refused = [
        _refused(lambda: evil.lpush(agent_queue(VICTIM), _forged_start()), "LPUSH a start onto agent.testhost"),
        _refused(lambda: evil.brpop([agent_queue(VICTIM)], timeout=1), "take testhost's starts"),
        _refused(lambda: evil.xadd(events_stream(VICTIM), forged_event), "XADD to lab:events:testhost"),
        _refused(lambda: evil.xadd(COMMANDS_STREAM, {"data": "{}"}), "XADD a command"),
        _refused(lambda: evil.xread({COMMANDS_STREAM: "0"}), "read lab:commands"),
        _refused(lambda: evil.xadd(DEADLETTER_STREAM, {"data": "{}"}), "write lab:deadletter"),
        _refused(lambda: evil.xrange(DEADLETTER_STREAM), "read lab:deadletter"),
        _refused(lambda: evil.xrange(events_stream(ATTACKER)), "read even its own events back"),
        _refused(lambda: evil.hgetall(unacked_keys(VICTIM)["unacked_key"]), "read testhost's unacked starts"),
        _refused(lambda: evil.set(f"lab:live:{VICTIM}", "[]"), "overwrite testhost's live status"),
        _refused(lambda: evil.lpush("lab:reply:x", "{}"), "forge a reply to labctl"),
        _refused(lambda: evil.flushall(), "FLUSHALL"),
        _refused(lambda: evil.config_set("appendonly", "no"), "CONFIG SET"),
        _refused(lambda: evil.keys("*"), "KEYS"),
        _refused(lambda: evil.execute_command("ACL", "LIST"), "ACL LIST"),
        _refused(lambda: evil.eval("return redis.call('LPUSH', KEYS[1], ARGV[1])", 1, agent_queue(VICTIM),
                                   _forged_start()), "LPUSH through a script"),
    ]
    assert len(refused) == 16
    # what it may do: its own events, its own queue, its own live key
    assert evil.xadd(events_stream(ATTACKER), {"data": "{}"})
    assert evil.llen(agent_queue(ATTACKER)) == 0
    _held(rt_lab, sha, attempts)


def test_a_labctl_user_cannot_write_events_or_queues(rt_lab: LabHandle) -> None:
    sha, attempts = _sha(rt_lab.duts["dut0"].backing), _attempts(rt_lab)
    assert rt_lab.lab.labctl_url
    op = redis_client(rt_lab.lab.labctl_url)
    _refused(lambda: op.xadd(events_stream(VICTIM), {"data": "{}"}), "XADD to lab:events:testhost")
    _refused(lambda: op.xadd(events_stream(ATTACKER), {"data": "{}"}), "XADD to another events stream")
    _refused(lambda: op.lpush(agent_queue(VICTIM), _forged_start()), "LPUSH onto an agent queue")
    _refused(lambda: op.xadd(DEADLETTER_STREAM, {"data": "{}"}), "write lab:deadletter")
    _refused(lambda: op.xrange(COMMANDS_STREAM), "read other operators' commands")
    _refused(lambda: op.flushall(), "FLUSHALL")
    _held(rt_lab, sha, attempts)


def test_a_client_without_credentials_or_with_a_wrong_password_is_refused(rt_lab: LabHandle) -> None:
    port = redis_client(rt_lab.broker).connection_pool.connection_kwargs["port"]
    anon = redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_timeout=5)
    with pytest.raises(redis.exceptions.AuthenticationError, match=r"NOAUTH|[Aa]uthentication required"):
        anon.lpush(agent_queue(VICTIM), _forged_start())
    for user in ("default", "controller", f"agent-{VICTIM}", "admin"):
        wrong = redis.Redis(host="127.0.0.1", port=port, username=user, password="guess", socket_timeout=5)
        with pytest.raises(redis.exceptions.AuthenticationError):
            wrong.ping()
    rt_lab.check_alive()


def test_the_lab_still_runs_a_suite_through_the_acl(rt_lab: LabHandle) -> None:
    """The users are not merely locked down: the controller, the agent and labctl do their work, and
    Redis refuses none of their commands meanwhile (its ACL LOG stays empty)."""
    admin = redis_client(rt_lab.lab.admin_url or "")
    admin.execute_command("ACL", "LOG", "RESET")
    run_id = rt_lab.submit("suite: ok\nprofiles:\n  - {name: r, rw: randread, bs: 4k, iodepth: 2, runtime: 1s}\n")
    assert rt_lab.wait_run(run_id).run.state == "SUCCEEDED"
    res = rt_lab.labctl("run", "show", run_id)
    assert res.returncode == 0, res.stderr
    denied = [(e["username"], e["reason"], e["object"]) for e in admin.acl_log(count=1000)]
    assert denied == [], denied


def test_the_controllers_log_holds_no_password(tmp_path: Path) -> None:
    """The broker URL written with its password (the old way) is logged with ``***``; the password files'
    contents appear nowhere in the controller's log."""
    lab = Lab(tmp_path)
    try:
        lab.start_redis()
        assert lab.broker_url
        password = (tmp_path / "secrets" / "controller.pass").read_text().strip()
        inline = lab.broker_url.split("?")[0].replace("controller@", f"controller:{password}@")
        lab.broker_url = inline
        proc = lab.start_controller(f"sqlite:///{tmp_path / 'store.sqlite'}")
        wait_for(lambda: "controller up" in proc.log.read_text(errors="replace") or _died(proc), 60,
                 "the controller to start")
        text = proc.log.read_text(errors="replace")
        up = next(line for line in text.splitlines() if "controller up" in line)
        assert "broker redis://controller:***@127.0.0.1:" in up, up
        secrets = [p.read_text().strip() for p in (tmp_path / "secrets").glob("*.pass")]
        assert secrets and not any(s in text for s in secrets)
        assert proc.alive()
    finally:
        lab.stop()


def _died(proc: Any) -> bool:
    if not proc.alive():
        raise AssertionError(f"controller exited:\n{proc.tail(40)}")
    return False


def test_the_acl_file_labctl_generates_holds_on_a_plain_redis_server(tmp_path: Path) -> None:
    """``labctl broker acl`` (the deployment's path, not the embedded lab's): a redis-server started with
    its file; each user's password file works for that user only, and host h1's user cannot reach h2."""
    import shutil
    import stat
    import subprocess
    import sys

    from labcontract.brokerauth import with_credentials
    from orchestrator.labs.lab import Lab, free_port

    acl, secrets = tmp_path / "users.acl", tmp_path / "secrets"
    res = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "broker", "acl", "--hosts", "h1,h2",
                          "--out", str(acl), "--secrets-dir", str(secrets)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(acl.stat().st_mode) == 0o600
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in secrets.glob("*.pass"))
    assert not any(p.read_text().strip() in acl.read_text() for p in secrets.glob("*.pass"))
    port = free_port()
    lab = Lab(tmp_path / "lab")
    exe = shutil.which("redis-server")
    assert exe
    proc = lab._spawn("redis", [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--aclfile", str(acl)])
    try:
        base = f"redis://127.0.0.1:{port}/0"

        def url(user: str, file: str | None = None) -> str:
            return with_credentials(base, user=user, password_file=secrets / f"{file or user}.pass")

        wait_for(lambda: _pings(url("controller")) or _died(proc), 20, "redis-server with the generated ACL")
        h1 = redis_client(url("agent-h1"))
        assert h1.xadd(events_stream("h1"), {"data": "{}"})
        _refused(lambda: h1.xadd(events_stream("h2"), {"data": "{}"}), "h1 -> h2's events")
        _refused(lambda: h1.lpush(agent_queue("h2"), "x"), "h1 -> h2's queue")
        _refused(lambda: h1.xrange(COMMANDS_STREAM), "h1 reads commands")
        _refused(lambda: h1.xadd(DEADLETTER_STREAM, {"data": "{}"}), "h1 -> dead letters")
        _refused(lambda: redis_client(url("labctl")).xadd(events_stream("h1"), {"d": "1"}), "labctl -> events")
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis_client(url("agent-h2", "agent-h1")).ping()        # h1's password is not h2's
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=port, protocol=2).lpush(agent_queue("h1"), "x")
    finally:
        lab.stop()


def _pings(url: str) -> bool:
    try:
        return bool(redis_client(url, socket_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False
