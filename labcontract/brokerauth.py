"""Broker credentials: the Redis ACL users of a lab, their password files, and URLs safe to log.

A broker URL names the user and, in its query, the *files* that hold the secrets, never a secret itself::

    rediss://agent-h1@ctl.lab:6380/0?password_file=/etc/storagelab/broker.pass&ssl_ca_certs=/etc/storagelab/ca.pem

so it can go on a command line, in a unit file and in a log line. :func:`resolve` reads the password file
when a client is built (redis-py keyword arguments, and the kombu URL Celery needs, which exist only in
memory). A password written in the URL itself still works (older deployments) and :func:`redact_url`
hides it wherever a URL is logged.

ACL layout (:func:`render_acl`): ``default`` off; ``controller`` (streams, replies, agent queues, keys
``lab:*``, no dangerous command); ``agent-<host>`` per host (its own Celery queue, its own unacked keys,
XADD to ``lab:events:<host>`` only, ``lab:live:<host>``); ``labctl`` (XADD ``lab:commands``, its replies,
``lab:live:*`` read); ``web`` (the web service: XADD ``lab:commands:web`` only, its replies, ``lab:live:*``
read); optionally ``admin`` (everything: the embedded lab's own user).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from labcontract import sentinel
from labcontract.errors import ConfigError
from labcontract.sentinel import SentinelUrl

ADMIN = "admin"
CONTROLLER = "controller"
LABCTL = "labctl"
WEB = "web"             # the web service (orchestrator.web): the only writer of lab:commands:web
AGENT_PREFIX = "agent-"
# What an agent's host name may be to get an ACL user: no glob characters (* ? [ ] \) and no spaces,
# so that a key pattern naming it matches that host's keys only
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,69}")
PASSWORD_MAX = 512
# URL query parameters that name credential files (not secrets: paths)
PASSWORD_FILE = "password_file"
CA_FILE = "ssl_ca_certs"
CERT_FILE = "ssl_certfile"
KEY_FILE = "ssl_keyfile"
FILE_PARAMS = (PASSWORD_FILE, CA_FILE, CERT_FILE, KEY_FILE)

# Commands every user needs to connect: AUTH/HELLO are always allowed; PING, SELECT, CLIENT SETNAME...
_CONNECT = "+@connection"
# What redis-py's Lock (kombu's unacked mutex) and a lease script run: scripts see the user's key patterns
_SCRIPTS = "+eval +evalsha +script|load +script|exists"
_DATA = "+@transaction +@list +@hash +@string +@set +@sortedset +@keyspace"
_NO_LISTING = "-scan -randomkey -keys"


def agent_user(host: str) -> str:
    return AGENT_PREFIX + check_host(host)


def check_agent_user(url: str, host: str) -> None:
    """An agent whose broker user is another host's would be refused on every write: say so at start."""
    try:
        user = unquote(urlsplit(url).username or "")
    except ValueError:
        return
    if user.startswith(AGENT_PREFIX) and user != agent_user(host):
        raise ConfigError("--host", host, f"the broker user is {user}; the agent of host {host} connects as "
                                          f"{agent_user(host)} (its ACL user names its own queue and stream)")


def check_host(host: str) -> str:
    if not HOST_NAME.fullmatch(host):
        raise ConfigError("host name", repr(host)[:80], "needs 1-63 letters, digits, '.', '_' or '-', "
                                                        "starting with a letter or digit (it names an ACL user)")
    return host


def unacked_keys(host: str) -> dict[str, str]:
    """kombu's Redis transport options giving a host's worker unacked hash/index/mutex keys of its own
    (kombu's defaults ``unacked``, ``unacked_index``, ``unacked_mutex`` are shared by every consumer)."""
    check_host(host)
    return {"unacked_key": f"lab:unacked:{host}", "unacked_index_key": f"lab:unacked_index:{host}",
            "unacked_mutex_key": f"lab:unacked_mutex:{host}"}


