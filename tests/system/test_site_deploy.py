"""playbooks/site.yml deploys a whole lab over SSH onto three network-namespace hosts (tests/sshhosts.py): the
controller host (redis-server with AOF and the lab's ACL users, the controller, the web service, Prometheus with
the lab's rules and file_sd targets from the inventory, Grafana's provisioning files) and two agent hosts (a file
DUT each, agent.yml). The broker is a Sentinel group (inventory groups broker_replicas, broker_sentinels): the
controller host's redis-server the primary, a replica on the first agent host, a sentinel on each host. It serves TLS
only (``lab_broker_tls`` with mutual TLS: a CA, server and client certificates made by tests/tlscerts.py, the
server's naming every host's address): every daemon connects with rediss+sentinel:// and the lab's CA, and a plain
redis:// client is refused. A suite then runs on each agent through the deployed controller (labctl as the broker's
user labctl, with the deployed labctl.env's URL and password file, over TLS) and its results are in the deployed
store. Then the primary is stopped: the sentinels promote the replica, a suite runs again on each agent, and a second
site.yml run, which asks the sentinels where the primary is first, changes nothing but the stopped old primary
(its configuration written anew as a replica of the new primary, and started): every other task on every host
reports no change.

The namespace hosts share this machine's root filesystem and have no systemd of their own: every path of the
inventory is under the host's lab_root, and the daemons run as detached processes with pid files
(``lab_service_manager: process``, the agent's ``lab_agent_service_mode: script``). The systemd units are the
same command lines; that path is rendered, not started, by tests/integration/test_site_units.py. No apt task runs
(the hosts share one dpkg lock): redis-server, prometheus and fio are installed here.

Agents reach the broker on the controller host, and Prometheus the agents, through the root namespace: the
test turns on IPv4 forwarding on its own veths only (the setting goes with them) and routes the benchmarking
/20 of the namespace addresses through it. Every daemon is stopped by its pid file at the end (and the
fixture kills whatever else still runs in the namespaces).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from sqlalchemy import select

from orchestrator.labs.lab import free_port, wait_for
from orchestrator.queries import RunDetail, run_detail
from orchestrator.states import TERMINAL_RUN
from orchestrator.store.db import make_engine, sessions
from orchestrator.store.models import Host
from tests.conftest import QUICK_SUITE
from tests.sshhosts import NETWORK, SshHost, SshHosts, play_recap, running_ssh_hosts
from tests.tlscerts import Certs, make_certs

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
VENV = Path(sys.executable).parent.parent


def route_through_root(hosts: SshHosts) -> None:
    """Namespace to namespace through the root namespace: forwarding on our veths only, a route in each host."""
    for h in hosts:
        Path(f"/proc/sys/net/ipv4/conf/{h.veth}/forwarding").write_text("1\n")
        subprocess.run(["ip", "-n", h.name, "route", "replace", str(NETWORK), "via", h.root_address], check=True)


def stop_daemons(hosts: SshHosts) -> None:
    """SIGKILL every daemon site.yml started, by its pid file (and only while /proc says it is still one of ours)."""
    for h in hosts:
        for pidfile in (h.lab_root / "run").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pidfile.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"labctl" in cmdline or b"storagelab" in cmdline or b"redis" in cmdline or b"prometheus" in cmdline:
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def site_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    """Three namespace hosts: the first the controller host, the others agent hosts."""
    missing = [e for e in ("/usr/bin/redis-server", "/usr/bin/prometheus", "/usr/bin/fio") if not Path(e).exists()]
    if missing:
        pytest.fail(f"site.yml's test lab needs redis-server, prometheus and fio (apt): missing {', '.join(missing)}")
    with running_ssh_hosts(tmp_path_factory.mktemp("site"), n=3) as hosts:
        try:
            route_through_root(hosts)
            yield hosts
        finally:
            stop_daemons(hosts)


def tls_vars(certs: Certs) -> dict[str, Any]:
    """Every host's lab_broker_tls* (group_vars/all in a real inventory): mutual TLS."""
    return {"lab_broker_tls": True, "lab_broker_tls_ca": str(certs.ca), "lab_broker_tls_cert": str(certs.server_cert),
            "lab_broker_tls_key": str(certs.server_key), "lab_broker_tls_client_cert": str(certs.client_cert),
            "lab_broker_tls_client_key": str(certs.client_key)}


