"""Test certificates made with ``openssl``: a CA, a redis-server certificate for 127.0.0.1/localhost
signed by it, a client certificate, and a second CA nobody's certificate is signed by."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _run(*argv: str, cwd: Path) -> None:
    subprocess.run(["openssl", *argv], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
         "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def _signed(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext)
    _run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
         "-out", f"{name}.csr", cwd=d)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
         "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


def make_certs(d: Path, server_ips: Sequence[str] = ()) -> Certs:
    """``server_ips``: more addresses the server certificate names (besides 127.0.0.1 and localhost)."""
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    san = ",".join(["IP:127.0.0.1", "DNS:localhost", *(f"IP:{ip}" for ip in server_ips)])
    _signed(d, "server", "ca", f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    _signed(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    for key in d.glob("*.key"):
        key.chmod(0o600)
    return Certs(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key",
                 d / "other-ca.pem")
