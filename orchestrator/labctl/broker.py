"""``labctl broker``: the broker's ACL users and their password files; the credential options of every
command (``--broker-password-file``, ``--broker-ca``...) folded into the broker URL."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from labcontract.brokerauth import (
    ADMIN,
    LABCTL,
    USER_NAME,
    SecretDir,
    is_tls,
    lab_users,
    redact_url,
    with_credentials,
    write_secret,
)
from labcontract.errors import ConfigError
from orchestrator.labctl.common import command_group, fails_cleanly, out
from orchestrator.labctl.groups import HELP

broker_app = command_group(help=HELP["broker"], no_args_is_help=True)


def broker_url_of(url: str, *, password_file: Path | None = None, ca: Path | None = None,
                  cert: Path | None = None, key: Path | None = None) -> str:
    """``url`` naming the credential files given as options (nothing is read here: the clients read the
    files when they connect). A password written in the URL is still accepted, with a warning: it shows in
    the process list and the shell history."""
    try:
        parts = urlsplit(url)
    except ValueError:
        print("error: --broker: not a URL", file=sys.stderr)
        raise typer.Exit(2) from None
    if parts.password:
        print(f"warning: the broker URL holds a password ({redact_url(url)}): anyone on this machine can read "
              "it in the process list; use --broker-password-file / LAB_BROKER_PASSWORD_FILE", file=sys.stderr)
    if (ca or cert) and not is_tls(parts.scheme):
        print(f"error: --broker-ca/--broker-cert need a rediss:// or rediss+sentinel:// URL, not {redact_url(url)}",
              file=sys.stderr)
        raise typer.Exit(2)
    if (cert is None) != (key is None):
        print("error: --broker-cert and --broker-key go together", file=sys.stderr)
        raise typer.Exit(2)
    return with_credentials(url, password_file=password_file, ca=ca, cert=cert, key=key)


@broker_app.command("acl")
@fails_cleanly
def broker_acl(
    hosts: Annotated[str, typer.Option(help="Agent hosts, comma-separated: one user agent-<host> each.")],
    out_file: Annotated[Path, typer.Option("--out", help="ACL file to write (redis.conf: aclfile).")],
    secrets_dir: Annotated[Path | None, typer.Option(help="Where the per-user password files go (0600, "
                                                          "<user>.pass; kept when they exist). Default: "
                                                          "the ACL file's directory/secrets.")] = None,
    labctl_users: Annotated[str, typer.Option(help="labctl users, comma-separated (one per operator).")] = LABCTL,
    admin: Annotated[bool, typer.Option(help="Also an 'admin' user with every right (for the operator's "
                                             "maintenance; the daemons never use it).")] = False,
) -> None:
    """Write the broker's ACL file (default user off, controller, agent-<host>, labctl, web: the web service and
    labctl's token commands) and the users'
    password files. Only SHA-256 hashes of the passwords go into the ACL file; re-running keeps the
    passwords already written (add a host: run again with it)."""
    host_list = [h.strip() for h in hosts.split(",") if h.strip()]
    ops = [u.strip() for u in labctl_users.split(",") if u.strip()]
    for u in ops:
        if not USER_NAME.fullmatch(u) or u == ADMIN or not (u == LABCTL or u.startswith(LABCTL + "-")):
            raise ConfigError("--labctl-users", u, "a labctl user is named 'labctl' or 'labctl-<name>'")
    store = SecretDir(secrets_dir or out_file.parent / "secrets")
    users = lab_users(host_list, admin=admin, labctl=ops)
    write_secret(out_file, store.render(users))
    out.print(f"ACL file {out_file} ({len(users)} users + default off); password files in {store.root}:")
    for user in users:
        out.print(f"  {user:<24} {store.file(user)}")
