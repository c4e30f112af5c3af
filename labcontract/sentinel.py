"""Broker URLs through Redis Sentinel: a broker that survives the loss of its host.

::

    redis+sentinel://agent-h1@s1.lab:26379,s2.lab:26379,s3.lab:26379/labmaster/0?password_file=/etc/storagelab/broker.pass
    rediss+sentinel://...?ssl_ca_certs=/etc/storagelab/ca.pem&sentinel_password_file=/etc/storagelab/sentinel.pass

The authority lists the sentinels (1-9 ``host:port``, comma-separated); the path names the master group the sentinels
monitor and, optionally, the database (0-15, default 0). The user and ``password_file`` are the lab's ACL user on
whichever server is the primary (ACL users are not replicated: every server of the group holds the same ACL file).
The sentinels themselves may ask for a password (``requirepass`` in sentinel.conf), read from
``sentinel_password_file``, with ``sentinel_user`` for an ACL user of the sentinels. ``rediss+sentinel``: TLS to the
sentinels and to the servers, with the same ``ssl_*`` files.

Clients (redis-py's ``Sentinel.master_for``, kombu's ``sentinel://`` transport) ask the sentinels where the primary
is on every new connection and drop a connection whose server turned replica (READONLY): after a failover, the next
retry reaches the new primary. What the old primary had not replicated is lost (replication is asynchronous); the
controller asks the agents where every active attempt stands after any broker outage (``Controller.reconcile``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from labcontract.errors import ConfigError

SCHEMES = ("redis+sentinel", "rediss+sentinel")
MAX_SENTINELS = 9
MASTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]")
SENTINEL_PASSWORD_FILE = "sentinel_password_file"
SENTINEL_USER = "sentinel_user"
MAX_DB = 15


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int
    tls: bool


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def parse(url: str) -> SentinelUrl:
    """The sentinels, master group and database a ``redis+sentinel://`` URL names; ConfigError listing every
    problem (the URL redacted by the caller: this message never repeats the authority's credentials)."""
    parts = urlsplit(url)
    problems: list[str] = []
    hosts = parts.netloc.rsplit("@", 1)[-1]
    sentinels: list[tuple[str, int]] = []
    items = hosts.split(",") if hosts else []
    if not items:
        problems.append("no sentinel (host:port, comma-separated)")
    if len(items) > MAX_SENTINELS:
        problems.append(f"{len(items)} sentinels, at most {MAX_SENTINELS}")
    for item in items[:MAX_SENTINELS]:
        host, sep, port = item.rpartition(":")
        if not sep or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
            problems.append(f"sentinel {item[:80]!r}: expected host:port (port 1-65535)")
            continue
        sentinels.append((host.strip("[]"), int(port)))
    segments = [unquote(s) for s in parts.path.split("/")[1:]]
    if segments and segments[-1] == "":
        segments.pop()
    master, db = (segments[0] if segments else ""), 0
    if not MASTER_NAME.fullmatch(master):
        problems.append(f"master group {master[:80]!r}: expected /NAME[/DB] with NAME of 1-64 letters, digits, "
                        "'.', '_' or '-'")
    if len(segments) > 2:
        problems.append("path: expected /MASTER or /MASTER/DB")
    elif len(segments) == 2:
        if not segments[1].isdigit() or int(segments[1]) > MAX_DB:
            problems.append(f"database {segments[1][:20]!r}: expected 0-{MAX_DB}")
        else:
            db = int(segments[1])
    if problems:
        raise ConfigError("broker URL", "sentinel", "; ".join(problems))
    return SentinelUrl(tuple(sentinels), master, db, parts.scheme.lower() == "rediss+sentinel")


def kombu_url(s: SentinelUrl, cred: str) -> str:
    """What kombu's sentinel transport parses: one ``sentinel://`` URL per sentinel, ``;``-separated (Celery reads
    them as alternates of one transport); ``cred`` (``user:password@``, percent-quoted) is the primary's login."""
    return ";".join(f"sentinel://{cred}{_netloc(h, p)}/{s.db}" for h, p in s.sentinels)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
