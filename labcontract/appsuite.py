"""Application suites (``kind: sysbench | pgbench | external``): their schema, validation and points.

An application suite names the workload in a section of the kind's name and keeps the DUT-level keys of a
storage suite (``devices``, ``op_modes``, ``phases.purge``, ``phases.provision``, ``retry``, ``cell_limit``)::

    suite: sysbench-oltp
    kind: sysbench
    op_modes: ["hp:20"]
    phases: {purge: true}
    sysbench: {test: oltp_read_write, tables: 8, table_size: 1000000, threads: [2, 4, 8, 16, 32], time: 300}

It has no ``profiles``, ``defaults``, ``network`` or preconditioning: each is refused with its reason, together
with every other problem of the file (the suite machinery's :class:`~labcontract.errors.Problem` list).
The parameter models and their bounds are :mod:`labcontract.apps` (the start message carries the same ones).
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from labcontract.apps import APP_KINDS, AppStart, ExternalParams, PgbenchParams, SysbenchParams
from labcontract.errors import Problem, SuiteError
from labcontract.suitebase import Retry, check_op_modes, problems_from
from labcontract.units import parse_duration

AppParams = SysbenchParams | PgbenchParams | ExternalParams
MIN_FS_BYTES = 64 << 20          # AppStart.fs_size_bytes' lower bound: the smallest filesystem an app gets
# keys of a step's cell that an external workload's parameter may not be called (they name the cell itself)
RESERVED_PARAMS = frozenset({"op_mode", "profile", "app", "phase", "threads", "clients", "round", "role", "tool",
                             "net_paths", "purge"})
_FIO_ONLY = {"profiles": "an application suite has no profiles: its workload is the `{kind}` section",
             "defaults": "fio defaults do not apply to an application suite (set the `{kind}` section's keys)",
             "network": "an application suite runs on one host's DUT, not over network paths"}
_NO_PHASES = {"precondition": "not available for an application suite: the database's own load is its "
                              "preconditioning (use phases.purge for a fresh-out-of-box start)"}


class AppPhases(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    purge: bool = False
    provision: bool = False


class AppSuiteDocument(BaseModel):
    """The YAML of an application suite, validated as a whole (every problem at once)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suite: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    kind: Literal["sysbench", "pgbench", "external"]
    description: Annotated[str, Field(max_length=4096)] = ""
    devices: Annotated[int, Field(ge=1, le=256)] = 1
    op_modes: Annotated[list[str], Field(min_length=1, max_length=91)] = ["stock"]
    cell_limit: Annotated[int, Field(ge=1, le=10_000)] = 1000
    phases: AppPhases = AppPhases()
    retry: Retry = Retry()
    repeat: Annotated[int, Field(ge=1, le=50)] = 1        # runs of every point (labcontract.suite.MAX_REPEAT)
    repeat_order: Literal["interleaved", "back_to_back"] = "interleaved"
    sysbench: SysbenchParams | None = None
    pgbench: PgbenchParams | None = None
    external: ExternalParams | None = None

    @field_validator("op_modes")
    @classmethod
    def _op_modes(cls, v: list[str]) -> list[str]:
        return check_op_modes(v)

    @field_validator("external")
    @classmethod
    def _reserved(cls, v: ExternalParams | None) -> ExternalParams | None:
        clash = sorted(set(v.params) & RESERVED_PARAMS) if v is not None else []
        if clash:
            raise ValueError(f"parameter name(s) {clash} are reserved (they name a result's cell: "
                             f"{', '.join(sorted(RESERVED_PARAMS))})")
        return v

    def params(self) -> AppParams:
        p = getattr(self, self.kind)
        assert p is not None
        return p  # type: ignore[no-any-return]


def _durations(section: Any) -> Any:
    """``time: 5m`` / ``warmup: 30s`` as in a storage suite: durations become seconds before the strict model."""
    if not isinstance(section, dict):
        return section
    out = dict(section)
    for key in ("time", "warmup"):
        if isinstance(out.get(key), str):
            with contextlib.suppress(ValueError):     # left as is: the model names it
                out[key] = parse_duration(out[key])
    return out


