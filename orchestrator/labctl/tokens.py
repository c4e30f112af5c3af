"""``labctl token``: API tokens of the web service. A token is made here (orchestrator.tokens.new_token), only its
SHA-256 is sent to the controller, and it is printed once; the commands go on the web service's stream, which
only the broker user ``web`` may write, so they need that user's URL (``--broker redis://web@HOST/0`` and its
password file)."""

from __future__ import annotations

import re
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from labcontract.errors import LabError
from orchestrator.labctl.common import State, checked_reply, command_group, fails_cleanly, out
from orchestrator.labctl.common import sessions_or_fail as _sessions
from orchestrator.labctl.groups import HELP

if TYPE_CHECKING:
    from orchestrator.runs.client import ControllerClient

token_app = command_group(help=HELP["token"], no_args_is_help=True)
ADMIN_ACTOR = "labctl-admin"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _client() -> ControllerClient:
    from labcontract.protocol import WEB_COMMANDS_STREAM
    from labcontract.transport import redis_client
    from orchestrator.runs.client import ControllerClient

    return ControllerClient(redis_client(State.config.broker_url), stream=WEB_COMMANDS_STREAM, actor=ADMIN_ACTOR)


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
    from orchestrator.tokens import ROLES, new_token, token_hash

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
    from orchestrator.labctl.apicmds import api_client

    if (api_ := api_client()) is not None:      # the service makes the token and stores its hash
        made = api_.token_create(name, role, None if expires_at is None else max(1, round(expires_at - time.time())))
        print(f"token {name} ({role}) created; it is shown only now:", file=sys.stderr)
        print(made["token"])
        return
    token = new_token()
    checked_reply(_client().token_create(name, role, token_hash(token), expires_at))
    print(f"token {name} ({role}) created; it is shown only now:", file=sys.stderr)
    print(token)


@token_app.command("list")
@fails_cleanly
def token_list() -> None:
    """Tokens with their role, creation, expiry and revocation (never a hash nor a token)."""
    from rich.table import Table

    from orchestrator.labctl.apicmds import api_client

    def when(t: object) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if isinstance(t, (int, float)) and t else "-"

    now = time.time()
    table = Table("token", "role", "created", "by", "expires", "revoked", "state")
    if (api_ := api_client()) is not None:
        rows = [(str(t.get("name")), str(t.get("role")), t.get("created_at"), str(t.get("created_by") or ""),
                 t.get("expires_at"), t.get("revoked_at")) for t in api_.tokens()]
    else:
        from sqlalchemy import select

        from orchestrator.store.models import ApiToken

        with _sessions()() as s:
            rows = [(t.name, t.role, t.created_at, t.created_by or "", t.expires_at, t.revoked_at)
                    for t in s.scalars(select(ApiToken).order_by(ApiToken.name))]
    for name, role, created, by, expires, revoked in rows:
        state = ("revoked" if revoked else "expired" if isinstance(expires, (int, float)) and expires <= now
                 else "active")
        table.add_row(name, role, when(created), by or "-", when(expires), when(revoked), state)
    out.print(table)


@token_app.command("revoke")
@fails_cleanly
def token_revoke(name: Annotated[str, typer.Argument(help="Token name.")]) -> None:
    """Revoke a token: every request with it is refused from now on."""
    _check_name(name)
    from orchestrator.labctl.apicmds import api_client

    if (api_ := api_client()) is not None:
        api_.token_revoke(name)
    else:
        checked_reply(_client().token_revoke(name))
    print(f"token {name} revoked")
