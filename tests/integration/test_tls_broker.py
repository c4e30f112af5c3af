"""The broker over TLS only (``rediss://``, ``--port 0``), on a real redis-server with certificates made by
openssl for this test: an agent and the controller run a suite through it as their own ACL users; a
plain-TCP client, a client trusting another CA and (mutual TLS) a client without a certificate are refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from labcontract.brokerauth import with_credentials
from labcontract.transport import redis_client
from orchestrator.labs.lab import Lab, TlsFiles
from tests.conftest import QUICK_SUITE, LabHandle, start_lab
from tests.tlscerts import Certs, make_certs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_lab(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[LabHandle]:
    handle = start_lab(tmp_path_factory.mktemp("tlslab"), tls=TlsFiles(certs.ca, certs.server_cert, certs.server_key))
    yield handle
    handle.lab.stop()


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port
    return port


def test_an_agent_and_the_controller_run_a_suite_over_tls(tls_lab: LabHandle) -> None:
    assert tls_lab.broker.startswith("rediss://controller@")
    agent_argv = " ".join(str(a) for a in tls_lab.agent.popen.args)   # type: ignore[union-attr]
    assert "rediss://agent-testhost@" in agent_argv and "ssl_ca_certs=" in agent_argv
    run_id = tls_lab.submit(QUICK_SUITE)
    detail = tls_lab.wait_run(run_id, timeout=120)
    assert detail.run.state == "SUCCEEDED", [(s.name, s.state, s.reason) for s in detail.steps]
    assert all(s.state == "SUCCEEDED" for s in detail.steps)
    res = tls_lab.labctl("run", "show", run_id)            # labctl, as ACL user labctl, over TLS
    assert res.returncode == 0, res.stderr


def test_a_plain_tcp_client_is_refused(tls_lab: LabHandle) -> None:
    plain = redis.Redis(host="127.0.0.1", port=_port(tls_lab.broker), socket_timeout=5, socket_connect_timeout=5)
    with pytest.raises(redis.ConnectionError):
        plain.ping()
    tls_lab.check_alive()


def test_a_client_trusting_another_ca_is_refused(tls_lab: LabHandle, certs: Certs) -> None:
    wrong = redis_client(with_credentials(tls_lab.broker, ca=certs.other_ca), socket_timeout=5)
    with pytest.raises(redis.ConnectionError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        wrong.ping()
    assert redis_client(tls_lab.broker).ping()        # the right CA (and the controller's user) still works


def test_mutual_tls_refuses_a_client_without_its_certificate(tmp_path: Path, certs: Certs) -> None:
    lab = Lab(tmp_path)
    try:
        url = lab.start_redis(tls=TlsFiles(certs.ca, certs.server_cert, certs.server_key,
                                           client_cert=certs.client_cert, client_key=certs.client_key))
        assert "ssl_certfile=" in url
        assert redis_client(url).ping()
        no_cert = redis_client(with_credentials(url.split("&ssl_certfile")[0].split("?")[0], user="controller",
                                                password_file=tmp_path / "secrets" / "controller.pass",
                                                ca=certs.ca), socket_timeout=5)
        with pytest.raises(redis.ConnectionError):
            no_cert.ping()
    finally:
        lab.stop()
