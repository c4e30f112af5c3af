"""External workload declarations: what the host's administrator allows suites to run (agent
``--app-workloads FILE``).

A suite of kind ``external`` only names a declared workload and passes typed scalar parameters; the command
line comes from this file, on the host, never from the wire. The file (YAML)::

    workloads:
      - name: ioping-latency              # what suites name (letters, digits, '_', '.', '-')
        command: [/opt/lab/ioping-wrapper, --mode, latency]   # argv; the first an absolute path
        timeout_s: 900                    # the command is stopped past this
        destructive: false                # true: it writes to the DUT (the interlock checks "write")
        params:                           # the schema of what a suite may pass
          count: {type: int, min: 1, max: 100000, default: 100}
          size: {type: str, pattern: "^[0-9]+[kKmM]?$", max_length: 16, default: "4k"}
          direct: {type: bool, default: true}
          rate: {type: float, min: 0.1, required: true}

The file is validated strictly when the agent starts (:func:`load`): every problem, each naming the file,
the key and what is wrong, in one :class:`~labcontract.errors.ConfigError`; a bad file stops the agent at
its start, never later. A start message's parameters are checked against the schema (:meth:`Workloads.resolve`):
unknown, missing, of the wrong type or out of range, every problem in the refusal.

A string parameter's ``pattern`` is matched by RE2 (:func:`compiled_pattern`), in time linear in the value's
length (at most 256 characters), in the task that checks the start message: never on the monitor thread that
heartbeats.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from labcontract.apps import MAX_PARAM_CHARS, MAX_POINT_S, NAME_RE, WORKLOAD_RE, ExternalParams, ParamValue
from labcontract.errors import ConfigError

MAX_FILE_BYTES = 1 << 20
MAX_WORKLOADS = 256
MAX_ARGV = 64
MAX_ARG = 4096
MAX_STR_PARAM = MAX_PARAM_CHARS        # labcontract.apps.ParamValue's bound on a string value

Number = Annotated[float, Field(allow_inf_nan=False)]


class ParamSchema(BaseModel):
    """One parameter a suite may pass."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["int", "float", "str", "bool"]
    required: bool = False
    default: ParamValue | None = None
    min: Number | int | None = None
    max: Number | int | None = None
    pattern: Annotated[str, Field(max_length=512)] | None = None
    max_length: Annotated[int, Field(ge=1, le=MAX_STR_PARAM)] | None = None
    description: Annotated[str, Field(max_length=1024)] = ""

    @model_validator(mode="after")
    def _consistent(self) -> ParamSchema:
        numeric = self.type in ("int", "float")
        if not numeric and (self.min is not None or self.max is not None):
            raise ValueError(f"min / max apply to int and float parameters, not {self.type}")
        if self.type != "str" and (self.pattern is not None or self.max_length is not None):
            raise ValueError(f"pattern / max_length apply to str parameters, not {self.type}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.pattern is not None:
            compiled_pattern(self.pattern)     # ValueError naming what RE2 cannot take
        if self.required and self.default is not None:
            raise ValueError("a required parameter has no default")
        if self.default is not None:
            problem = check_value(self, self.default)
            if problem:
                raise ValueError(f"default {self.default!r}: {problem}")
        return self


@functools.lru_cache(maxsize=1024)
def compiled_pattern(pattern: str) -> Any:
    """A declared parameter pattern, compiled by RE2: matching takes time linear in the value's length whatever the
    pattern (Python's ``re`` backtracks: ``^(a+)+$`` against 32 'a' and a '!' held an agent at full CPU for minutes,
    its heartbeats stopped). What RE2 cannot run without backtracking (back-references, look-around) is refused
    when the agent starts (ValueError with RE2's reason)."""
    import re2

    try:
        re.compile(pattern)                # syntax only: compiling never backtracks
    except re.error as e:
        raise ValueError(f"pattern {pattern!r} is not a regular expression: {e}") from None
    options = re2.Options()
    options.log_errors = False           # the reason goes into the ValueError, not to stderr
    try:
        return re2.compile(pattern, options=options)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"pattern {pattern!r} cannot be matched without backtracking (RE2: {why}); use a pattern "
                         "without back-references or look-around") from None


def check_value(schema: ParamSchema, value: Any) -> str:
    """What is wrong with ``value`` for ``schema`` ("" when nothing)."""
    if schema.type == "bool":
        return "" if isinstance(value, bool) else f"expected a bool, got {type(value).__name__}"
    if schema.type == "str":
        if not isinstance(value, str):
            return f"expected a str, got {type(value).__name__}"
        if schema.max_length is not None and len(value) > schema.max_length:
            return f"longer than {schema.max_length} characters"
        if schema.pattern is not None and compiled_pattern(schema.pattern).fullmatch(value) is None:
            return f"does not match {schema.pattern!r}"
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected {'an int' if schema.type == 'int' else 'a number'}, got {type(value).__name__}"
    if schema.type == "int" and not isinstance(value, int):
        return f"expected an int, got {value!r}"
    if schema.min is not None and value < schema.min:
        return f"{value} is below the minimum {schema.min}"
    if schema.max is not None and value > schema.max:
        return f"{value} is above the maximum {schema.max}"
    return ""


