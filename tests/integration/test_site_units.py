"""playbooks/site.yml's systemd path on this machine, which has no systemd: the controller host's play of the
example lab (inventory/example, rd630-ctl reached locally) with ``lab_service_manager: systemd`` and
``lab_service_start: false``, every path under a temporary directory. Everything up to ``systemctl`` runs for
real: the ACL file and password files (labctl broker acl), the redis and Prometheus configuration, the file_sd
targets from the example inventory, Grafana's provisioning, and the four units, which are checked line by
line and pass ``systemd-analyze verify`` (it needs no running systemd); a second run changes nothing. Starting
the units is not exercised here (tests/system/test_site_deploy.py runs the same command lines as processes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ansible_helpers import PLAYBOOKS, ROOT, VENV_BIN, ansible_env
from tests.tlscerts import make_certs

pytestmark = pytest.mark.integration

VENV = Path(sys.executable).parent.parent


def run_site(tmp: Path, **more: Any) -> subprocess.CompletedProcess[str]:
    (tmp / "units").mkdir(exist_ok=True)          # /etc/systemd/system exists where systemd runs
    extra: dict[str, Any] = {
        "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
        "lab_service_manager": "systemd", "lab_service_start": False, "lab_service_unit_dir": str(tmp / "units"),
        "lab_controller_install": False, "lab_controller_venv": str(VENV), "lab_controller_user": "root",
        "lab_controller_lab_dir": str(tmp / "lib"), "lab_controller_conf_dir": str(tmp / "etc"),
        "lab_redis_install": False, "lab_redis_distro_unit": "", "lab_redis_user": "root",
        "lab_redis_conf_dir": str(tmp / "etc"), "lab_redis_secrets_dir": str(tmp / "etc" / "broker"),
        "lab_redis_dir": str(tmp / "redis"),
        "lab_prometheus_install": False, "lab_prometheus_distro_unit": "", "lab_prometheus_user": "root",
        "lab_prometheus_conf_dir": str(tmp / "prometheus"), "lab_prometheus_data_dir": str(tmp / "tsdb"),
        "lab_grafana_provisioning_dir": str(tmp / "grafana"), "lab_grafana_dashboards_dir": str(tmp / "dashboards"),
        "lab_grafana_exe": str(tmp / "no-grafana"), **more,
    }
    return subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(ROOT / "inventory/example"),
                           "--limit", "rd630-ctl", "site.yml", "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=ansible_env(), cwd=PLAYBOOKS, timeout=300)


def recap(output: str) -> dict[str, int]:
    m = re.search(r"^rd630-ctl\s+:\s+(.*)$", output.split("PLAY RECAP", 1)[-1], re.M)
    assert m, output[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[1])}


def unit(path: Path) -> dict[str, list[str]]:
    """A unit file's settings: key -> every value it is given (in order)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def test_the_controller_hosts_units_and_files_for_the_example_lab(tmp_path: Path) -> None:
    first = run_site(tmp_path)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-2000:]
    assert recap(first.stdout)["failed"] == 0

    units = tmp_path / "units"
    assert sorted(p.name for p in units.iterdir()) == [
        "storagelab-controller.service", "storagelab-prometheus.service", "storagelab-redis.service",
        "storagelab-web.service"]
    redis = unit(units / "storagelab-redis.service")
    assert redis["ExecStart"] == [f'"/usr/bin/redis-server" "{tmp_path}/etc/redis.conf"']
    conf = (tmp_path / "etc" / "redis.conf").read_text()
    assert "bind 127.0.0.1 10.20.0.10" in conf and "appendonly yes" in conf and "port 6379" in conf
    acl = (tmp_path / "etc" / "redis-users.acl").read_text()
    users = re.findall(r"^user (\S+)", acl, re.M)
    assert users == ["default", "controller", "labctl", "labctl-alice", "web", "agent-rd630-a", "agent-rd630-b",
                     "agent-rd630-c", "agent-rd630-ini"]

    ctl = unit(units / "storagelab-controller.service")
    # the inventory's metrics_address of the controller host (rd630-ctl: 10.20.0.10:9465)
    assert ctl["User"] == ["root"] and ctl["KillMode"] == ["control-group"]
    assert ctl["ExecStart"] == [f'"{VENV}/bin/labctl" "controller" "--heartbeat-timeout" "10" "--net-start-lead" '
                                '"1.5" "--metrics-port" "9465" "--metrics-bind" "10.20.0.10"']
    assert sorted(ctl["Environment"]) == [f'"LAB_BROKER_PASSWORD_FILE={tmp_path}/etc/controller.pass"',
                                          '"LAB_BROKER_URL=redis://controller@127.0.0.1:6379/0"',
                                          f'"LAB_DIR={tmp_path}/lib"']
    assert (tmp_path / "etc" / "controller.pass").read_text() == (tmp_path / "etc/broker/controller.pass").read_text()
    web = unit(units / "storagelab-web.service")
    assert web["ExecStart"][0].endswith('"serve" "--bind" "127.0.0.1" "--port" "8080" "--secret-file" '
                                        f'"{tmp_path}/lib/web/session.key" "--cookie-secure"')
    assert web["ProtectSystem"] == ["strict"] and web["ReadWritePaths"] == [f"{tmp_path}/lib"]
    assert '"LAB_BROKER_URL=redis://web@127.0.0.1:6379/0"' in web["Environment"]

    prom = unit(units / "storagelab-prometheus.service")
    assert '"--web.listen-address=127.0.0.1:9090"' in prom["ExecStart"][0]
    assert (tmp_path / "prometheus" / "rules" / "recording.yml").read_text() == (
        ROOT / "deploy/prometheus/rules/recording.yml").read_text()
    agents = json.loads((tmp_path / "prometheus" / "targets" / "agents.json").read_text())
    assert [(g["labels"]["host"], g["targets"], g["labels"]["groups"]) for g in agents] == [
        ("rd630-a", ["10.20.0.11:9464"], ",agents,"), ("rd630-b", ["10.20.0.12:9464"], ",agents,"),
        ("rd630-c", ["10.20.0.13:9464"], ",agents,"), ("rd630-ini", ["10.20.0.21:9464"], ",agents,initiators,")]
    assert json.loads((tmp_path / "prometheus" / "targets" / "controller.json").read_text()) == [
        {"targets": ["10.20.0.10:9465"], "labels": {}}]
    assert '"http://127.0.0.1:9090"' in (tmp_path / "grafana" / "datasources" / "storagelab.yml").read_text()
    assert f'path: "{tmp_path}/dashboards"' in (tmp_path / "grafana" / "dashboards" / "storagelab.yml").read_text()

    second = run_site(tmp_path)
    assert second.returncode == 0, second.stdout[-5000:]
    assert recap(second.stdout)["changed"] == 0, second.stdout[-5000:]
    verify_units(units, tmp_path / "broken")