def _agent_rule(host: str) -> str:
    queue = f"agent.{host}"      # labcontract.protocol.agent_queue; kombu priority_steps [0]: no variants
    keys = [queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}", *unacked_keys(host).values(),
            f"lab:live:{host}"]
    # its events stream in a selector of its own: XADD only (with the root's DEL/PEXPIRE/RENAME on it, an agent
    # could remove the stream and its group at will: NOGROUP on every multi-stream read of the controller)
    # and no command that lists keys (SCAN, RANDOMKEY, KEYS: they take no key, so key patterns do not bound them):
    # with them an agent learnt every reply list's name, the web service's included
    return (" ".join(f"~{k}" for k in keys) + f" -@all {_CONNECT} {_DATA} +xadd {_SCRIPTS} -@dangerous "
            f"{_NO_LISTING} (%W~lab:events:{host} +xadd)")


def acl_args(rules: str) -> list[str]:
    """``rules`` as ACL SETUSER arguments: words, a ``(selector)`` kept whole."""
    return re.findall(r"\([^)]*\)|\S+", rules)


def acl_rules(user: str) -> str:
    """Redis ACL rules (after ``user NAME on #HASH``) of one of the lab's users."""
    if user == ADMIN:
        return "~* &* +@all"
    if user == CONTROLLER:
        return (f"resetchannels ~lab:* ~agent.* %R~_kombu.* -@all {_CONNECT} {_DATA} +@stream {_SCRIPTS} "
                "-@dangerous")
    if user == LABCTL or user.startswith(LABCTL + "-"):
        # lab:commands in a selector: XADD only (with +del on it, a labctl user removed the stream and its group:
        # NOGROUP on every read of the controller; and +xadd no longer reaches the reply lists)
        return ("resetchannels ~lab:reply:* %R~lab:live:* "
                f"-@all {_CONNECT} +blpop +brpop +lpop +del +get +exists -@dangerous (%W~lab:commands +xadd)")
    if user == WEB:
        # the web service's stream, XADD only: the controller records the actor its commands name and takes token
        # commands from there alone, so no other user may write it (labctl's selector names lab:commands
        # exactly, which is no pattern reaching lab:commands:web)
        return ("resetchannels ~lab:reply:* %R~lab:live:* "
                f"-@all {_CONNECT} +blpop +brpop +lpop +del +get +exists -@dangerous (%W~lab:commands:web +xadd)")
    if user.startswith(AGENT_PREFIX):
        return "resetchannels " + _agent_rule(user[len(AGENT_PREFIX):])
    raise ConfigError("ACL", user, f"unknown lab user (known: {ADMIN}, {CONTROLLER}, {LABCTL}, {WEB}, "
                                   f"{AGENT_PREFIX}<host>)")


def lab_users(hosts: Iterable[str], *, admin: bool = False, labctl: Iterable[str] = (LABCTL,),
              web: bool = True) -> list[str]:
    users = ([ADMIN] if admin else []) + [CONTROLLER, *labctl] + ([WEB] if web else [])
    return users + [agent_user(h) for h in sorted(set(hosts))]


def password_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def render_acl(passwords: Mapping[str, str]) -> str:
    """The ACL file (redis.conf ``aclfile``) of ``passwords`` (user -> password): only SHA-256 hashes
    of the passwords go in it, and ``default`` is off."""
    lines = ["user default off resetpass resetkeys resetchannels -@all"]   # (redis allows no comment here)
    for user, password in passwords.items():
        if not USER_NAME.fullmatch(user):
            raise ConfigError("ACL", repr(user)[:80], "not a valid user name")
        lines.append(f"user {user} on resetpass #{password_hash(password)} {acl_rules(user)}")
    return "\n".join(lines) + "\n"