class Workload(BaseModel):
    """One declared external workload."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=WORKLOAD_RE.pattern)]
    command: Annotated[tuple[Annotated[str, Field(min_length=1, max_length=MAX_ARG, pattern=r"^[^\x00]*$")], ...],
                       Field(min_length=1, max_length=MAX_ARGV, strict=False)]
    timeout_s: Annotated[int, Field(ge=1, le=MAX_POINT_S)]
    destructive: bool
    params: Annotated[dict[Annotated[str, Field(pattern=NAME_RE.pattern)], ParamSchema], Field(max_length=64)] = {}
    description: Annotated[str, Field(max_length=1024)] = ""

    @model_validator(mode="after")
    def _command(self) -> Workload:
        if not os.path.isabs(self.command[0]):
            raise ValueError(f"command: the first item must be an absolute path (got {self.command[0]!r})")
        return self

    def spec(self) -> dict[str, Any]:
        """Its part of ``app-spec.json`` (``external``)."""
        return {"name": self.name, "command": list(self.command), "timeout_s": self.timeout_s,
                "destructive": self.destructive}


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    workloads: Annotated[list[Workload], Field(max_length=MAX_WORKLOADS)]


class Workloads:
    """The declared workloads of a host (empty: none declared)."""

    def __init__(self, workloads: Mapping[str, Workload] | None = None, source: str = "") -> None:
        self.by_name: dict[str, Workload] = dict(workloads or {})
        self.source = source

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_name))

    def facts(self) -> list[dict[str, Any]]:
        """What the host facts may carry of the declarations (the controller checks suites against them): name,
        timeout, destructive and the parameter schema, never the command (a host-local path)."""
        return [{"name": w.name, "timeout_s": w.timeout_s, "destructive": w.destructive,
                 "description": w.description,
                 "params": {k: v.model_dump(exclude_defaults=True) for k, v in sorted(w.params.items())}}
                for _n, w in sorted(self.by_name.items())]

    def resolve(self, ext: ExternalParams) -> tuple[Workload | None, dict[str, Any], list[str]]:
        """The declaration ``ext`` names, its parameters checked against the schema with the defaults filled
        in, and every problem (the declaration is None, or the problem list non-empty: refused)."""
        decl = self.by_name.get(ext.workload)
        if decl is None:
            hint = ", ".join(self.names) or "none; agent --app-workloads FILE"
            return None, {}, [f"external workload {ext.workload!r} is not declared on this host (declared: {hint})"]
        problems: list[str] = []
        values: dict[str, Any] = {}
        for key in sorted(set(ext.params) - set(decl.params)):
            problems.append(f"parameter {key!r} is unknown to workload {decl.name} "
                            f"(its parameters: {', '.join(sorted(decl.params)) or 'none'})")
        for key, schema in sorted(decl.params.items()):
            if key in ext.params:
                value = ext.params[key]
                if schema.type == "float" and isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
                problem = check_value(schema, value)
                if problem:
                    problems.append(f"parameter {key!r} of workload {decl.name}: {problem}")
                else:
                    values[key] = value
            elif schema.required:
                problems.append(f"parameter {key!r} of workload {decl.name} is required")
            elif schema.default is not None:
                values[key] = schema.default
        return decl, values, problems


def _where(loc: tuple[int | str, ...], data: Any) -> str:
    """``workloads[1] (name).command`` from a pydantic error location."""
    out = ""
    node = data
    for item in loc:
        if isinstance(item, int):
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
            name = node.get("name") if isinstance(node, dict) else None
            out += f"[{item}]" + (f" ({name})" if isinstance(name, str) else "")
        else:
            out += ("." if out else "") + str(item)
            node = node.get(item) if isinstance(node, dict) else None
    return out or "(top)"


def parse(text: str, source: str) -> Workloads:
    """Parse and validate a declarations file's text; ConfigError naming ``source`` with every problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("--app-workloads", source, f"not YAML: {e}") from None
    if data is None:
        data = {"workloads": []}
    try:
        parsed = _File.model_validate(data)
    except ValidationError as e:
        problems = [f"{_where(tuple(err['loc']), data)}: {err['msg']}" for err in e.errors()]
        raise ConfigError("--app-workloads", source, "; ".join(problems)) from None
    names = [w.name for w in parsed.workloads]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError("--app-workloads", source, f"workloads: declared twice: {', '.join(twice)}")
    return Workloads({w.name: w for w in parsed.workloads}, source)


def load(path: Path, *, check_commands: bool = True) -> Workloads:
    """Read and validate the declarations file at agent start. ``check_commands``: each command's first item
    must be an executable file on this host (problems reported with the others)."""
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError("--app-workloads", source, f"{size} bytes, over the {MAX_FILE_BYTES} bytes limit")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("--app-workloads", source, f"cannot read: {e}") from None
    out = parse(text, source)
    if check_commands:
        problems = [f"workloads ({w.name}).command: {w.command[0]} is not an executable file"
                    for w in out.by_name.values()
                    if not (os.path.isfile(w.command[0]) and os.access(w.command[0], os.X_OK))]
        if problems:
            raise ConfigError("--app-workloads", source, "; ".join(problems))
    return out
