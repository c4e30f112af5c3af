"""Bounds a suite is held to before any work is done on it (issue 12, "Nothing is bounded").

* the text: at most :data:`~labcontract.suite.MAX_SUITE_BYTES`, checked before YAML parsing;
* the YAML: no aliases (``*name``; an anchors bomb of 1.3 KB expands to gigabytes), nesting at most
  :data:`~labcontract.suite.MAX_YAML_DEPTH` deep, safe tags only;
* the cells: counted from the dimension sizes (op modes x network dimensions x the product of each
  profile's sweep and ladder lists) *before* anything is expanded, against the suite's ``cell_limit``
  and the hard ceiling :data:`~labcontract.suite.MAX_CELLS`.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent
from yaml.nodes import Node


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader refusing aliases and deep nesting (while composing, before constructing)."""

    max_depth = 16

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.get_event()  # type: ignore[no-untyped-call]
            raise ComposerError(None, None, f"YAML aliases are not allowed in a suite (*{event.anchor}); "
                                            f"write the values out", event.start_mark)
        if self._depth >= self.max_depth:
            raise ComposerError(None, None, f"nested more than {self.max_depth} levels deep",
                                self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        self._depth += 1
        try:
            node: Node | None = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        return node


def load_yaml(text: str, max_depth: int) -> Any:
    """The document of ``text``; raises :class:`yaml.YAMLError` (aliases, depth, syntax) or ValueError
    (a scalar Python refuses to build, e.g. an integer of thousands of digits)."""
    loader = BoundedLoader(text)
    loader.max_depth = max_depth
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _len(value: object) -> int:
    return len(value) if isinstance(value, list) else 1


def profile_cells(entry: object) -> int:
    """Cells of one raw profile entry: the product of its sweep and ladder list lengths (1 when none)."""
    if not isinstance(entry, dict):
        return 1
    sizes: list[int] = []
    for section in ("sweep", "ladder"):
        mapping = entry.get(section)
        if isinstance(mapping, dict):
            sizes += [_len(v) for v in mapping.values()]
    return math.prod(sizes)


def raw_cell_count(data: dict[str, Any]) -> int:
    """Measured cells the raw suite mapping would expand to, computed from its dimension sizes only."""
    profiles = data.get("profiles")
    per_mode = sum(profile_cells(p) for p in profiles) if isinstance(profiles, list) else 0
    modes = _len(data.get("op_modes")) if "op_modes" in data else 1
    net = data.get("network")
    outer = 1
    if isinstance(net, dict):
        outer = (_len(net["mtu"]) if "mtu" in net else 1) * (_len(net["multipath"]) if "multipath" in net else 1)
    return modes * outer * per_mode