def new_password() -> str:
    return secrets.token_urlsafe(32)


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600 from creation: never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def first_line_of_private_file(path: str | Path, what: str, *, others: int, hint: str, max_bytes: int) -> str:
    """The first line of ``path``, stripped, for a secret: refused (ConfigError naming ``what``) when it is not a
    regular file or its mode has any bit of ``others`` (``hint`` says the fix); at most ``max_bytes`` are read."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(what, str(p), "is not a regular file")
        if st.st_mode & others:
            raise ConfigError(what, str(p), f"mode {stat.S_IMODE(st.st_mode):04o} {hint}")
        raw = p.read_bytes()[:max_bytes]
    except OSError as e:
        raise ConfigError(what, str(p), f"cannot be read: {e.strerror}") from None
    lines = raw.decode(errors="replace").splitlines()
    return lines[0].strip() if lines else ""


def read_password_file(path: str | Path) -> str:
    """The password in ``path`` (first line). Refused if others can read it or it is not a regular file."""
    password = first_line_of_private_file(path, "broker password file", others=0o007,
                                          hint="lets other users read it (chmod 600 or 640)",
                                          max_bytes=PASSWORD_MAX + 2)
    if not password or len(password) > PASSWORD_MAX:
        raise ConfigError("broker password file", str(path), f"holds no password of 1-{PASSWORD_MAX} characters")
    return password


@dataclass
class SecretDir:
    """Per-user password files ``<dir>/<user>.pass`` (0600, in a 0700 directory), made on first use."""

    root: Path
    _cache: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def file(self, user: str) -> Path:
        if not USER_NAME.fullmatch(user):
            raise ConfigError("ACL", repr(user)[:80], "not a valid user name")
        return self.root / f"{user}.pass"

    def password(self, user: str) -> str:
        if user not in self._cache:
            path = self.file(user)
            if not path.exists():
                write_secret(path, new_password() + "\n")
            self._cache[user] = read_password_file(path)
        return self._cache[user]

    def render(self, users: Iterable[str]) -> str:
        return render_acl({u: self.password(u) for u in users})


# --- URLs -----------------------------------------------------------------------------------------------


def _unsplit(parts: tuple[str, str, str, str, str]) -> str:
    """urlunsplit that keeps ``//`` before an empty authority (``redis+socket:///path``)."""
    scheme, netloc, path, query, fragment = parts
    url = f"{scheme}://{netloc}{path}"
    return url + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")


def redact_url(url: str | None) -> str:
    """``url`` with any password replaced by ``***`` (in the authority and in the query): what a log line,
    an error message or a console line may show."""
    if not url:
        return str(url)
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            cred, host = netloc.rsplit("@", 1)
            if ":" in cred:
                cred = cred.split(":", 1)[0] + ":***"
            netloc = f"{cred}@{host}"
        query = parts.query
        if query:
            pairs = [(k, "***" if "pass" in k.lower() and k != PASSWORD_FILE else v)
                     for k, v in parse_qsl(query, keep_blank_values=True)]
            query = urlencode(pairs, safe="/:*")
        return _unsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparseable URL>"


