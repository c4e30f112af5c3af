"""API tokens (orchestrator.tokens), the protocol-7 commands that carry them, and the broker user ``web`` that alone
may write the web service's stream (rules, and a real redis-server with the lab's ACL file)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from pydantic import ValidationError
from sqlalchemy.orm import Session

from labcontract.brokerauth import LABCTL, WEB, acl_args, acl_rules, lab_users
from labcontract.protocol import (
    COMMANDS_STREAM,
    EVENTS_GROUP,
    PROTOCOL_VERSION,
    WEB_COMMANDS_STREAM,
    Cancel,
    Rerun,
    Submit,
    TokenCreate,
    TokenRevoke,
    decode_command,
    events_stream,
)
from orchestrator.store.db import make_engine, migrate
from orchestrator.store.models import ApiToken
from orchestrator.tokens import ROLES, lookup, new_token, role_at_least, token_hash
from tests.unit.test_review_holes import _redis_with_acl


def test_the_web_commands_round_trip_with_an_actor() -> None:
    assert PROTOCOL_VERSION >= 7 and WEB_COMMANDS_STREAM == "lab:commands:web"      # since protocol 7
    for cmd in (Rerun(run_id="r1", actor="token:alice", reply_to="lab:reply:x"),
                TokenCreate(name="ci.bot-1", role="engineer", token_sha256="0" * 64, expires_at=5.0, reply_to="-"),
                TokenRevoke(name="ci", actor="labctl-admin", reply_to="-"),
                Cancel(run_id="r1", actor="token:a@b.c", reply_to="-")):
        assert decode_command(cmd.model_dump_json()) == cmd


@pytest.mark.parametrize("bad", [
    {"type": "token_create", "name": "ci", "role": "root", "token_sha256": "0" * 64},
    {"type": "token_create", "name": "ci", "role": "admin", "token_sha256": "0" * 63},
    {"type": "token_create", "name": "ci", "role": "admin", "token_sha256": "G" * 64},
    {"type": "token_create", "name": "../x", "role": "admin", "token_sha256": "0" * 64},
    {"type": "token_revoke", "name": "a" * 65},
    {"type": "rerun", "run_id": "r1", "actor": "token:alice bob"},
    {"type": "rerun", "run_id": "r1", "actor": "x" * 65},
    {"type": "cancel", "run_id": "r1", "actor": ":lead"},
])
def test_malformed_protocol_7_commands_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TokenCreate.model_validate(bad) if bad["type"] == "token_create" else \
            {"rerun": Rerun, "token_revoke": TokenRevoke, "cancel": Cancel}[bad["type"]].model_validate(
                {"reply_to": "-", **bad})


def test_submit_max_rounds_is_bounded() -> None:
    base = {"run_id": "r1", "suite_source": "s", "suite_text": "x", "host": "h", "devices": ["d"], "reply_to": "-"}
    assert Submit.model_validate({**base, "max_rounds": 100_000}).max_rounds == 100_000
    for bad in (0, -1, 100_001, 2.5, "many"):
        with pytest.raises(ValidationError):
            Submit.model_validate({**base, "max_rounds": bad})


def test_a_token_is_random_and_stored_only_as_its_hash(tmp_path: Any) -> None:
    a, b = new_token(), new_token()
    assert a != b and a.startswith("slab_") and len(a) >= 45
    assert token_hash(a) != token_hash(b) and len(token_hash(a)) == 64 and a not in token_hash(a)
    engine = make_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    migrate(engine)
    with Session(engine) as s:
        s.add_all([ApiToken(name="live", role="engineer", token_sha256=token_hash(a), created_at=1.0),
                   ApiToken(name="old", role="admin", token_sha256=token_hash(b), created_at=1.0, expires_at=100.0),
                   ApiToken(name="gone", role="admin", token_sha256=token_hash("slab_x"), created_at=1.0,
                            revoked_at=2.0)])
        s.commit()
        row = lookup(s, a, now=50.0)
        assert row is not None and row.name == "live"
        assert lookup(s, b, now=50.0) is not None and lookup(s, b, now=100.0) is None      # expired
        assert lookup(s, "slab_x") is None                                                  # revoked
        for bad in ("", a[:-1], a + "x", a.removeprefix("slab_"), "slab_" + "a" * 200):
            assert lookup(s, bad) is None


def test_roles_are_ordered() -> None:
    assert ROLES == ("viewer", "engineer", "admin")
    assert role_at_least("admin", "engineer") and role_at_least("engineer", "engineer")
    assert not role_at_least("viewer", "engineer") and not role_at_least("root", "viewer")
    assert not role_at_least("admin", "root")


def test_the_web_user_writes_its_stream_only() -> None:
    rules = acl_args(acl_rules(WEB))
    assert rules[-1] == "(%W~lab:commands:web +xadd)" and "-@all" in rules and "resetchannels" in rules
    assert not any(r.startswith("~lab:commands") or "+xadd" in r for r in rules[:-1])
    assert WEB in lab_users([]) and WEB not in lab_users([], web=False)
    assert "(%W~lab:commands +xadd)" in acl_rules(LABCTL)     # an exact key: not lab:commands:web


def test_on_a_real_broker_only_user_web_writes_the_web_stream(tmp_path: Any) -> None:
    proc, client = _redis_with_acl(tmp_path)
    try:
        ctl, web, labctl = client("controller"), client(WEB), client(LABCTL)
        for stream in (COMMANDS_STREAM, WEB_COMMANDS_STREAM):
            ctl.xgroup_create(stream, EVENTS_GROUP, id="0", mkstream=True)
        assert web.xadd(WEB_COMMANDS_STREAM, {"data": "{}"})
        for call in (lambda: web.xadd(COMMANDS_STREAM, {"data": "{}"}),
                     lambda: web.xadd(events_stream("h1"), {"data": "{}"}),
                     lambda: web.xrange(WEB_COMMANDS_STREAM),
                     lambda: web.delete(WEB_COMMANDS_STREAM),
                     lambda: web.pexpire(WEB_COMMANDS_STREAM, 1),
                     lambda: web.set("lab:live:h1", "x"),
                     lambda: labctl.xadd(WEB_COMMANDS_STREAM, {"data": "{}"}),
                     lambda: labctl.delete(WEB_COMMANDS_STREAM)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call()
        ctl.lpush("lab:reply:w", "r")
        ctl.set("lab:live:h1", "{}")
        assert web.blpop(["lab:reply:w"], timeout=1) == (b"lab:reply:w", b"r")
        assert web.get("lab:live:h1") == b"{}"
        assert ctl.xlen(WEB_COMMANDS_STREAM) == 1 and ctl.xlen(COMMANDS_STREAM) == 0
    finally:
        proc.kill()
        proc.wait()