def verify_units(units: Path, scratch: Path) -> None:
    """``systemd-analyze verify`` (offline: no manager is asked) passes the four units without a word: keys,
    values, the ExecStart binaries (executable here), the units they name. It does report a broken copy."""
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing: make test installs systemd (TEST_PKGS)"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""}
    files = sorted(str(p) for p in units.iterdir())
    res = subprocess.run(["systemd-analyze", "verify", *files], capture_output=True, text=True, env=env, timeout=60)
    assert (res.returncode, res.stdout + res.stderr) == (0, ""), res.stdout + res.stderr
    scratch.mkdir()
    broken = scratch / "storagelab-web.service"
    broken.write_text((units / "storagelab-web.service").read_text().replace(
        "[Service]\n", "[Service]\nRestartPolicy=always\n").replace(f'"{VENV}/bin/labctl"', f'"{scratch}/labctl"'))
    res = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode != 0 and "Unknown key 'RestartPolicy' in section [Service]" in res.stderr, res.stderr
    assert f"Command {scratch}/labctl is not executable" in res.stderr, res.stderr


def test_broker_tls_serves_tls_only_and_a_missing_certificate_is_named(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    tls = {"lab_broker_tls": True, "lab_broker_tls_ca": str(certs.ca), "lab_broker_tls_cert": str(certs.server_cert),
           "lab_broker_tls_key": str(certs.server_key)}
    res = run_site(tmp_path, **tls)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    conf = (tmp_path / "etc" / "redis.conf").read_text()
    assert re.findall(r"^(?:tls-)?port .*$", conf, re.M) == ["port 0", "tls-port 6379"]
    assert f"tls-cert-file {tmp_path}/etc/redis-tls/server.pem" in conf and "tls-auth-clients no" in conf
    assert (tmp_path / "etc" / "redis-tls" / "server.key").stat().st_mode & 0o777 == 0o600
    env = unit(tmp_path / "units" / "storagelab-controller.service")["Environment"]
    assert '"LAB_BROKER_URL=rediss://controller@127.0.0.1:6379/0"' in env
    assert f'"LAB_BROKER_CA={tmp_path}/etc/broker-ca.pem"' in env

    missing = run_site(tmp_path, **{**tls, "lab_broker_tls_cert": str(tmp_path / "nowhere.pem")})
    assert missing.returncode != 0
    assert f'lab_broker_tls_cert is "{tmp_path}/nowhere.pem": with lab_broker_tls on' in missing.stdout, (
        missing.stdout[-3000:])
