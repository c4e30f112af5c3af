"""``fio --client`` output (``client_stats``: one entry per server, and the ``All clients`` sum) read as the lab
reads its own runs: real ``fio --server`` processes on free 127.0.0.1 ports driven by ``fio --client`` with a job
file the lab renders. The figures equal those of the same entries read as a local run's jobs (merged-histogram
percentiles, summed IOPS); the sum is checked against the servers' entries; ``labctl analyze fio`` prints them."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcontract.errors import StepError
from labcontract.fiojob import render_job
from labcontract.fioresult import ALL_CLIENTS, parse_fio_groups, parse_fio_output
from labcontract.suite import parse_suite
from orchestrator.labs.lab import free_port, wait_for

pytestmark = pytest.mark.integration

SUITE = """\
suite: client
profiles:
  - {name: mix, rw: randrw, bs: 4k, rwmixread: 70, iodepth: 4, numjobs: 2, runtime: 1s}
"""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def client_outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, bytes]]:
    """The json+ output of one lab workload run through fio --client on one server and on two."""
    d = tmp_path_factory.mktemp("fioclient")
    target = d / "target.img"
    subprocess.run(["truncate", "-s", "64M", str(target)], check=True)
    workload = parse_suite(SUITE, "client.yaml").workloads[0]
    job = d / "job.fio"
    job.write_text(render_job(workload.model_copy(update={"name": "mix"}), str(target)))
    servers: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        for _ in range(2):
            port = free_port()
            proc = subprocess.Popen(["fio", f"--server=ip:127.0.0.1,{port}"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            servers.append((proc, port))
            wait_for(lambda p=port: _listening(p), 20, f"fio --server on {port}")
        hosts = d / "hosts"
        hosts.write_text("".join(f"ip:127.0.0.1,{p}\n" for _proc, p in servers))
        out = {}
        for name, client in (("one", f"ip:127.0.0.1,{servers[0][1]}"), ("two", str(hosts))):
            res = subprocess.run(["fio", f"--client={client}", "--output-format=json+", str(job)],
                                 capture_output=True, timeout=120, check=True)
            out[name] = res.stdout
        yield out
    finally:
        for proc, _port in servers:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _as_local_run(text: bytes) -> str:
    """The servers' entries as a local run's ``jobs`` (what the lab merges for its own runs)."""
    doc = json.loads(text[text.index(b"{"):])
    jobs = [e for e in doc.pop("client_stats") if e["jobname"] != ALL_CLIENTS]
    return json.dumps({**doc, "jobs": jobs})


def test_two_servers_merge_as_the_lab_merges_its_own_jobs(client_outputs: dict[str, bytes]) -> None:
    text = client_outputs["two"]
    doc = json.loads(text[text.index(b"{"):])
    assert "jobs" not in doc and [e["jobname"] for e in doc["client_stats"]].count(ALL_CLIENTS) == 1
    m = parse_fio_output(text, source="two.json")
    local = parse_fio_output(_as_local_run(text), source="as-local.json")
    assert m.jobs == 2 and m.combined.ios > 0
    assert m.combined.percentiles_ns == local.combined.percentiles_ns and m.combined.percentiles_ns["p99"] > 0
    assert m.read == local.read and m.write == local.write
    assert (m.combined.iops, m.combined.lat_mean_ns) == (local.combined.iops, local.combined.lat_mean_ns)
    assert m.cpu is None                      # two hosts' CPU is no one host's
    total = next(e for e in doc["client_stats"] if e["jobname"] == ALL_CLIENTS)
    assert m.read.ios == total["read"]["total_ios"] and m.write.ios == total["write"]["total_ios"]
    servers = [e for e in doc["client_stats"] if e["jobname"] != ALL_CLIENTS]
    # the lab sums the servers' IOPS, as it sums a local run's jobs; fio's sum divides the I/Os by the longest
    # runtime, the same figure when the servers ran equally long (on a loaded machine they differ by milliseconds)
    assert m.combined.iops == pytest.approx(sum(e[d]["iops"] for e in servers for d in ("read", "write")), rel=1e-9)
    assert m.combined.iops == pytest.approx(total["read"]["iops"] + total["write"]["iops"], rel=0.02)
    names = list(parse_fio_groups(text, source="two.json"))
    assert len(names) == 2 and all(n.startswith("mix@127.0.0.1:") for n in names)


def test_one_server_reads_like_a_local_run(client_outputs: dict[str, bytes]) -> None:
    text = client_outputs["one"]
    m = parse_fio_output(text, source="one.json")
    local = parse_fio_output(_as_local_run(text), source="as-local.json")
    assert m == local and m.cpu is not None and list(parse_fio_groups(text)) == ["mix"]


def test_a_sum_that_disagrees_with_the_servers_is_refused(client_outputs: dict[str, bytes]) -> None:
    text = client_outputs["two"]
    doc = json.loads(text[text.index(b"{"):])
    total = next(e for e in doc["client_stats"] if e["jobname"] == ALL_CLIENTS)
    total["read"]["total_ios"] += 1
    with pytest.raises(StepError, match=r"'All clients'.* read I/Os, but the servers' entries sum to"):
        parse_fio_output(json.dumps(doc), source="edited.json")
    doc["client_stats"] = [total]
    with pytest.raises(StepError, match="no server's entry"):
        parse_fio_output(json.dumps(doc), source="edited.json")


def test_labctl_analyze_fio_prints_the_lab_figures(client_outputs: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / "two.json"
    path.write_bytes(client_outputs["two"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"fio version": "fio-3.33", "client_stats": []}')
    res = subprocess.run([sys.executable, "-m", "orchestrator.cmd.labctl", "analyze", "fio", str(path), str(bad),
                          "--groups"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    m = parse_fio_output(client_outputs["two"])
    first = res.stdout.splitlines()[0]
    assert first.startswith(f"{path}: {m.combined.iops:,.0f} IOPS") and "2 job entries" in first, res.stdout
    assert f"p99 {m.combined.percentiles_ns['p99'] / 1000:,.1f}" in first
    assert sum(ln.startswith("  mix@127.0.0.1:") for ln in res.stdout.splitlines()) == 2
    assert f"error: {bad}: client_stats: expected a non-empty list" in res.stderr
