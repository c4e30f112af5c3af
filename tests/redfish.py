"""A real Redfish service for the tests of host power: sushy-tools' ``sushy-static`` serving DMTF's public mockup
of a 1U rack-mount server (tests/fixtures/redfish), on a free port, over http or https; and a "BMC" that accepts
connections and never answers."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.labs.lab import free_port, wait_for
from tests.tlscerts import Certs

MOCKUP = Path(__file__).parent / "fixtures" / "redfish" / "public-rackmount1"
WATTS = 344.0        # the mockup's Chassis/1U/Power PowerControl[0].PowerConsumedWatts


def sushy_static() -> str:
    exe = Path(sys.executable).parent / "sushy-static"
    found = str(exe) if exe.exists() else shutil.which("sushy-static")
    if found is None:
        raise RuntimeError("sushy-static not installed (the dev extra installs sushy-tools: make test-deps)")
    return found


@dataclass(frozen=True)
class Bmc:
    url: str
    proc: subprocess.Popen[bytes]


@contextmanager
def redfish_mockup(log: Path, certs: Certs | None = None, mockup: Path = MOCKUP) -> Iterator[Bmc]:
    """sushy-static on a free port (another is tried when the port was taken meanwhile), stopped at the end."""
    for _ in range(5):
        port = free_port()
        argv = [sushy_static(), "-i", "127.0.0.1", "-p", str(port), "-m", str(mockup)]
        scheme = "http"
        if certs is not None:
            argv += ["-c", str(certs.server_cert), "-k", str(certs.server_key)]
            scheme = "https"
        fh = log.open("ab")
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        fh.close()

        def up(port: int = port, proc: subprocess.Popen[bytes] = proc) -> bool:
            if proc.poll() is not None:
                return True
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0
        wait_for(up, 30, "sushy-static to listen")
        if proc.poll() is None:
            break
    else:
        raise RuntimeError(f"sushy-static did not start: {log.read_text()[-2000:]}")
    try:
        url = f"{scheme}://{'localhost' if certs else '127.0.0.1'}:{port}"
        if certs is None:
            with urllib.request.urlopen(url + "/redfish/v1/Chassis", timeout=10) as r:
                assert r.status == 200
        yield Bmc(url, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def silent_bmc() -> Iterator[str]:
    """A socket that accepts connections and never answers (a hung BMC): its http URL."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        srv.close()
