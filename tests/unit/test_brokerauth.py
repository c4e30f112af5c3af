"""Broker credentials: ACL rendering, URL redaction and credential resolution, password file permissions."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import ssl
import stat
from pathlib import Path

import pytest

from labcontract.brokerauth import (
    SecretDir,
    acl_args,
    acl_rules,
    agent_user,
    lab_users,
    read_password_file,
    redact_url,
    render_acl,
    resolve,
    unacked_keys,
    with_credentials,
    write_secret,
)
from labcontract.errors import ConfigError
from labcontract.logs import _RedactPasswords
from labcontract.transport import celery_settings, redis_client


def test_the_acl_file_has_default_off_hashed_passwords_only_and_one_user_per_host() -> None:
    passwords = {u: f"pw-{u}" for u in lab_users(["h1", "h2"], admin=True)}
    text = render_acl(passwords)
    lines = text.splitlines()
    assert lines[0].startswith("user default off ")
    assert [ln.split()[1] for ln in lines] == ["default", "admin", "controller", "labctl", "web", "agent-h1",
                                                 "agent-h2"]
    for user, pw in passwords.items():
        assert pw not in text
        assert f"#{hashlib.sha256(pw.encode()).hexdigest()}" in text
        assert f"user {user} on resetpass #" in text


def test_an_agent_user_names_only_its_own_keys() -> None:
    rules = acl_args(acl_rules(agent_user("h1")))
    keys = [r for r in rules if "~" in r]
    assert keys == ["~agent.h1", "~_kombu.binding.agent.h1", "~_kombu.binding_permanent.agent.h1",
                    "~lab:unacked:h1", "~lab:unacked_index:h1", "~lab:unacked_mutex:h1", "~lab:live:h1",
                    "(%W~lab:events:h1 +xadd)"]                  # its events stream: XADD only (a selector)
    assert not any("*" in k or "?" in k for k in keys)          # no pattern can reach another host's keys
    assert "-@all" in rules and "-@dangerous" in rules and "resetchannels" in rules
    # no command that lists keys: they take no key, so the key patterns above do not bound them (issue 29)
    assert rules[-5:-1] == ["-@dangerous", "-scan", "-randomkey", "-keys"]


@pytest.mark.parametrize("host", ["h*", "a?b", "h[1]", "x y", "", "-lead", "a\\b", "h\n", "x" * 64])
def test_a_host_name_that_could_widen_a_key_pattern_gets_no_user(host: str) -> None:
    with pytest.raises(ConfigError, match="host name"):
        agent_user(host)
    with pytest.raises(ConfigError):
        unacked_keys(host)


def test_unknown_users_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown lab user"):
        acl_rules("root")


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://controller:s3cret@127.0.0.1:6379/0", "redis://controller:***@127.0.0.1:6379/0"),
    ("rediss://:s3cret@ctl:6380/0?ssl_ca_certs=/etc/ca.pem", "rediss://:***@ctl:6380/0?ssl_ca_certs=/etc/ca.pem"),
    ("redis://agent-h1@h:6379/0?password_file=/s/a.pass", "redis://agent-h1@h:6379/0?password_file=/s/a.pass"),
    ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
    ("postgresql+psycopg://lab:s3cret@db/lab", "postgresql+psycopg://lab:***@db/lab"),
    ("redis+socket:///tmp/r.sock", "redis+socket:///tmp/r.sock"),
])
def test_redact_url_hides_every_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url)


def test_password_files_are_written_0600_and_refused_when_others_can_read_them(tmp_path: Path) -> None:
    os.umask(0o022)
    f = tmp_path / "sub" / "controller.pass"
    write_secret(f, "pw1\n")
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert read_password_file(f) == "pw1"
    os.chmod(f, 0o640)                                   # group (the agent's group) may read
    assert read_password_file(f) == "pw1"
    os.chmod(f, 0o644)
    with pytest.raises(ConfigError, match="mode 0644 lets other users read it"):
        read_password_file(f)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_password_file(tmp_path / "missing.pass")
    empty = tmp_path / "empty.pass"
    write_secret(empty, "\n")
    with pytest.raises(ConfigError, match="holds no password"):
        read_password_file(empty)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_password_file(tmp_path)


def test_a_secret_dir_is_0700_and_keeps_passwords_across_instances(tmp_path: Path) -> None:
    a = SecretDir(tmp_path / "secrets")
    pw = a.password("controller")
    assert stat.S_IMODE((tmp_path / "secrets").stat().st_mode) == 0o700
    assert SecretDir(tmp_path / "secrets").password("controller") == pw
    assert len(pw) >= 40


def test_the_url_names_files_and_the_clients_get_the_password_in_memory(tmp_path: Path) -> None:
    pw = tmp_path / "agent.pass"
    write_secret(pw, "p@ss:w/rd\n")
    url = with_credentials("redis://127.0.0.1:6399/0", user="agent-h1", password_file=pw)
    assert "p@ss" not in url and url.startswith("redis://agent-h1@127.0.0.1:6399/0?password_file=")
    r = resolve(url)
    assert r.kwargs == {"username": "agent-h1", "password": "p@ss:w/rd"} and r.url == "redis://127.0.0.1:6399/0"
    kwargs = redis_client(url).connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["port"]) == ("agent-h1", "p@ss:w/rd", 6399)
    conf = celery_settings(url, host="h1")
    from kombu import Connection

    conn = Connection(conf["broker_url"])
    assert (conn.userid, conn.password, conn.port) == ("agent-h1", "p@ss:w/rd", 6399)
    opts = conf["broker_transport_options"]
    assert opts["unacked_key"] == "lab:unacked:h1" and opts["priority_steps"] == [0]
    assert conf["task_queues"][0].name == "agent.h1" and conf["task_queues"][0].exchange.name == "agent.h1"


def test_a_unix_socket_url_keeps_its_user_and_file(tmp_path: Path) -> None:
    pw = tmp_path / "c.pass"
    write_secret(pw, "pw\n")
    url = with_credentials("redis+socket:///run/redis.sock", user="controller", password_file=pw)
    r = resolve(url)
    assert r.url == "unix:///run/redis.sock" and r.kwargs["password"] == "pw"
    from kombu import Connection

    conn = Connection(r.kombu_url)
    assert conn.transport_cls == "redis+socket" or conn.transport.driver_type == "redis"


def test_tls_urls_carry_the_ca_to_redis_py_and_celery(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    url = with_credentials("rediss://ctl:6380/0", user="controller", ca=ca)
    conf = celery_settings(url)
    assert conf["broker_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": str(ca),
                                      "ssl_certfile": None, "ssl_keyfile": None}
    kwargs = redis_client(url).connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == str(ca) and kwargs["ssl_cert_reqs"] == "required"
    with pytest.raises(ConfigError, match="rediss://"):
        resolve(with_credentials("redis://ctl:6379/0", ca=ca))
    with pytest.raises(ConfigError, match="cannot be read"):
        resolve(with_credentials("rediss://ctl:6380/0", ca=tmp_path / "none.pem"))


def test_the_log_filter_masks_a_password_that_reached_a_log_line() -> None:
    rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "cannot connect to %s", ("redis://u:s3cret@h:1/0",),
                            None)
    assert _RedactPasswords().filter(rec)
    assert rec.getMessage() == "cannot connect to redis://u:***@h:1/0"


def test_the_deploy_example_is_what_the_generator_writes() -> None:
    import re

    example = (Path(__file__).resolve().parents[2] / "deploy" / "redis-users.acl").read_text()
    users = [line.split()[1] for line in example.splitlines()[1:]]
    rendered = render_acl({u: "x" for u in users})
    assert re.sub(r"#[0-9a-f]{64}", "#<sha256-of-the-password>", rendered) == example


def test_an_agent_connecting_as_another_hosts_user_is_refused_at_start() -> None:
    from labcontract.brokerauth import check_agent_user

    check_agent_user("redis://agent-h1@ctl:6379/0?password_file=/x", "h1")
    check_agent_user("redis://ctl:6379/0", "h1")                   # no user: a broker without ACL users
    with pytest.raises(ConfigError, match="connects as agent-h2"):
        check_agent_user("redis://agent-h1@ctl:6379/0", "h2")


def test_the_cli_folds_the_credential_options_into_the_url_and_warns_of_an_inline_password(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from orchestrator.labctl.broker import broker_url_of

    url = broker_url_of("rediss://labctl@ctl:6380/0", password_file=tmp_path / "p", ca=tmp_path / "ca.pem")
    assert url == f"rediss://labctl@ctl:6380/0?password_file={tmp_path}/p&ssl_ca_certs={tmp_path}/ca.pem"
    assert capsys.readouterr().err == ""
    assert broker_url_of("redis://u:s3cret@ctl:6379/0") == "redis://u:s3cret@ctl:6379/0"
    err = capsys.readouterr().err
    assert "holds a password" in err and "s3cret" not in err
    with pytest.raises(typer.Exit):
        broker_url_of("redis://ctl:6379/0", ca=tmp_path / "ca.pem")
    with pytest.raises(typer.Exit):
        broker_url_of("rediss://ctl:6380/0", cert=tmp_path / "c.pem")


def test_a_sentinel_url_names_its_sentinels_master_group_and_both_logins(tmp_path: Path) -> None:
    pw, spw = tmp_path / "agent.pass", tmp_path / "sentinel.pass"
    write_secret(pw, "agent-pw\n")
    write_secret(spw, "sentinel-pw\n")
    url = with_credentials(f"redis+sentinel://s1.lab:26379,10.0.0.2:26380/labmaster/3?sentinel_password_file={spw}"
                           "&sentinel_user=watcher", user="agent-h1", password_file=pw)
    assert "agent-pw" not in url and "sentinel-pw" not in url
    r = resolve(url)
    assert r.sentinel is not None
    assert (r.sentinel.sentinels, r.sentinel.master, r.sentinel.db) == (
        (("s1.lab", 26379), ("10.0.0.2", 26380)), "labmaster", 3)
    assert r.kwargs == {"username": "agent-h1", "password": "agent-pw"}
    assert r.sentinel_kwargs == {"username": "watcher", "password": "sentinel-pw"}
    client = redis_client(url)
    pool = client.connection_pool
    assert (pool.service_name, pool.connection_kwargs["username"], pool.connection_kwargs["db"]) == (
        "labmaster", "agent-h1", 3)
    conf = celery_settings(url, host="h1")
    from kombu import Connection

    conn = Connection(conf["broker_url"], transport_options=conf["broker_transport_options"])
    assert conn.transport_cls == "sentinel" and len(conn.alt) == 2
    assert (conn.userid, conn.password) == ("agent-h1", "agent-pw")
    opts = conf["broker_transport_options"]
    assert opts["master_name"] == "labmaster" and opts["sentinel_kwargs"]["password"] == "sentinel-pw"


@pytest.mark.parametrize(("url", "problem"), [
    ("redis+sentinel:///labmaster", "no sentinel"),
    ("redis+sentinel://s1:26379/", "master group ''"),
    ("redis+sentinel://s1:26379/bad*name", "master group 'bad*name'"),
    ("redis+sentinel://s1:99999/m", "port 1-65535"),
    ("redis+sentinel://s1/m", "expected host:port"),
    ("redis+sentinel://s1:26379/m/16", "database '16'"),
    ("redis+sentinel://s1:26379/m/0/x", "expected /MASTER or /MASTER/DB"),
    ("redis+sentinel://" + ",".join(f"s{i}:1" for i in range(10)) + "/m", "10 sentinels, at most 9"),
])
def test_a_bad_sentinel_url_is_refused_with_every_problem(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        resolve(url)


def test_sentinel_parameters_on_a_plain_url_and_unknown_ones_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sentinel_\\* parameters given for a URL without sentinels"):
        resolve("redis://127.0.0.1:6379/0?sentinel_user=x")
    with pytest.raises(ConfigError, match="unknown parameters for a sentinel URL: foo"):
        resolve("redis+sentinel://s1:26379/m?foo=1")
    with pytest.raises(ConfigError, match="TLS files given"):
        resolve(f"redis+sentinel://s1:26379/m?ssl_ca_certs={tmp_path}")


def test_a_tls_sentinel_url_speaks_tls_to_the_sentinels_and_the_primary(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read here")
    url = f"rediss+sentinel://s1:26379,s2:26379/labmaster?ssl_ca_certs={ca}"
    r = resolve(url)
    assert r.sentinel is not None and r.sentinel.tls
    assert r.sentinel_kwargs["ssl"] is True and r.sentinel_kwargs["ssl_ca_certs"] == str(ca)
    from redis.sentinel import SentinelManagedSSLConnection

    pool = redis_client(url).connection_pool
    assert pool.connection_class is SentinelManagedSSLConnection
    assert pool.connection_kwargs["ssl_ca_certs"] == str(ca)
    conf = celery_settings(url)
    assert conf["broker_use_ssl"]["ssl_ca_certs"] == str(ca)
    assert conf["broker_transport_options"]["sentinel_kwargs"]["ssl"] is True