def host_vars(h: SshHost, ports: dict[str, int], certs: Certs, *, controller: bool) -> dict[str, Any]:
    r = h.lab_root
    common = {"lab_service_manager": "process", "lab_service_run_dir": str(r / "run"),
              "lab_service_log_dir": str(r / "logs"), "lab_service_script_dir": str(r / "sbin"), **tls_vars(certs),
              # the Sentinel group (group_vars/all in a real inventory): a sentinel on each host, the replica's
              # redis-server (broker_replicas) on the first agent host; redis-server runs as the sentinel
              "lab_broker_sentinel_port": ports["sentinel"], "lab_broker_sentinel_down_after_ms": 1000,
              "lab_broker_sentinel_failover_timeout_ms": 10000, "lab_sentinel_install": False,
              "lab_sentinel_exe": "/usr/bin/redis-server", "lab_sentinel_user": "root",
              "lab_sentinel_conf_dir": str(r / "etc"), "lab_sentinel_dir": str(r / "sentinel"),
              "lab_redis_install": False, "lab_redis_user": "root", "lab_redis_port": ports["redis"],
              "lab_redis_conf_dir": str(r / "etc"), "lab_redis_dir": str(r / "redis")}
    if controller:
        return {**common, "lab_controller_install": False, "lab_controller_venv": str(VENV),
                "lab_controller_user": "root", "lab_controller_lab_dir": str(r / "lib"),
                "lab_controller_conf_dir": str(r / "etc"), "lab_controller_metrics_port": ports["controller"],
                "lab_controller_web_bind": h.address, "lab_controller_web_port": ports["web"],
                "lab_controller_web_cookie_secure": False,
                "lab_redis_secrets_dir": str(r / "etc" / "broker"),
                "lab_prometheus_install": False, "lab_prometheus_user": "root",
                "lab_prometheus_conf_dir": str(r / "etc" / "prometheus"), "lab_prometheus_data_dir": str(r / "prom"),
                "lab_prometheus_listen": f"{h.address}:{ports['prometheus']}",
                "lab_grafana_provisioning_dir": str(r / "grafana"), "lab_grafana_dashboards_dir": str(r / "dashboards")}
    dut = r / "dut0.img"
    with dut.open("wb") as f:
        os.posix_fallocate(f.fileno(), 0, 64 << 20)
    # no apt: the hosts share this machine's one dpkg lock, with each other and with any other test (real hosts
    # have one each); redis-server, prometheus and fio are installed (tests/integration/test_agent_playbook.py runs
    # the agent's apt task)
    return {**common, "lab_packages_install": False, "driver_package": "", "driver_module": "",
            "io_tuning_udev_rules_file": str(r / "etc" / "60-scheduler.rules"), "io_tuning_udev_reload": False,
            "io_tuning_sysctl_file": str(r / "etc" / "60-sysctl.conf"), "io_tuning_sysctl_apply": False,
            "lab_agent_install": False, "lab_agent_venv": str(VENV), "lab_agent_user": "root",
            "lab_agent_service_mode": "script", "lab_agent_script": str(r / "storagelab-agent-ctl"),
            "lab_agent_state_dir": str(h.state_dir), "lab_agent_log_dir": str(r / "logs"),
            "lab_agent_run_dir": str(r / "run"), "lab_agent_unit_dir": str(r / "units"),
            "lab_agent_udev_rules_file": str(r / "etc" / "60-storagelab.rules"), "lab_agent_udev_reload": False,
            "lab_agent_stop_timeout": 15, "lab_agent_metrics_port": ports["agent"],
            "metrics_address": f"{h.address}:{ports['agent']}",
            "lab_agent_broker_password_file": str(r / "etc" / "broker.pass"),
            "lab_agent_sentinel_password_file": str(r / "etc" / "sentinel.pass"),
            "lab_agent_broker_ca": str(r / "etc" / "broker-ca.pem"),
            "lab_agent_broker_cert": str(r / "etc" / "broker-client.pem"),
            "lab_agent_broker_key": str(r / "etc" / "broker-client.key"),
            "duts": [{"name": "dut0", "path": str(dut), "kind": "file"}]}


