"""Every string, list, mapping and number that crosses the wire is bounded (issue 29).

The walk: every pydantic model the protocol's modules define (commands, events, Register and the host facts, the
interlock's observations, health checks, start / cancel / report messages, live status, application results),
through its JSON schema, each field down to the leaves. A string needs a ``maxLength`` (or a pattern whose match
has a bounded length), a list a ``maxItems``, a mapping a ``maxProperties`` and bounded keys, a number both a
minimum and a maximum; a field with no type at all (``Any``) fails. A planted unbounded field makes the walk fail.

Then docs/security.md's table of bounds is read and each row checked against the constant it names, so a bound
changed in code without the doc (or the other way round) fails here."""

from __future__ import annotations

import inspect
import re
import re._parser as sre_parse
from datetime import UTC, datetime
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, TypeAdapter

from labcontract import apps, bounds, facts, live, protocol

ROOT_DOC = "docs/security.md"
MODULES = (protocol, facts, live, apps)
ROOTS: dict[str, Any] = {"event": protocol.AnyEvent, "command": protocol.AnyCommand}


def models() -> dict[str, type[BaseModel]]:
    """Every model the protocol's modules define (private helpers too), by qualified name."""
    out: dict[str, type[BaseModel]] = {}
    for mod in MODULES:
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == mod.__name__:
                out[f"{mod.__name__}.{name}"] = obj
    return out


def _bounded_pattern(pattern: str) -> bool:
    try:
        _lo, hi = sre_parse.parse(pattern).getwidth()
    except re.error:
        return False
    return hi < sre_parse.MAXREPEAT


def _number_bounded(schema: dict[str, Any]) -> bool:
    low = "minimum" in schema or "exclusiveMinimum" in schema
    high = "maximum" in schema or "exclusiveMaximum" in schema
    return low and high