def raw_problems(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """What an application suite may not carry, judged on the raw mapping, and the mapping without it (so the
    rest is still validated and reported together)."""
    kind = str(data.get("kind"))
    problems: list[Problem] = []
    clean = dict(data)
    for key, why in _FIO_ONLY.items():
        if key in clean:
            problems.append(Problem(key, why.format(kind=kind)))
            clean.pop(key)
    phases = clean.get("phases")
    if isinstance(phases, dict):
        phases = dict(phases)
        for key, why in _NO_PHASES.items():
            if key in phases:
                problems.append(Problem(f"phases.{key}", why))
                phases.pop(key)
        clean["phases"] = phases
    for other in APP_KINDS:
        if other != kind and other in clean:
            problems.append(Problem(other, f"a section of kind {other}, in a suite of kind {kind}"))
            clean.pop(other)
    if kind in ("sysbench", "pgbench"):
        clean[kind] = _durations(clean.get(kind) or {})
        if clean.get("devices", 1) != 1:
            problems.append(Problem("devices", f"a {kind} suite runs one database on exactly one DUT "
                                               f"(devices: 1), got {clean.get('devices')!r}"))
            clean.pop("devices")
    elif kind == "external":
        if "external" not in clean:
            problems.append(Problem("external", "required key is missing (external: {workload: NAME, params: "
                                                "{...}, time: N}: a workload the agent's configuration declares)"))
        else:
            clean["external"] = _durations(clean["external"])
    return clean, problems


def ladder(params: AppParams) -> tuple[int, ...]:
    """The points of the suite: sysbench threads, pgbench clients; one point (0) for an external workload."""
    if isinstance(params, SysbenchParams):
        return params.threads
    if isinstance(params, PgbenchParams):
        return params.clients
    return (0,)


def point_dim(kind: str) -> str | None:
    """The cell key of a point: ``threads`` (sysbench), ``clients`` (pgbench), none (external)."""
    return {"sysbench": "threads", "pgbench": "clients"}.get(kind)


def test_name(params: AppParams) -> str:
    """The cell's ``profile``: the sysbench test, the pgbench built-in script, the external workload's name."""
    if isinstance(params, SysbenchParams):
        return params.test
    if isinstance(params, PgbenchParams):
        return params.builtin
    return params.workload


def count_app_steps(kind: str, params: AppParams, n_modes: int, purge: bool, provision: bool,
                    repeat: int = 1) -> int:
    """Steps the planner makes: per OP mode a purge (or dut_state), a prepare (not external) and a step per
    point (each ``repeat`` times); provisioning adds the host's provisioning and facts before and after."""
    per_mode = len(ladder(params)) * repeat + (kind != "external") + (1 if purge or provision else 0)
    return per_mode * n_modes + (3 if provision else 0)


def fs_size_bytes(op_mode: str, device_bytes: int | None) -> int | None:
    """An OP mode's emulated footprint on a device of ``device_bytes``: ``hp:P`` leaves (100-P)% of it to the
    filesystem (rounded down to a MiB); stock, or a device of unknown size: None (the whole device)."""
    if op_mode == "stock" or not device_bytes:
        return None
    usable = 100 - int(op_mode.split(":")[1])
    return max(MIN_FS_BYTES, device_bytes * usable // 100 >> 20 << 20)


def app_start(kind: str, params: AppParams, phase: Literal["prepare", "run"], point: int,
              fs_bytes: int | None) -> AppStart:
    """The AppStart of one step: the suite's params with the ladder narrowed to the point (a run step)."""
    if isinstance(params, SysbenchParams) and phase == "run":
        params = params.model_copy(update={"threads": (point,)})
    elif isinstance(params, PgbenchParams) and phase == "run":
        params = params.model_copy(update={"clients": (point,)})
    return AppStart.model_validate({"kind": kind, "phase": phase, "point": point, "fs_size_bytes": fs_bytes,
                                    kind: params})


def with_app_overrides(params: AppParams, runtime: int | None, scale: float | None) -> AppParams:
    """``--runtime`` sets every point's measured ``time`` (and drops the warm-up, as it drops fio's ramp);
    ``--scale`` multiplies the durations (``time`` at least 1 s, ``warmup``; unless ``--runtime`` set them) and
    the data set: sysbench's ``table_size`` (at least 100 rows) and pgbench's ``scale`` (at least 1), so that a
    built-in suite runs as a smoke test in seconds. Both are shown as overrides in every report."""
    if runtime is None and scale is None:
        return params
    update: dict[str, int] = {}
    if runtime is not None:
        update["time"] = runtime
        if not isinstance(params, ExternalParams):
            update["warmup"] = 0
    elif scale is not None:
        update["time"] = max(1, round(params.time * scale))
        if not isinstance(params, ExternalParams):
            update["warmup"] = max(0, round(params.warmup * scale))
    if scale is not None:
        if isinstance(params, SysbenchParams):
            update["table_size"] = max(100, round(params.table_size * scale))
        elif isinstance(params, PgbenchParams):
            update["scale"] = max(1, round(params.scale * scale))
    return params.model_copy(update=update)


def override_app_problems(params: AppParams, runtime: int | None, scale: float | None) -> list[Problem]:
    """Durations an override would take past the bounds of :mod:`labcontract.apps`."""
    if runtime is None and scale is None:
        return []
    where = "--scale" if runtime is None else "--runtime"
    p = with_app_overrides(params, runtime, scale)
    try:
        type(p).model_validate(p.model_dump())
    except ValidationError as e:
        return [Problem(where, f"makes {err['loc'][0]} {err['input']!r}, outside its bounds ({err['msg']})")
                for err in e.errors()]
    return []


def validate_document(data: dict[str, Any], source: str) -> AppSuiteDocument:
    """The validated document; :class:`SuiteError` with every problem of the file otherwise."""
    clean, problems = raw_problems(data)
    doc: AppSuiteDocument | None = None
    try:
        doc = AppSuiteDocument.model_validate(clean)
    except ValidationError as e:
        found = problems_from(e)
        # pydantic adds "too short" to a ladder whose every item is out of range: the items' problems say it
        problems += [p for p in found if not (p.message == "must not be empty" and any(
            q.location.startswith(p.location + "[") for q in found))]
    if doc is not None and not problems:
        steps = count_app_steps(doc.kind, doc.params(), len(doc.op_modes), doc.phases.purge, doc.phases.provision,
                                doc.repeat)
        if steps > doc.cell_limit:
            problems.append(Problem("cell_limit", f"the suite expands to {steps} steps, over the limit of "
                                                  f"{doc.cell_limit}"))
    if problems or doc is None:
        raise SuiteError(source, list(dict.fromkeys(problems)))
    return doc
