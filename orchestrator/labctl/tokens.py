"""``labctl token``: API tokens of the web service. A token is made here (orchestrator.tokens.new_token), only its
SHA-256 is sent to the controller, and it is printed once; the commands go on the web service's stream, which
only the broker user ``web`` may write, so they need that user's URL (``--broker redis://web@HOST/0`` and its
password file)."""

from __future__ import annotations

import re
import sys
import time
from typing import Annotated

import typer

from labcontract.errors import LabError
from orchestrator.labctl.backend import backend
from orchestrator.labctl.common import command_group, fails_cleanly, out
from orchestrator.labctl.groups import HELP

token_app = command_group(help=HELP["token"], no_args_is_help=True)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise LabError(f"--name {name[:80]!r}: 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
                       "digit")


@token_app.command("create")
@fails_cleanly
def token_create(
    name: Annotated[str, typer.Option(help="Token name (who or what uses it: e.g. ci, alice).")],
    role: Annotated[str, typer.Option(help="viewer (read), engineer (+ submit, cancel, rerun...) or admin "
                                           "(+ hosts, schedules, tokens).")],
    expires_in: Annotated[str | None, typer.Option(help="Expire after this long, e.g. 30d, 12h (default: "
                                                        "never).")] = None,
) -> None:
    """Make a token and print it once (only its hash is stored: it cannot be shown again)."""
    from labcontract.units import parse_duration
    from orchestrator.tokens import ROLES

    _check_name(name)
    if role not in ROLES:
        raise LabError(f"--role {role[:40]!r}: one of {', '.join(ROLES)}")
    expires_at = None
    if expires_in is not None:
        try:
            seconds = parse_duration(expires_in)
        except ValueError as e:
            raise LabError(f"--expires-in: {e}") from None
        if seconds < 60:                # the web service's bound too: the same refusal with and without --api
            raise LabError("--expires-in: at least 60s")
        expires_at = time.time() + seconds
    token = backend().token_create(name, role, expires_at)    # (only its hash is stored, by the controller)
    print(f"token {name} ({role}) created; it is shown only now:", file=sys.stderr)
    print(token)


@token_app.command("list")
@fails_cleanly
def token_list() -> None:
    """Tokens with their role, creation, expiry and revocation (never a hash nor a token)."""
    from rich.table import Table

    def when(t: object) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"

    now = time.time()
    table = Table("token", "role", "created", "by", "expires", "revoked", "state")
    for t in backend().tokens():
        state = ("revoked" if t.revoked_at else "expired" if isinstance(t.expires_at, (int, float))
                 and t.expires_at <= now else "active")
        table.add_row(t.name, t.role, when(t.created_at), t.created_by or "-", when(t.expires_at), when(t.revoked_at),
                      state)
    out.print(table)


@token_app.command("revoke")
@fails_cleanly
def token_revoke(name: Annotated[str, typer.Argument(help="Token name.")]) -> None:
    """Revoke a token: every request with it is refused from now on."""
    _check_name(name)
    backend().token_revoke(name)
    print(f"token {name} revoked")