def site_inventory(hosts: SshHosts, path: Path, ports: dict[str, int], certs: Certs) -> Path:
    """The lab inventory: ``controller`` = the first host, ``agents`` = the others (SSH settings of the fixture);
    the broker's Sentinel group: ``broker_replicas`` = the first agent host, ``broker_sentinels`` = every host."""
    ctl = hosts[0]
    hosts.ansible_inventory(path, groups=("all_hosts",),
                            per_host=lambda h: host_vars(h, ports, certs, controller=h is ctl))
    hostvars = yaml.safe_load(path.read_text())["all"]["children"]["all_hosts"]["hosts"]
    children = {"controller": {"hosts": {ctl.name: hostvars[ctl.name]}},
                "agents": {"hosts": {h.name: hostvars[h.name] for h in hosts if h is not ctl}},
                "broker_replicas": {"hosts": {hosts[1].name: None}},
                "broker_sentinels": {"hosts": {h.name: None for h in hosts}}}
    path.write_text(yaml.safe_dump({"all": {"children": children}}, sort_keys=False))
    return path


Recap = dict[str, dict[str, int]]


def site_run(hosts: SshHosts, inventory: Path) -> tuple[subprocess.CompletedProcess[str], float, Recap]:
    """A site.yml run that succeeded on every host: its output, its seconds and its recap per host."""
    started = time.monotonic()
    res = hosts.run_playbook(PLAYBOOKS / "site.yml", inventory,
                             env={"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg")}, timeout=900)
    seconds = time.monotonic() - started
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    stats = play_recap(res.stdout)
    assert set(stats) == {h.name for h in hosts}
    return res, seconds, stats


def changed_tasks(output: str) -> list[str]:
    """``TASK [...]`` headers followed by a ``changed:`` line (what a second run must not have)."""
    out, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            out.append(f"{task} {line}")
    return out


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as res:
        return json.load(res)


