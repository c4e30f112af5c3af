"""Hypothesis strategies from the JSON schemas pydantic writes for the protocol's models: every value within the
bounds the schema declares (lengths, patterns, ranges, item counts). Covers the subset those schemas use:
``$ref``/``$defs``, ``anyOf``, ``const``/``enum``, string (``pattern``, ``minLength``, ``maxLength``), integer and
number (inclusive and exclusive bounds), boolean, null, array (``items``, ``prefixItems``, item counts) and
object (``properties``, ``required``, ``patternProperties``, ``additionalProperties``, ``maxProperties``).

(hypothesis-jsonschema does this in general, but its last release does not run with this Hypothesis.)"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

MAX_TEXT = 64            # strings and collections are drawn up to this size unless the schema bounds them lower


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    return _strategy(schema, schema.get("$defs", {}))


def _strategy(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: _strategy(defs[name], defs))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        return st.one_of([_strategy(s, defs) for s in schema.get("anyOf", schema.get("oneOf", []))])
    kind = schema.get("type")
    if kind == "string":
        return _string(schema)
    if kind == "integer":
        low = schema.get("minimum", schema["exclusiveMinimum"] + 1 if "exclusiveMinimum" in schema else None)
        high = schema.get("maximum", schema["exclusiveMaximum"] - 1 if "exclusiveMaximum" in schema else None)
        return st.integers(low, high)
    if kind == "number":
        return st.floats(schema.get("minimum", schema.get("exclusiveMinimum")),
                         schema.get("maximum", schema.get("exclusiveMaximum")),
                         exclude_min="exclusiveMinimum" in schema, exclude_max="exclusiveMaximum" in schema,
                         allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return _array(schema, defs)
    if kind == "object":
        return _object(schema, defs)
    return st.none() | st.booleans() | st.integers() | st.text(max_size=MAX_TEXT)


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    low, high = schema.get("minLength", 0), min(schema.get("maxLength", MAX_TEXT), MAX_TEXT)
    if "pattern" in schema:
        text = st.from_regex(schema["pattern"], fullmatch=True)
        return text.filter(lambda s: low <= len(s) <= schema.get("maxLength", len(s)))
    return st.text(min_size=low, max_size=max(low, high))


def _array(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[list[Any]]:
    low, high = schema.get("minItems", 0), min(schema.get("maxItems", 8), 8)
    if "prefixItems" in schema:
        return st.tuples(*(_strategy(s, defs) for s in schema["prefixItems"])).map(list)
    return st.lists(_strategy(schema.get("items", {}), defs), min_size=low, max_size=max(low, high))


def _object(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    fixed = st.fixed_dictionaries({k: _strategy(v, defs) for k, v in props.items() if k in required},
                                  optional={k: _strategy(v, defs) for k, v in props.items() if k not in required})
    keyed = schema.get("patternProperties") or {}
    extra = schema.get("additionalProperties")
    most = min(schema.get("maxProperties", 4), 4)
    if keyed:
        pattern, values = next(iter(keyed.items()))
        more = st.dictionaries(st.from_regex(pattern, fullmatch=True), _strategy(values, defs), max_size=most)
    elif isinstance(extra, dict) and not props:
        more = st.dictionaries(_string(schema.get("propertyNames", {"type": "string"})), _strategy(extra, defs),
                               max_size=most)
    else:
        return fixed
    return st.builds(lambda a, b: {**b, **a}, fixed, more)
