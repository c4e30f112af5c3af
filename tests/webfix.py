"""The web service over a real lab (redis, controller, agent, loop DUTs): a process of its own on a free
port, with one token per role. Tests import the fixtures from here (``from tests.webfix import web``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.labs.lab import Proc, free_port, wait_for
from tests.conftest import LabHandle, start_lab

ROLES = ("viewer", "engineer", "admin")


@dataclass
class WebHandle:
    lab: LabHandle
    url: str
    proc: Proc
    tokens: dict[str, str] = field(default_factory=dict)      # role -> token

    def client(self, role: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kw.pop("timeout", 30), **kw)

    def check_alive(self) -> None:
        if not self.proc.alive():
            raise AssertionError(f"the web service died:\n{self.proc.tail(60)}")
        self.lab.check_alive()


def add_token(lab: LabHandle, name: str, role: str) -> str:
    """A token made as ``labctl token create`` makes it: through the controller, on the web stream."""
    from labcontract.protocol import WEB_COMMANDS_STREAM
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient
    from orchestrator.tokens import new_token, token_hash

    token = new_token()
    assert lab.lab.web_url
    client = ControllerClient(redis_client(lab.lab.web_url), stream=WEB_COMMANDS_STREAM, actor="test")
    reply = client.token_create(name, role, token_hash(token), None)
    assert reply is not None and reply.ok, reply
    return token


def start_web(lab: LabHandle, *, extra: tuple[str, ...] = ()) -> WebHandle:
    port = free_port()
    proc = lab.lab.start_web(lab.store_url, port, extra=extra)
    handle = WebHandle(lab, f"http://127.0.0.1:{port}", proc)
    for role in ROLES:
        handle.tokens[role] = add_token(lab, f"{role}-{port}", role)

    def up() -> bool:
        handle.check_alive()
        try:
            return httpx.get(handle.url + "/api/whoami", timeout=2,
                             headers={"Authorization": f"Bearer {handle.tokens['viewer']}"}).status_code == 200
        except httpx.HTTPError:
            return False
    wait_for(up, 60, "the web service to answer")
    return handle


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebHandle]:
    """A lab (two loop DUTs) with its web service, shared by a test module."""
    lab = start_lab(tmp_path_factory.mktemp("weblab"), n_duts=2)
    try:
        handle = start_web(lab)
    except BaseException:
        lab.lab.stop()
        raise
    yield handle
    lab.lab.stop()


def api_labctl(web: WebHandle, tmp_path: Path,
               role: str = "viewer") -> Callable[..., subprocess.CompletedProcess[str]]:
    """labctl through ``--api`` with a token of ``role`` (a viewer's unless told) and nowhere to read a store
    from: only the API can answer."""
    token_file = tmp_path / f"{role}.token"
    token_file.write_text(web.tokens[role] + "\n")
    os.chmod(token_file, 0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")}

    def through_api(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(tmp_path / "none"),
                               "--store", f"sqlite:///{tmp_path / 'absent.sqlite'}", "--api", web.url,
                               "--token-file", str(token_file), *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env=env)
    return through_api