@pytest.mark.timeout(1200)   # two site.yml runs and four suites: 2.5 min alone, over 5 beside the VM tier in CI
def test_site_yml_deploys_a_working_lab_that_outlives_its_broker_primary(site_hosts: SshHosts, tmp_path: Path) -> None:
    hosts = site_hosts
    ctl, agents = hosts[0], list(hosts)[1:]
    ports = {k: free_port() for k in ("redis", "sentinel", "controller", "web", "prometheus", "agent")}
    # one server certificate for the group's servers and sentinels: it names every host's address
    certs = make_certs(tmp_path / "certs", server_ips=[h.address for h in hosts])
    replica = agents[0]
    sentinels = ",".join(f"{h.address}:{ports['sentinel']}" for h in hosts)
    inventory = site_inventory(hosts, tmp_path / "hosts.yml", ports, certs)

    _, first_s, stats = site_run(hosts, inventory)
    assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in stats.values()), stats

    # the deployed files: AOF on, TLS only, the ACL file (hashes only), the rules and the inventory's file_sd targets
    etc = ctl.lab_root / "etc"
    conf = (etc / "redis.conf").read_text()
    assert "appendonly yes" in conf and f"aclfile {etc}/redis-users.acl" in conf
    assert re.findall(r"^(?:tls-)?port .*$", conf, re.M) == ["port 0", f"tls-port {ports['redis']}"]
    assert "tls-auth-clients yes" in conf and f"tls-key-file {etc}/redis-tls/server.key" in conf
    assert (etc / "redis-tls" / "server.key").stat().st_mode & 0o077 == 0
    assert (etc / "redis-tls" / "ca.pem").read_bytes() == certs.ca.read_bytes()
    for a in agents:     # the agents' start scripts: the sentinels over TLS, the lab's CA and client certificate
        script = (a.lab_root / "storagelab-agent-ctl").read_text()
        assert f"rediss+sentinel://agent-{a.name}@{sentinels}/labmaster/0?password_file=" in script, script
        assert f"sentinel_password_file={a.lab_root}/etc/sentinel.pass" in script.replace("%2F", "/"), script
        assert f"LAB_BROKER_CA={a.lab_root}/etc/broker-ca.pem" in script and "LAB_BROKER_KEY=" in script
        assert (a.lab_root / "etc" / "broker-client.key").stat().st_mode & 0o007 == 0
    acl = (etc / "redis-users.acl").read_text()
    assert "user default off" in acl and all(f"user agent-{a.name} on" in acl for a in agents)
    assert "user lab-replica on" in acl and "user lab-sentinel on" in acl
    assert (etc / "redis-users.acl").stat().st_mode & 0o077 == 0
    # the Sentinel group: the replica holds the same ACL file and runs replicaof the primary; every sentinel
    # monitors it; the controller and web service take the sentinels' URL, and so does labctl's environment
    assert (replica.lab_root / "etc" / "redis-users.acl").read_text() == acl
    assert f"replicaof {ctl.address} {ports['redis']}" in (replica.lab_root / "redis" / "redis.conf").read_text()
    assert "replicaof" not in (ctl.lab_root / "redis" / "redis.conf").read_text()
    for h in hosts:
        assert f"sentinel monitor labmaster {ctl.address} {ports['redis']} 2" in (
            h.lab_root / "etc" / "sentinel.conf").read_text()
    for daemon in ("controller", "web"):
        assert f"rediss+sentinel://{daemon}@{sentinels}/labmaster/0" in (
            ctl.lab_root / "sbin" / f"storagelab-{daemon}-ctl").read_text()
    labctl_env = dict(shlex.split(line)[0].split("=", 1) for line in (etc / "labctl.env").read_text().splitlines()
                      if line and not line.startswith("#"))
    assert labctl_env["LAB_BROKER_URL"].startswith(f"rediss+sentinel://labctl@{sentinels}/labmaster/0?"), labctl_env
    targets = json.loads((etc / "prometheus" / "targets" / "agents.json").read_text())
    assert [(t["targets"], t["labels"]) for t in targets] == [
        ([f"{a.address}:{ports['agent']}"],
         {"host": a.name, "groups": ",agents," + ("broker_replicas," if a is replica else "") + "broker_sentinels,"})
        for a in agents]
    assert (ctl.lab_root / "grafana" / "datasources" / "storagelab.yml").exists()
    assert {p.name for p in (ctl.lab_root / "dashboards").glob("*.json")} == {
        p.name for p in (ROOT / "dashboards").glob("*.json")}

    # both agents registered at the deployed controller, over the network, as their own broker users
    store = f"sqlite:///{ctl.lab_root / 'lib' / 'store.sqlite'}"
    maker = sessions(make_engine(store))

    def registered() -> bool:
        with contextlib.suppress(Exception), maker() as s:
            names = {h.name for h in s.scalars(select(Host)).all() if h.registered_at}
            return names >= {a.name for a in agents}
        return False
    wait_for(registered, 90, "both deployed agents to register")

    # a plain redis:// client is refused by the TLS-only broker
    plain = redis.Redis(host=ctl.address, port=ports["redis"], socket_timeout=5, socket_connect_timeout=5)
    with pytest.raises(redis.ConnectionError):
        plain.ping()

    # a suite on each agent through the deployed controller, as the broker's user labctl, through the sentinels
    # over TLS (labctl's environment on the controller host: its URL and password files)
    suite = tmp_path / "quick.yaml"
    suite.write_text(QUICK_SUITE)
    labctl = [sys.executable, "-m", "orchestrator.cmd.labctl", "--lab-dir", str(tmp_path / "cli"),
              "--broker", labctl_env["LAB_BROKER_URL"],
              "--broker-password-file", labctl_env["LAB_BROKER_PASSWORD_FILE"], "--broker-ca", str(certs.ca),
              "--broker-cert", str(certs.client_cert), "--broker-key", str(certs.client_key), "--store", store]

    def suites_run() -> None:
        run_ids = []
        for a in agents:
            res = subprocess.run([*labctl, "submit", str(suite), "--host", a.name, "--device", "dut0"],
                                 capture_output=True, text=True, timeout=90)
            assert res.returncode == 0, res.stdout + res.stderr
            run_ids.append(res.stdout.split()[-1])

        def ended(run_id: str) -> RunDetail | None:
            with maker() as s:
                d = run_detail(s, run_id)
            return d if d.run.state in TERMINAL_RUN else None
        for run_id, a in zip(run_ids, agents, strict=True):
            d = wait_for(lambda r=run_id: ended(r), 120, f"run {run_id} on {a.name} to end", interval=0.2)  # type: ignore[misc]
            assert isinstance(d, RunDetail)
            assert d.run.state == "SUCCEEDED", (d.run.reason, [(st.name, st.reason) for st in d.steps])
            assert len(d.results) == 2 and all(r.iops and r.iops > 0 for r in d.results.values())
    suites_run()

    # the web service answers; Prometheus runs the lab's rules and scrapes both agents and the controller
    with urllib.request.urlopen(f"http://{ctl.address}:{ports['web']}/login", timeout=10) as res:
        assert res.status == 200
    prom = f"http://{ctl.address}:{ports['prometheus']}"
    groups = {g["name"] for g in http_json(f"{prom}/api/v1/rules")["data"]["groups"]}
    assert groups, "no rule group loaded"

    def all_up() -> bool:
        active = http_json(f"{prom}/api/v1/targets")["data"]["activeTargets"]
        return len(active) == len(agents) + 1 and all(t["health"] == "up" for t in active)
    wait_for(all_up, 60, "Prometheus to scrape both agents and the controller", interval=0.5)

    # the primary (the controller host's redis-server) stops: the sentinels promote the replica, the lab goes on
    group = SentinelView(hosts, ports, certs, etc / "broker")
    assert group.primary() == (ctl.address, ports["redis"])
    failover_started = time.monotonic()
    stop = subprocess.run([str(ctl.lab_root / "sbin" / "storagelab-redis-ctl"), "stop"], capture_output=True,
                          text=True, timeout=60)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    wait_for(lambda: group.primary() == (replica.address, ports["redis"]), 60,
             "the sentinels to promote the replica", interval=0.2)
    promoted_s = time.monotonic() - failover_started
    suites_run()

    # a second run, after the failover, asks the sentinels first: the promoted replica stays the primary, the old
    # primary comes back as its replica (its configuration written anew because it was not running, and started);
    # nothing else changes on any host
    second, second_s, stats = site_run(hosts, inventory)
    changes = changed_tasks(second.stdout)
    assert all(s["failed"] == 0 for s in stats.values()), stats
    assert stats[replica.name]["changed"] == 0 and stats[agents[1].name]["changed"] == 0, changes
    assert len(changes) == 2 and all(
        "configuration redis-server runs" in c or "Start the process (storagelab-redis)" in c for c in changes), changes
    assert f"replicaof {replica.address} {ports['redis']}" in (ctl.lab_root / "redis" / "redis.conf").read_text()
    assert group.primary() == (replica.address, ports["redis"])
    assert group.role(replica.address)[0] == "master"
    wait_for(lambda: group.role(ctl.address)[:4] == ["slave", replica.address, ports["redis"], "connected"], 60,
             "the old primary to replicate the new one", interval=0.2)
    print(f"\nFIGURE site.yml over 3 namespace hosts: first run {first_s:.0f}s; replica promoted {promoted_s:.1f}s "
          f"after the primary stopped; second run, after the failover (only the old primary changed) {second_s:.0f}s")


