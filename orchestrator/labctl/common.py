"""What every ``labctl`` command module shares: the console, the lab config chosen by the global
options, clean failure, and store sessions."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from labcontract.errors import LabError
from orchestrator.config import LabConfig

out = Console(width=None if sys.stdout.isatty() else 200)
F = TypeVar("F", bound=Callable[..., Any])

SUITE_HELP = ("Suite YAML file, or the name of a built-in suite (labctl suite list). A bare name such as demo "
              "is the built-in suite even when a file or folder of that name is here: write ./demo for the file.")


def fail(message: str) -> None:
    """Errors go to stderr unwrapped: first line the reason, then one line per problem."""
    print(f"error: {message}", file=sys.stderr)


class State:
    config: LabConfig = LabConfig()


def fails_cleanly(fn: F) -> F:
    """Any LabError ends the command with exit 1 and its reason (every problem, for input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LabError as e:
            fail(str(e))
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def checked_reply(reply: Any) -> Any:
    """The controller's reply to a command; LabError when it did not answer or refused (its reasons)."""
    if reply is None:
        raise LabError("the controller did not answer; is it running?")
    if not reply.ok:
        raise LabError("; ".join(reply.errors))
    return reply


def reply_or_fail(reply: Any, source: str) -> None:
    """:func:`checked_reply`, a refusal raised as a SubmissionError naming ``source`` with every reason."""
    from labcontract.errors import Problem, SubmissionError

    if reply is not None and not reply.ok:
        raise SubmissionError(source, [Problem("", e) for e in reply.errors])
    checked_reply(reply)


def sessions_or_fail(required: bool = True) -> Any:
    from orchestrator.store.db import make_engine, require_schema, sessions

    engine = make_engine(State.config.db_url)
    if required:
        require_schema(engine)
    return sessions(engine)


