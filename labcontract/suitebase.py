"""What a storage suite and an application suite share: the retry policy, the OP modes and how a validation error
becomes the problems a user reads (file, key, problem). Apart from :mod:`labcontract.suite` and
:mod:`labcontract.appsuite` so that neither imports the other for them (the suite loads the application part; the
application part no longer reaches back into the suite)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labcontract.errors import Problem

OP_MODE = re.compile(r"^(stock|hp:(\d{1,2}))\Z")


def check_op_modes(v: list[str]) -> list[str]:
    """A suite's ``op_modes``: ``stock`` or ``hp:<1-90>``, each once (a pydantic field validator's body)."""
    bad = [m for m in v if not OP_MODE.match(str(m)) or (m.startswith("hp:") and not 1 <= int(m[3:]) <= 90)]
    if bad:
        raise ValueError(f"{bad} not OP modes (use stock or hp:<percent overprovisioned, 1-90>)")
    if len(set(v)) != len(v):
        raise ValueError("an OP mode is listed twice")
    return v


RetryCause = Literal["lost", "timeout", "error"]


class Retry(BaseModel):
    """Retry policy for the suite's steps (all idempotent: purge, precondition rounds, measurements).

    ``lost``: the host went silent mid-step (the orphaned fio is stopped first, never run twice);
    ``timeout``: the step overran its deadline and was stopped; ``error``: fio exited non-zero.
    A refused or cancelled step is never retried."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: Annotated[int, Field(ge=1, le=10)] = 2
    when: tuple[RetryCause, ...] = ("lost", "timeout")
    repurge: bool = False          # purge the devices again before retrying a precondition or measurement


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "constrained-")) or "[" in part:
            continue  # pydantic's internal validator names
        else:
            out += f".{part}" if out else part
    return out


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        return f"{err['input']!r} is not one of {err['ctx']['expected']}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = {"greater_than_equal": ">=", "less_than_equal": "<=",
                 "greater_than": ">", "less_than": "<"}[kind]
        limit = next(iter(err["ctx"].values()))
        return f"{err['input']!r} is out of range (must be {bound} {limit})"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if kind == "string_pattern_mismatch":
        return f"{err['input']!r} is not a valid name (letters, digits, '.', '_', '-'; at most 64)"
    if kind == "too_short":
        return "must not be empty"
    return f"{err['msg'].lower()} (got {err['input']!r})"


def problems_from(exc: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        where = _loc(err["loc"])
        if prefix:
            where = f"{prefix}.{where}" if where and not where.startswith("[") else prefix + where
        problems.append(Problem(where, _message(dict(err))))
    return problems
