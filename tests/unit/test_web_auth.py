"""The web service's session cookies, its secret file and the request-size guard, without a server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from labcontract.errors import ConfigError
from orchestrator.web.app import BodyLimit
from orchestrator.web.auth import Sessions, load_secret
from tests import aio


def test_secret_is_made_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "web" / "session.key"
    key = load_secret(path)
    assert len(key) == 32 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert load_secret(path) == key          # a restart keeps every session valid


def test_secret_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "session.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_secret(path)


def test_cookie_round_trip_and_expiry() -> None:
    s = Sessions(b"k" * 32, ttl_s=60)
    cookie, csrf = s.issue("alice", "ab" * 32, now=1000.0)
    assert s.read(cookie, now=1010.0) == ("alice", ("ab" * 32)[:16], csrf)
    assert s.read(cookie, now=1061.0) is None                 # expired


@pytest.mark.parametrize("mangle", [
    lambda c: c[:-1] + ("A" if c[-1] != "A" else "B"),           # signature changed
    lambda c: "e30" + c[c.index("."):],                          # payload replaced ({}), old signature
    lambda c: c.replace(".", ""),                                # no separator
    lambda c: c + "." + c,                                       # two separators
    lambda c: "x" * 2000,                                        # oversized
])
def test_forged_cookies_are_refused(mangle: Any) -> None:
    s = Sessions(b"k" * 32, ttl_s=60)
    cookie, _ = s.issue("alice", "ab" * 32)
    assert s.read(mangle(cookie)) is None


def test_cookie_of_another_key_is_refused() -> None:
    cookie, _ = Sessions(b"a" * 32, ttl_s=60).issue("alice", "ab" * 32)
    assert Sessions(b"b" * 32, ttl_s=60).read(cookie) is None


class _Sink:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)


def _run(limit: int, chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> tuple[int, int]:
    """(status sent, bytes the app read) for a body sent in ``chunks``."""
    read = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal read
        more = True
        while more:
            msg = await receive()
            read += len(msg.get("body", b""))
            more = msg.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    msgs = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive() -> dict[str, Any]:
        return msgs.pop(0)

    sink = _Sink()
    aio.run(BodyLimit(app, limit)({"type": "http", "headers": headers}, receive, sink))  # type: ignore[arg-type]
    return sink.sent[0]["status"], read


def test_declared_oversized_body_is_refused_unread() -> None:
    assert _run(100, [b"x" * 10], [(b"content-length", b"101")]) == (413, 0)


def test_chunked_oversized_body_is_refused_while_streaming() -> None:
    status, read = _run(100, [b"x" * 60, b"x" * 60, b"x" * 60], [])
    assert status == 413 and read <= 120


def test_body_within_the_limit_passes() -> None:
    assert _run(100, [b"x" * 50, b"x" * 50], [(b"content-length", b"100")]) == (200, 100)