def walk(schema: dict[str, Any], defs: dict[str, Any], path: str, leaves: list[str], found: list[str],
         seen: set[tuple[str, str]]) -> None:
    """Append every leaf's path to ``leaves`` and every unbounded one (with what it lacks) to ``found``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if (name, path) not in seen:
            seen.add((name, path))
            walk(defs[name], defs, path, leaves, found, seen)
        return
    subs = [s for key in ("anyOf", "oneOf", "allOf") for s in schema.get(key, [])]
    for sub in subs:
        walk(sub, defs, path, leaves, found, seen)
    kind = schema.get("type")
    if "enum" in schema or "const" in schema or kind in ("boolean", "null"):
        leaves.append(path)
        return
    if kind == "string":
        leaves.append(path)
        if "maxLength" not in schema and not ("pattern" in schema and _bounded_pattern(schema["pattern"])):
            found.append(f"{path}: a string without maxLength")
    elif kind in ("integer", "number"):
        leaves.append(path)
        if not _number_bounded(schema):
            found.append(f"{path}: a {kind} without both a minimum and a maximum")
    elif kind == "array":
        if "maxItems" not in schema:
            found.append(f"{path}: a list without maxItems")
        if isinstance(schema.get("items"), dict):
            walk(schema["items"], defs, f"{path}[]", leaves, found, seen)
        for i, item in enumerate(schema.get("prefixItems", [])):
            walk(item, defs, f"{path}[{i}]", leaves, found, seen)
    elif kind == "object":
        extra = schema.get("additionalProperties")
        if extra not in (None, False):
            if "maxProperties" not in schema:
                found.append(f"{path}: a mapping without maxProperties")
            keys = schema.get("propertyNames", {"type": "string"})
            walk({"type": "string", **keys}, defs, f"{path}{{key}}", leaves, found, seen)
            if isinstance(extra, dict):
                walk(extra, defs, f"{path}{{}}", leaves, found, seen)
            else:
                found.append(f"{path}{{}}: mapping values of any type")
        for key, sub in schema.get("properties", {}).items():
            walk(sub, defs, f"{path}.{key}", leaves, found, seen)
        keyed = schema.get("patternProperties", {})
        if keyed and "maxProperties" not in schema:
            found.append(f"{path}: a mapping without maxProperties")
        for key_pattern, sub in keyed.items():
            walk({"type": "string", "pattern": key_pattern}, defs, f"{path}{{key}}", leaves, found, seen)
            walk(sub, defs, f"{path}{{}}", leaves, found, seen)
    elif not subs:
        leaves.append(path)
        found.append(f"{path}: a value of any type")


def check(tp: Any, name: str) -> tuple[list[str], list[str]]:
    schema = TypeAdapter(tp).json_schema()
    leaves: list[str] = []
    found: list[str] = []
    walk(schema, schema.get("$defs", {}), name, leaves, found, set())
    return leaves, found


def all_fields() -> tuple[set[str], list[str]]:
    leaves: set[str] = set()
    found: list[str] = []
    for name, tp in {**ROOTS, **models()}.items():
        some, bad = check(tp, name)
        leaves.update(some)
        found += bad
    return leaves, sorted(set(found))


def test_every_field_of_every_protocol_model_is_bounded() -> None:
    leaves, found = all_fields()
    assert not found, "unbounded fields:\n" + "\n".join(found)
    assert len(models()) >= 40 and len(leaves) >= 400, (len(models()), len(leaves))
    print(f"{len(models())} models, {len(leaves)} fields checked for bounds")


class _Planted(BaseModel):
    ok: Annotated[str, Field(max_length=8)]
    text: str
    items: Annotated[list[Annotated[int, Field(ge=0, le=9)]], Field(max_length=4)]
    table: dict[str, int]
    when: float


def test_the_walk_finds_planted_unbounded_fields() -> None:
    _leaves, found = check(_Planted, "planted")
    assert sorted(found) == ["planted.table: a mapping without maxProperties",
                     "planted.table{key}: a string without maxLength",
                     "planted.table{}: a integer without both a minimum and a maximum",
                     "planted.text: a string without maxLength",
                     "planted.when: a number without both a minimum and a maximum"]


def test_facts_are_cut_or_refused_within_their_bounds() -> None:
    f = facts.HostFacts(hostname="h", cpu_model="x" * (8 << 20), os="y" * 300)
    assert len(f.cpu_model or "") == bounds.FACT_TEXT and len(f.os or "") == bounds.FACT_TEXT
    with pytest.raises(ValueError, match=r"max_length|at most"):
        facts.BlockDevice(name="sda", path="/dev/sda", size_bytes=1, serial="s" * (bounds.FACT_ID + 1))
    many = tuple(facts.BlockDevice(name=f"sd{i}", path=f"/dev/{'p' * 500}{i}", size_bytes=1, model="m" * 256,
                                   by_id=tuple(f"/dev/disk/by-id/{'x' * 480}{i}-{k}" for k in range(2)))
                 for i in range(bounds.MAX_BLOCK_DEVICES))
    with pytest.raises(ValueError, match="over the 1048576 bytes a host may register"):
        facts.HostFacts(hostname="h", block_devices=many)


# --- docs/security.md's table ---------------------------------------------------------------------------------

_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_ROW = re.compile(r"^\| (?P<what>[^|]+?) \| (?P<value>[^|]+?) \| `(?P<const>[A-Za-z_.]+)` \|$")


def doc_value(text: str) -> float:
    """``1 MiB`` -> 1048576; ``256 characters`` -> 256; ``2100-01-01`` -> its epoch seconds."""
    text = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
    m = re.fullmatch(r"([\d,]+)\s*(KiB|MiB|GiB)?(\s+[a-z ]+)?", text)
    assert m is not None, f"{ROOT_DOC}: cannot read the value {text!r}"
    return int(m.group(1).replace(",", "")) * _UNITS.get(m.group(2) or "", 1)


def doc_rows() -> list[tuple[str, float, str]]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / ROOT_DOC).read_text()
    rows = [m.groupdict() for line in text.splitlines() if (m := _ROW.match(line))]
    return [(r["what"], doc_value(r["value"]), r["const"]) for r in rows]


def test_security_doc_states_the_bounds_the_code_has() -> None:
    rows = doc_rows()
    assert len(rows) >= 10, f"{ROOT_DOC} lost its table of bounds"
    for what, value, const in rows:
        module, _, name = const.rpartition(".")
        owner = {"bounds": bounds, "protocol": protocol, "apps": apps}[module or "bounds"]
        actual = getattr(owner, name)
        assert float(actual) == value, f"{ROOT_DOC}: {what}: the doc says {value}, {const} is {actual}"
