"""``labctl lab up``: the embedded lab and its web service come up, answer with the admin token it prints, and
every process of it is gone after one Ctrl-C (SIGINT)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from orchestrator.labs.lab import wait_for


def lab_up_argv(lab_dir: Path) -> list[str]:
    """``labctl lab up`` (its entry: orchestrator/cmd/labctl.py)."""
    return [sys.executable, "-m", "orchestrator.cmd.labctl", "lab", "up", "--lab-dir", str(lab_dir), "--duts", "1",
            "--size-mib", "64"]


def processes_of(lab_dir: Path) -> dict[int, str]:
    """Every process whose command line names the lab directory (redis-server, controller, agent, web)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(lab_dir) in cmdline:
            found[int(entry.name)] = cmdline[:200]
    return found


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (children in sessions of their own included), with its command line."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, pp in parent.items():
            if pp == p and child not in found:
                try:
                    found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Lines:
    """``proc``'s stdout line by line, read by a thread (a select on a buffered text pipe misses lines)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def until(self, patterns: dict[str, str], timeout: float) -> dict[str, str]:
        """Lines until each pattern matched once; the output so far on a timeout or an exit."""
        got: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(patterns):
            try:
                line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("lab up printed no URL and token in time:\n" + "".join(self.seen)) from None
            assert line is not None, "lab up exited before printing its URL and token:\n" + "".join(self.seen)
            self.seen.append(line)
            for key, pattern in patterns.items():
                m = re.search(pattern, line)
                if m:
                    got[key] = m.group(1)
        return got

    def rest(self, timeout: float) -> str:
        """What it printed until it exited."""
        deadline = time.monotonic() + timeout
        while (line := self.queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.seen.append(line)
        return "".join(self.seen)


def get(url: str, token: str) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
        return json.loads(r.read())


def test_lab_up_serves_until_ctrl_c(tmp_path: Path) -> None:
    lab_dir = (tmp_path / "lab").resolve()
    proc = subprocess.Popen(lab_up_argv(lab_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        lines = Lines(proc)
        got = lines.until({"url": r"^web service: (http://127\.0\.0\.1:\d+)\s*$",
                                "token": r"^admin token: (slab_\S+)\s*$", "file": r"^token file: (\S+)",
                                "use": r"^labctl with this lab: LAB_DIR=(\S+) labctl runs"}, 150)
        url, token = got["url"], got["token"]
        assert get(f"{url}/api/whoami", token)["role"] == "admin"
        hosts = get(f"{url}/api/hosts", token)
        assert [h["name"] for h in hosts] == ["lab-local"]
        assert [d["name"] for d in hosts[0]["devices"]] == ["dut0"]
        # labctl finds the lab by its lab file (LAB_DIR, as lab up says): the store, and the broker with a controller
        assert Path(got["use"]) == lab_dir and (lab_dir / "lab.toml").is_file()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAB_")} | {"LAB_DIR": str(lab_dir)}
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "hosts"], capture_output=True,
                               text=True, timeout=120, cwd=tmp_path, env=env)
        assert shown.returncode == 0 and "lab-local" in shown.stdout, shown.stdout + shown.stderr
        token_file = Path(got["file"])
        assert token_file.read_text().strip() == token
        assert token_file.stat().st_mode & 0o077 == 0
        children = descendants(proc.pid)
        names = " ".join(children.values())
        for part in ("redis-server", " controller", " agent", "orchestrator.cmd.web"):
            assert part in names, names
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        wait_for(lambda: not any(alive(p) for p in children) and not processes_of(lab_dir), 10,
                 "every process of the lab to end")
        assert "lab stopped" in lines.rest(10)
    finally:
        if proc.poll() is None:           # stopped in order if it can be (its loop devices detached) ...
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in processes_of(lab_dir):        # a failed test leaves none of its lab behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_lab_up_again_on_its_lab_directory_keeps_its_admin_token(tmp_path: Path) -> None:
    """A lab directory started again keeps the admin token its token file holds while the store has it live
    (issue 27: every lab up made a new admin token)."""
    lab_dir = (tmp_path / "lab").resolve()
    tokens = []
    for _ in range(2):
        proc = subprocess.Popen(lab_up_argv(lab_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
        try:
            got = Lines(proc).until({"url": r"^web service: (http://127\.0\.0\.1:\d+)\s*$",
                                     "token": r"^admin token: (slab_\S+)\s*$"}, 150)
            assert get(f"{got['url']}/api/whoami", got["token"])["role"] == "admin"
            tokens.append(got["token"])
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    assert tokens[0] == tokens[1]


def test_lab_up_delivers_to_the_sinks_it_is_given_and_keeps_them_in_its_lab_file(tmp_path: Path) -> None:
    """``lab up --notify-file F --notify-webhook URL`` (issue 27, item 4): written into the lab file's [notify] before
    its controller starts, which delivers a run's end to both; the web service lists them, and no output names the
    webhook's URL (its path is its token)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from orchestrator import labfile
    from orchestrator.labctl.api import ApiClient

    got: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secret = "T0-B0-s3cret"
    hook, sink = f"http://127.0.0.1:{server.server_address[1]}/hooks/{secret}", tmp_path / "runs.jsonl"
    lab_dir = (tmp_path / "lab").resolve()
    proc = subprocess.Popen([*lab_up_argv(lab_dir), "--notify-file", str(sink), "--notify-webhook", hook],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        lines = Lines(proc)
        got_ = lines.until({"url": r"^web service: (http://127\.0\.0\.1:\d+)\s*$", "token": r"^admin token: (slab_\S+)",
                            "notify": r"^notifications: (.+)$"}, 150)
        assert f"file:{sink}" in got_["notify"] and "webhook http://127.0.0.1/… (webhook:" in got_["notify"]
        assert labfile.read(lab_dir / "lab.toml").notify == labfile.Notify((hook,), (sink,))
        api = ApiClient(got_["url"], got_["token"], timeout_s=30)
        run_id = api.submit("lab-local", ["dut0"], suite_yaml="suite: one\nprofiles:\n  - {name: a, rw: randread, "
                                                              "bs: 4k, iodepth: 4, runtime: 1s}\n", source="one.yaml")

        def delivered() -> bool:
            assert proc.poll() is None, "".join(lines.seen)
            return sink.is_file() and run_id in sink.read_text() and any(b["run"] == run_id for b in got)
        wait_for(delivered, 120, f"the end of run {run_id} at the file and the webhook", interval=0.3)
        want = [("file", "lab file", "ok", 1), ("webhook", "lab file", "ok", 1)]

        def listed() -> list[dict[str, Any]] | None:       # written down by the controller's next pass
            rows = api.notifications()
            return rows if sorted((r["kind"], r["origin"], r["state"], r["delivered"]) for r in rows) == want else None
        rows = wait_for(listed, 30, "both sinks listed as delivered", interval=0.2)
        assert secret not in json.dumps(rows)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        out = lines.rest(10)
        assert secret not in out and secret not in (lab_dir / "logs" / "controller.log").read_text()
    finally:
        server.shutdown()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in processes_of(lab_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
