"""labctl's REST client (orchestrator/labctl/api.py) against the real web service over a real lab: the
overnight workflow with a token only, and each refusal as the project's error with the service's reason."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labcontract.errors import AccessError, CommandRefused, Forbidden, NotFound, SubmissionError
from orchestrator.labctl.api import ApiClient
from orchestrator.labs.lab import wait_for
from tests.webfix import WebHandle, api_labctl, web  # noqa: F401

BAD_SUITE = """\
suite: bad
profiles:
  - {name: a, rw: sideways, bs: 3k, iodepth: 4, runtime: 1s}
  - {name: b, rw: randread, bs: 4k, iodepth: -1, runtime: 1s}
"""
ONE_STEP = "suite: one\nprofiles:\n  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1s}\n"


def api(w: WebHandle, role: str) -> ApiClient:
    return ApiClient(w.url, w.tokens[role], timeout_s=30)


def test_roles_and_refusals(web: WebHandle) -> None:  # noqa: F811
    assert api(web, "viewer").whoami()["role"] == "viewer"
    with pytest.raises(AccessError, match="refused the token"):
        ApiClient(web.url, "slab_" + "A" * 43).whoami()
    with pytest.raises(Forbidden):
        api(web, "viewer").cancel("r20260101-abcdef", "no")
    with pytest.raises(NotFound):
        api(web, "viewer").run("r20260101-abcdef")
    with pytest.raises(SubmissionError) as e:
        api(web, "engineer").submit(web.lab.host, ["dut0"], suite_yaml=BAD_SUITE, source="bad.yaml")
    assert len(e.value.problems) >= 2, e.value.problems
    hosts = api(web, "viewer").hosts()
    assert [h["name"] for h in hosts] == [web.lab.host]


def test_submit_watch_report_export_download(web: WebHandle, tmp_path: Path) -> None:  # noqa: F811
    eng = api(web, "engineer")
    run_id = eng.submit(web.lab.host, ["dut0"], suite_yaml=ONE_STEP, source="one.yaml")
    assert eng.resolve("last") == run_id

    def ended() -> bool:
        web.check_alive()
        return eng.run(run_id)["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
    wait_for(ended, 90, f"run {run_id} to end", interval=0.2)
    run = eng.run(run_id)
    assert run["state"] == "SUCCEEDED", run
    assert run["submitted_by"].startswith("token:engineer")
    page = eng.runs(limit=5)
    assert page["runs"][0]["id"] == run_id
    assert "<html" in eng.report(run_id).lower()
    csv = eng.export(run_id, "csv", "results")
    assert csv.splitlines()[0].startswith(("run", "run_id")) and len(csv.splitlines()) == 2
    arts = eng.artifacts(run_id)
    assert arts, "a fio step leaves artifacts"
    got = eng.download(arts[0]["id"], tmp_path)
    assert hashlib.sha256(got.read_bytes()).hexdigest() == arts[0]["sha256"]
    with pytest.raises(CommandRefused):
        eng.rerun(run_id)               # nothing failed or was cancelled: nothing to run again


def test_admin_tokens_through_the_api(web: WebHandle) -> None:  # noqa: F811
    admin = api(web, "admin")
    name = f"api-{int(time.time() * 1000) % 10**9}"
    made = admin.token_create(name, "viewer", 3600)
    assert made["role"] == "viewer"
    fresh = ApiClient(web.url, made["token"])
    assert fresh.whoami()["name"] == name
    assert name in [t["name"] for t in admin.tokens()]
    admin.token_revoke(name)
    with pytest.raises(AccessError):
        fresh.whoami()
    with pytest.raises(Forbidden):
        api(web, "engineer").tokens()


def test_regressions_and_ack_are_the_same_with_and_without_api(web: WebHandle, tmp_path: Path) -> None:  # noqa: F811
    """``labctl regressions`` (table and --json) and ``regressions ack`` through ``--api`` print what they print
    against the store (issue 27: with --api they silently read the local store)."""
    through_api = api_labctl(web, tmp_path)

    for args in (("regressions",), ("regressions", "--json"), ("regressions", "--all", "--since", "30d")):
        local, remote = web.lab.labctl(*args), through_api(*args)
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        assert remote.stdout == local.stdout, (args, local.stdout, remote.stdout)
    local, remote = web.lab.labctl("regressions", "ack", "0123456789ab"), through_api("regressions", "ack",
                                                                                        "0123456789ab")
    assert local.returncode == remote.returncode != 0
    assert "no regression '0123456789ab'" in local.stderr and remote.stderr == local.stderr


@pytest.mark.timeout(600)           # a dozen labctl processes and three runs: minutes on a loaded machine
def test_compare_and_export_of_n_runs_are_the_same_with_and_without_api(web: WebHandle,  # noqa: F811
                                                                         tmp_path: Path) -> None:
    """``labctl compare`` of three runs (``last`` and ids) as a table, JSON and CSV, in MB/s and MiB/s, and ``labctl
    export`` of them (every table, CSV into a directory, JSON), through ``--api`` print and write what they do
    against the store (issue 27: --api compare read the local store, --api export took one run and refused
    --table all --output DIR)."""
    eng = api(web, "engineer")
    ids = [eng.submit(web.lab.host, ["dut0"], suite_yaml=ONE_STEP, source="one.yaml") for _ in range(3)]
    wait_for(lambda: all(eng.run(r)["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for r in ids), 180,
             "three runs to end", interval=0.2)
    through_api = api_labctl(web, tmp_path)
    for args in (("compare", ids[0], ids[1], "last"), ("compare", *ids, "--format", "json"),
                 ("compare", *ids, "--format", "csv", "--units", "binary"),
                 ("compare", *ids, "--baseline", "last"), ("compare", *ids, "--baseline", ids[1], "--format", "json"),
                 ("compare", *ids, "--units", "binary")):
        local, remote = web.lab.labctl(*args), through_api(*args)
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        assert remote.stdout == local.stdout, (args, local.stdout, remote.stdout)
        assert remote.stderr == local.stderr
    assert "MiB/s" in remote.stdout
    local, remote = web.lab.labctl("compare", ids[0]), through_api("compare", ids[0])
    assert local.returncode == remote.returncode == 2 and remote.stderr == local.stderr
    assert "compare needs at least 2 runs, got 1" in remote.stderr
    # a baseline that is not one of the compared runs: refused the same way, with the reason
    local, remote = (f("compare", ids[0], ids[1], "--baseline", ids[2]) for f in (web.lab.labctl, through_api))
    assert local.returncode == remote.returncode == 2 and remote.stderr == local.stderr
    assert f"baseline {ids[2]!r} is not one of the compared runs ({ids[0]}, {ids[1]})" in remote.stderr
    for fmt in ("csv", "json"):
        mine, theirs = tmp_path / f"local-{fmt}", tmp_path / f"api-{fmt}"
        local = web.lab.labctl("export", *ids, "--format", fmt, "--table", "all", "--output", str(mine))
        remote = through_api("export", *ids, "--format", fmt, "--table", "all", "--output", str(theirs))
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        written = sorted(p.name for p in mine.iterdir())
        assert written == sorted(p.name for p in theirs.iterdir()) and written
        for name in written:
            assert (theirs / name).read_bytes() == (mine / name).read_bytes(), name
    # one HTML report of N runs, overlaid (issue 27: --api report took one run): the same page both ways
    local = web.lab.labctl("report", *ids, "--html", str(tmp_path / "local.html"))
    remote = through_api("report", *ids, "--html", str(tmp_path / "api.html"))
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)

    def page(name: str) -> str:          # (the page says when it was built, to the second)
        import re
        return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+", "-", (tmp_path / name).read_text())
    assert page("api.html") == page("local.html") and all(r in page("api.html") for r in ids)
    args = ("export", *ids, "--format", "csv", "--units", "binary")
    local, remote = web.lab.labctl(*args), through_api(*args)
    assert remote.stdout == local.stdout and "mib_s" in remote.stdout and remote.stdout.count("\n") == 4
    args = ("export", *ids, "--format", "csv", "--table", "all")
    local, remote = web.lab.labctl(*args), through_api(*args)
    assert local.returncode == remote.returncode == 2 and remote.stderr == local.stderr
    # the raw artifacts, listed and fetched, the same both ways (issue 27: no labctl command fetched them)
    local, remote = web.lab.labctl("artifacts", ids[0]), through_api("artifacts", ids[0])
    assert local.returncode == remote.returncode == 0 and remote.stdout == local.stdout
    assert "fio.json" in local.stdout and "job.fio" in local.stdout
    mine, theirs = tmp_path / "arts-local", tmp_path / "arts-api"
    local = web.lab.labctl("artifacts", ids[0], "--output", str(mine))
    remote = through_api("artifacts", ids[0], "--output", str(theirs))
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    files = sorted(p.relative_to(mine) for p in mine.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(theirs) for p in theirs.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"fio.json", "job.fio", "host-cpu.start", "host-cpu.end"}
    assert all((mine / p).read_bytes() == (theirs / p).read_bytes() for p in files)
    step_only = through_api("artifacts", ids[0], "--step", "no-such-step")
    assert step_only.returncode != 0 and "has no artifact of a step 'no-such-step'" in step_only.stderr
    # run show: the figures, verdicts, platform and drive health too (issue 27: --api run show printed steps only)
    for args in (("run", "show", ids[0]), ("run", "show", "last", "--rounds")):
        local, remote = web.lab.labctl(*args), through_api(*args)
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        assert remote.stdout == local.stdout, (args, local.stdout, remote.stdout)
    assert "IOPS" in remote.stdout and "p99 clat us" in remote.stdout
    # hosts with their facts (issue 27: --api hosts printed no facts); the heartbeat's age is read at each call
    local, remote = web.lab.labctl("hosts"), through_api("hosts")
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    import re

    def words(text: str) -> list[str]:          # (an age of 9 s or 10 s may widen its column: words, not bytes)
        return re.findall(r"[^\s─━═┃│┏┓┗┛┡┩└┘├┤┬┴┼╇╈╋]+", re.sub(r"\d+s ago", "-s ago", text))
    assert words(remote.stdout) == words(local.stdout), (local.stdout, remote.stdout)
    assert web.lab.host in remote.stdout and "fio-3" in remote.stdout
    # on a terminal (a pseudo-terminal 120 columns wide, 256 colours) too: the service draws for the client's
    # terminal, so the bytes, escape sequences included, are the ones labctl draws itself
    tty_env = env_without_lab() | {"TERM": "xterm-256color", "COLUMNS": "120"}
    for args in (("run", "show", ids[0]), ("compare", *ids)):
        here = on_a_tty([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(web.lab.lab.root),
                         "--broker", web.lab.lab.labctl_url or "", "--store", web.lab.store_url, *args], tty_env)
        there = on_a_tty([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(tmp_path / "none"),
                          "--store", f"sqlite:///{tmp_path / 'absent.sqlite'}", "--api", web.url, "--token-file",
                          str(tmp_path / "viewer.token"), *args], tty_env)
        assert there == here, args
        assert b"\x1b[" in here or args[0] == "compare"       # (compare's table is drawn without colour)


def env_without_lab() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAB_") and k not in ("COLORTERM", "NO_COLOR")}


def on_a_tty(argv: list[str], env: dict[str, str], cols: int = 120) -> bytes:
    """What ``argv`` writes to a pseudo-terminal ``cols`` columns wide (its standard error apart)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:          # EIO: the process closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(120)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else b""
        return b"".join(chunks)
    finally:
        os.close(master)


