"""A broker group for the failover tests: the lab's redis-server as primary, a replica, and three redis-sentinel
processes watching them, all real processes on free 127.0.0.1 ports, under the lab's directory (stopped with it).

The servers share the lab's ACL file (ACL users are not replicated); the sentinels and the replica log in to the
servers as the lab's ``admin`` user; the sentinels ask their clients for a password of their own (``requirepass``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from labcontract.brokerauth import ADMIN, SecretDir, read_password_file, write_secret
from orchestrator.labs.lab import Lab, Proc, TlsFiles, free_port, wait_for

MASTER = "labmaster"


@dataclass
class SentinelGroup:
    lab: Lab
    primary_port: int
    replica_port: int
    sentinel_ports: list[int]
    password_file: Path                      # the sentinels' password
    tls: TlsFiles | None = None              # TLS only, everywhere (rediss+sentinel://)
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        """The lab's broker through the sentinels (no user yet: ``lab.user_url(user, base_url)`` names one)."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        scheme, ca = ("rediss+sentinel", f"&ssl_ca_certs={self.tls.ca}") if self.tls else ("redis+sentinel", "")
        return f"{scheme}://{hosts}/{MASTER}/0?sentinel_password_file={self.password_file}{ca}"

    def sentinel(self, port: int) -> Any:
        return redis.Redis(port=port, password=read_password_file(self.password_file), decode_responses=True,
                           socket_timeout=2, socket_connect_timeout=2, **_tls_kwargs(self.tls))

    def primary_address(self) -> tuple[str, int] | None:
        """Where the sentinels (a majority of those that answer) say the primary is."""
        seen: dict[tuple[str, int], int] = {}
        for port in self.sentinel_ports:
            try:
                host, p = self.sentinel(port).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            except (redis.RedisError, OSError, TypeError, ValueError):
                continue
            seen[(host, int(p))] = seen.get((host, int(p)), 0) + 1
        best = max(seen.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] >= 2 else None

    def ready(self) -> bool:
        """Every sentinel knows the primary, the replica (linked) and the two other sentinels."""
        for port in self.sentinel_ports:
            try:
                s = self.sentinel(port)
                replicas = s.execute_command("SENTINEL", "REPLICAS", MASTER)
                others = s.execute_command("SENTINEL", "SENTINELS", MASTER)
            except (redis.RedisError, OSError):
                return False
            linked = [r for r in replicas if _fields(r).get("master-link-status") == "ok"]
            if not linked or len(others) < len(self.sentinel_ports) - 1:
                return False
        return True


def _tls_kwargs(tls: TlsFiles | None) -> dict[str, Any]:
    return {} if tls is None else {"ssl": True, "ssl_ca_certs": str(tls.ca), "ssl_cert_reqs": "required"}


def _tls_args(tls: TlsFiles | None, port: int) -> list[str]:
    """redis-server / sentinel settings (as ``name value`` pairs): TLS only on ``port``, TLS to the servers."""
    if tls is None:
        return ["port", str(port)]
    return ["port", "0", "tls-port", str(port), "tls-cert-file", str(tls.cert), "tls-key-file", str(tls.key),
            "tls-ca-cert-file", str(tls.ca), "tls-auth-clients", "no", "tls-replication", "yes"]


def _fields(reply: Any) -> dict[str, str]:
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    return {str(reply[i]): str(reply[i + 1]) for i in range(0, len(reply) - 1, 2)}


def start_sentinel_group(lab: Lab, hosts: list[str], *, down_after_ms: int = 1000,
                         tls: TlsFiles | None = None) -> SentinelGroup:
    """After ``lab.start_redis(tls=tls)``: the agent users of ``hosts`` created on the primary (before the replica
    copies the ACL file), a replica of it and three sentinels; returns once every sentinel sees the whole group."""
    assert lab.admin_url and lab.root
    for host in hosts:
        lab.agent_url(host)
    primary_port = int(lab.admin_url.split("://", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[1])
    secrets = SecretDir(lab.root / "secrets")
    admin_pw = secrets.password(ADMIN)
    acl = lab.root / "redis" / "users.acl"
    # the primary, once it comes back, follows the new primary: it logs in there as admin too
    primary = redis.Redis(port=primary_port, username=ADMIN, password=admin_pw, **_tls_kwargs(tls))
    primary.config_set("masteruser", ADMIN)
    primary.config_set("masterauth", admin_pw)
    replica_dir = lab.root / "redis-replica"
    replica_dir.mkdir()
    shutil.copy(acl, replica_dir / "users.acl")
    replica_port = free_port()
    exe = shutil.which("redis-server")
    assert exe
    tls_args = _tls_args(tls, replica_port)
    procs = {"replica": lab._spawn("redis-replica", [
        exe, "--bind", "127.0.0.1", *(f"--{a}" if i % 2 == 0 else a for i, a in enumerate(tls_args)),
        "--save", "", "--appendonly", "yes",
        "--dir", str(replica_dir), "--aclfile", str(replica_dir / "users.acl"), "--protected-mode", "yes",
        "--replicaof", "127.0.0.1", str(primary_port), "--masteruser", ADMIN, "--masterauth", admin_pw])}
    sentinel_pw = secrets.password("sentinel")
    password_file = secrets.file("sentinel")
    ports = [free_port() for _ in range(3)]
    for i, port in enumerate(ports):
        d = lab.root / f"sentinel{i}"
        d.mkdir()
        conf = d / "sentinel.conf"
        write_secret(conf, "\n".join([
            *(" ".join(pair) for pair in zip(_tls_args(tls, port)[::2], _tls_args(tls, port)[1::2], strict=True)),
            "bind 127.0.0.1", f"dir {d}", f"requirepass {sentinel_pw}",
            f"sentinel sentinel-pass {sentinel_pw}",
            f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2",
            f"sentinel auth-user {MASTER} {ADMIN}", f"sentinel auth-pass {MASTER} {admin_pw}",
            f"sentinel down-after-milliseconds {MASTER} {down_after_ms}",
            f"sentinel failover-timeout {MASTER} 10000", ""]))
        procs[f"sentinel{i}"] = lab._spawn(f"sentinel{i}", [exe, str(conf), "--sentinel"])
    group = SentinelGroup(lab, primary_port, replica_port, ports, password_file, tls, procs)
    wait_for(group.ready, 60, "the sentinels to see the primary, its replica and each other", interval=0.2)
    return group