class SentinelView:
    """The deployed Sentinel group as its clients see it: the sentinels (their password) and the servers (as the
    group's sentinel user, which may ask ROLE), over the lab's mutual TLS."""

    def __init__(self, hosts: SshHosts, ports: dict[str, int], certs: Certs, secrets: Path) -> None:
        self.hosts, self.ports = hosts, ports
        self.tls: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(certs.ca), "ssl_certfile": str(certs.client_cert),
                    "ssl_keyfile": str(certs.client_key), "socket_timeout": 3, "socket_connect_timeout": 3,
                    "decode_responses": True}
        self.sentinel_password = (secrets / "sentinel.pass").read_text().strip()
        self.server_password = (secrets / "lab-sentinel.pass").read_text().strip()

    def client(self, host: str, port: int, **login: str) -> Any:
        return redis.Redis(host=host, port=port, **login, **self.tls)

    def primary(self) -> tuple[str, int] | None:
        """Where a majority of the sentinels say the primary is."""
        seen: dict[tuple[str, int], int] = {}
        for h in self.hosts:
            with contextlib.suppress(redis.RedisError, OSError, TypeError, ValueError):
                s = self.client(h.address, self.ports["sentinel"], password=self.sentinel_password)
                ip, port = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "labmaster")
                seen[(ip, int(port))] = seen.get((ip, int(port)), 0) + 1
        best = max(seen.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] >= 2 else None

    def role(self, address: str) -> list[Any]:
        try:
            server = self.client(address, self.ports["redis"], username="lab-sentinel", password=self.server_password)
            return list(server.execute_command("ROLE"))
        except (redis.RedisError, OSError):
            return []