def test_watch_is_the_same_with_and_without_api(web: WebHandle, tmp_path: Path) -> None:  # noqa: F811
    """``labctl --api watch`` follows a run through the service (each frame drawn by it, GET /api/runs/{id}/watch)
    and ends with what ``run show`` prints, as labctl watch does against the store (issue 27: --api watch read the
    local store)."""
    import re

    through_api = api_labctl(web, tmp_path)
    rid = api(web, "engineer").submit(web.lab.host, ["dut0"], suite_yaml=ONE_STEP, source="one.yaml")
    following = subprocess.Popen([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir",
                                  str(tmp_path / "none"), "--store", f"sqlite:///{tmp_path / 'absent.sqlite'}",
                                  "--api", web.url, "--token-file", str(tmp_path / "viewer.token"), "watch", rid,
                                  "--timeout", "170"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env_without_lab())
    live_out, live_err = following.communicate(timeout=200)
    assert following.returncode == 0, live_err
    lines = live_out.splitlines()
    assert lines[0].startswith(f"run {rid}: ") and f"run {rid}: SUCCEEDED 1/1 steps" in [x.strip() for x in lines]
    local, remote = web.lab.labctl("watch", rid), through_api("watch", rid)       # an ended run: its end and results
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert remote.stdout == local.stdout and "IOPS" in local.stdout
    assert live_out.endswith(local.stdout.split("\n", 1)[1])                    # the same results after the frames
    missing = through_api("watch", "r20260101-abcdef")
    assert missing.returncode != 0 and "r20260101-abcdef" in missing.stderr
    # on a terminal: the table of every step, drawn by the service at this terminal's width
    tty_env = env_without_lab() | {"TERM": "xterm-256color", "COLUMNS": "120"}
    here = on_a_tty([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(web.lab.lab.root), "--broker",
                     web.lab.lab.labctl_url or "", "--store", web.lab.store_url, "watch", rid], tty_env)
    there = on_a_tty([sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(tmp_path / "none"),
                      "--store", f"sqlite:///{tmp_path / 'absent.sqlite'}", "--api", web.url, "--token-file",
                      str(tmp_path / "viewer.token"), "watch", rid], tty_env)

    def words(raw: bytes) -> list[str]:
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode())
        return re.findall(r"[^\s─━═┃│┏┓┗┛┡┩└┘├┤┬┴┼╇╈╋]+", text)
    assert words(there) == words(here) and "100%" in words(here)