def with_credentials(url: str, *, user: str | None = None, password_file: str | Path | None = None,
                     ca: str | Path | None = None, cert: str | Path | None = None,
                     key: str | Path | None = None) -> str:
    """``url`` naming ``user`` and the credential files (given ones replace those already in the URL;
    ``user`` also drops a password written in the URL)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        host = netloc.rsplit("@", 1)[-1]
        netloc = f"{quote(user, safe='')}@{host}"
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    for name, value in ((PASSWORD_FILE, password_file), (CA_FILE, ca), (CERT_FILE, cert), (KEY_FILE, key)):
        if value is not None:
            query[name] = str(value)
    return _unsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="/:"), parts.fragment))


@dataclass(frozen=True)
class Resolved:
    """A broker URL with its secrets read: for redis-py (``url`` + ``kwargs``) and kombu (``kombu_url``,
    ``ssl``). Kept in memory only; never log ``kombu_url`` (use :func:`redact_url`)."""

    url: str                    # redis-py URL without credentials or file parameters
    kwargs: dict[str, Any]      # username, password, ssl_* for redis.Redis.from_url
    kombu_url: str              # the URL kombu parses, with the password
    ssl: dict[str, Any] | None  # Celery broker_use_ssl
    sentinel: SentinelUrl | None = None               # redis+sentinel://: where the sentinels are
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict)   # the sentinels' login and TLS


def resolve(url: str) -> Resolved:
    """Read the credential files a broker URL names (see the module doc)."""
    import ssl as _ssl

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss", "redis+socket", "unix", *sentinel.SCHEMES):
        return Resolved(url, {}, url, None)          # memory:// and the like (tests): nothing to resolve
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    files = {k: query.pop(k) for k in FILE_PARAMS if k in query}
    sentinel_login = {k: query.pop(k) for k in (sentinel.SENTINEL_PASSWORD_FILE, sentinel.SENTINEL_USER)
                      if k in query}
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    if PASSWORD_FILE in files:
        password = read_password_file(files[PASSWORD_FILE])
    for name in (CA_FILE, CERT_FILE, KEY_FILE):
        if name in files and not os.access(files[name], os.R_OK):
            raise ConfigError("broker URL", name, f"{files[name]} cannot be read")
    tls = is_tls(scheme)
    if not tls and (CA_FILE in files or CERT_FILE in files):
        raise ConfigError("broker URL", redact_url(url), "TLS files given for a plain redis:// URL (use rediss://)")
    if sentinel_login and scheme not in sentinel.SCHEMES:
        raise ConfigError("broker URL", redact_url(url), "sentinel_* parameters given for a URL without sentinels "
                                                         "(redis+sentinel://)")
    host = parts.netloc.rsplit("@", 1)[-1]
    rest = urlencode(query, safe="/:")
    py_scheme = "unix" if scheme == "redis+socket" else scheme
    py_url = _unsplit((py_scheme, host, parts.path, rest, ""))
    kwargs: dict[str, Any] = {}
    if user:
        kwargs["username"] = user
    if password:
        kwargs["password"] = password
    ssl_opts: dict[str, Any] | None = None
    if tls:
        ssl_opts = {"ssl_cert_reqs": _ssl.CERT_REQUIRED, "ssl_ca_certs": files.get(CA_FILE),
                    "ssl_certfile": files.get(CERT_FILE), "ssl_keyfile": files.get(KEY_FILE)}
        kwargs.update(ssl_cert_reqs="required", ssl_ca_certs=files.get(CA_FILE),
                      ssl_certfile=files.get(CERT_FILE), ssl_keyfile=files.get(KEY_FILE))
    cred = ""
    if user or password:
        cred = quote(user or "", safe="") + (":" + quote(password, safe="") if password else "") + "@"
    if scheme in sentinel.SCHEMES:
        where = sentinel.parse(url)
        if rest:
            raise ConfigError("broker URL", redact_url(url), f"unknown parameters for a sentinel URL: "
                                                             f"{', '.join(sorted(query))}")
        skw: dict[str, Any] = {}
        if sentinel.SENTINEL_USER in sentinel_login:
            if not USER_NAME.fullmatch(sentinel_login[sentinel.SENTINEL_USER]):
                raise ConfigError("broker URL", sentinel.SENTINEL_USER, "not a valid user name")
            skw["username"] = sentinel_login[sentinel.SENTINEL_USER]
        if sentinel.SENTINEL_PASSWORD_FILE in sentinel_login:
            skw["password"] = read_password_file(sentinel_login[sentinel.SENTINEL_PASSWORD_FILE])
        if tls:
            skw.update(ssl=True, ssl_cert_reqs="required", ssl_ca_certs=files.get(CA_FILE),
                       ssl_certfile=files.get(CERT_FILE), ssl_keyfile=files.get(KEY_FILE))
        return Resolved(f"redis://{where.sentinels[0][0]}:{where.sentinels[0][1]}/{where.db}", kwargs,
                        sentinel.kombu_url(where, cred), ssl_opts, where, skw)
    kombu_url = _unsplit((scheme, cred + host, parts.path, rest, ""))
    return Resolved(py_url, kwargs, kombu_url, ssl_opts)


def is_tls(scheme: str) -> bool:
    """Whether a broker URL of ``scheme`` speaks TLS (``rediss://``, ``rediss+sentinel://``)."""
    return scheme.lower() in ("rediss", "rediss+sentinel")