def test_canary_is_the_same_with_and_without_api(web: WebHandle, tmp_path: Path) -> None:  # noqa: F811
    """``labctl canary add / list / remove`` through ``--api`` (an admin's token: a canary is a schedule) print what
    they print against the store and the broker, refusals included: an unknown DUT, a bad cron, a canary added
    twice, one removed twice; a viewer's token may list canaries but not add or remove one (issue 27: labctl canary
    worked against the local store and broker only)."""
    host = web.lab.host
    as_admin, as_viewer = api_labctl(web, tmp_path, "admin"), api_labctl(web, tmp_path)

    def same(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        local, remote = web.lab.labctl(*args), as_admin(*args)
        assert (local.returncode == 0) is ok and remote.returncode == local.returncode, (args, local, remote)
        assert remote.stdout == local.stdout, (args, local.stdout, remote.stdout)
        assert remote.stderr == local.stderr, (args, local.stderr, remote.stderr)
        return local

    empty = same("canary", "list")
    assert "canary" in empty.stdout and f"canary.{host}." not in empty.stdout
    unknown = same("canary", "add", host, "dut7", ok=False)
    assert "'dut7' is not a declared DUT of host" in unknown.stderr and "labctl canary" in unknown.stderr
    assert "unknown host 'nohost'" in same("canary", "add", "nohost", "dut0", ok=False).stderr
    assert "--cron" in same("canary", "add", host, "dut0", "--cron", "61 * * * *", ok=False).stderr
    refused = as_viewer("canary", "add", host, "dut0")
    assert refused.returncode == 1 and "not allowed" in refused.stderr and "admin" in refused.stderr, refused
    assert as_admin("canary", "list").stdout == empty.stdout          # nothing added by the refusals

    # one canary added each way (dut1 by its path, as a user may name it), each printed the same way
    path1 = next(d["path"] for h in api(web, "viewer").hosts() for d in h["devices"] if d["name"] == "dut1")
    local = web.lab.labctl("canary", "add", host, "dut0")
    remote = as_admin("canary", "add", host, path1, "--quarantine", "--priority", "5", "--cron", "30 2 * * *")
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert local.stdout == f"canary canary.{host}.dut0 added (0 3 * * *)\n"
    assert remote.stdout == f"canary canary.{host}.dut1 added (30 2 * * *, quarantines on drift)\n"
    twice = same("canary", "add", host, "dut1", ok=False)              # the controller's refusal, both ways
    assert f"schedule 'canary.{host}.dut1' exists" in twice.stderr
    schedules = {s["name"]: s for s in api(web, "viewer").schedules()}
    assert schedules[f"canary.{host}.dut1"]["priority"] == 5 and schedules[f"canary.{host}.dut1"]["suite"]

    # a canary run (its history too short to judge) gives dut0 a verdict: listed the same way, to a viewer too
    rid = api(web, "engineer").submit(host, ["dut0"], suite="canary", scale=0.05, source="canary")
    wait_for(lambda: "history too short" in web.lab.labctl("canary", "list").stdout, 120,
             f"canary run {rid} to be judged", interval=0.3)
    listed = same("canary", "list")
    assert as_viewer("canary", "list").stdout == listed.stdout
    rows = {line.split()[1]: line for line in listed.stdout.splitlines() if f"canary.{host}." in line}
    assert set(rows) == {f"canary.{host}.dut0", f"canary.{host}.dut1"}, listed.stdout
    assert "ok: history too short (0 of 8)" in rows[f"canary.{host}.dut0"]
    assert " yes " in rows[f"canary.{host}.dut1"] and " no " in rows[f"canary.{host}.dut0"]

    # removed each way (the one added here through the API, the other's by its path), then refused both ways
    refused = as_viewer("canary", "remove", host, "dut0")
    assert refused.returncode == 1 and "not allowed" in refused.stderr, refused
    local, remote = web.lab.labctl("canary", "remove", host, path1), as_admin("canary", "remove", host, "dut0")
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert (local.stdout, remote.stdout) == (f"canary canary.{host}.dut1 removed\n",
                                             f"canary canary.{host}.dut0 removed\n")
    gone = same("canary", "remove", host, "dut0", ok=False)
    assert f"no schedule 'canary.{host}.dut0'" in gone.stderr
    assert f"no schedule 'canary.{host}.dut7'" in same("canary", "remove", host, "dut7", ok=False).stderr
    assert same("canary", "list").stdout == empty.stdout


def test_schedules_tokens_and_release_are_the_same_with_and_without_api(web: WebHandle,  # noqa: F811
                                                                        tmp_path: Path) -> None:
    """``schedule add / list / rm``, ``token create / revoke`` and ``hosts release`` through ``--api`` (an admin's
    token) print what they print against the store and the broker, refusals included (issue 27: they went to the
    local broker and store whatever ``--api`` said)."""
    through_api = api_labctl(web, tmp_path, "admin")
    lab, host = web.lab, web.lab.host
    suite = tmp_path / "one.yaml"
    suite.write_text(ONE_STEP)
    common = (str(suite), "--cron", "0 3 * * *", "--host", host, "--device", "dut0")
    direct = lab.labctl("schedule", "add", "nightly-direct", *common)
    remote = through_api("schedule", "add", "nightly-api", *common)
    assert (direct.returncode, remote.returncode) == (0, 0), (direct.stderr, remote.stderr)
    assert (direct.stdout, remote.stdout) == ("schedule nightly-direct added\n", "schedule nightly-api added\n")
    bad = [run("schedule", "add", "bad", *common[:2], "0 3 * *", *common[3:]) for run in (lab.labctl, through_api)]
    assert bad[0].returncode == bad[1].returncode != 0 and bad[0].stderr == bad[1].stderr, bad

    def listed() -> str | None:
        out = lab.labctl("schedule", "list").stdout
        return out if "nightly-direct" in out and "nightly-api" in out else None
    local = wait_for(listed, 60, "both schedules to be stored", interval=0.2)
    assert through_api("schedule", "list").stdout == local
    assert through_api("schedule", "rm", "nightly-direct").stdout == "schedule nightly-direct removed\n"
    assert lab.labctl("schedule", "rm", "nightly-api").stdout == "schedule nightly-api removed\n"
    wait_for(lambda: "nightly" not in through_api("schedule", "list").stdout, 60, "both schedules gone",
             interval=0.2)

    made = through_api("token", "create", "--name", "from-api", "--role", "viewer", "--expires-in", "1d")
    assert made.returncode == 0 and made.stdout.startswith("slab_") and "shown only now" in made.stderr, made.stderr
    assert ApiClient(web.url, made.stdout.strip()).whoami()["name"] == "from-api"
    assert through_api("token", "list").stdout == lab.labctl("token", "list").stdout
    short = [run("token", "create", "--name", "x", "--role", "viewer", "--expires-in", "10s")
             for run in (lambda *a: lab.labctl(*a, broker=lab.lab.web_url), through_api)]
    assert short[0].stderr == short[1].stderr == "error: --expires-in: at least 60s\n", short
    assert through_api("token", "revoke", "from-api").stdout == "token from-api revoked\n"

    def refused() -> bool:
        try:
            ApiClient(web.url, made.stdout.strip()).whoami()
        except AccessError:
            return True
        return False
    wait_for(refused, 30, "the revoked token to be refused", interval=0.2)

    released = [run("hosts", "release", host) for run in (lab.labctl, through_api)]    # nothing is quarantined
    assert [(r.returncode, r.stdout, r.stderr) for r in released] == \
        [(1, "", f"error: nothing of {host} is quarantined\n")] * 2, released
