"""The suite's own layout: test directories are not packages (pytest's default import mode, ``pythonpath``
"."), so two test modules of one base name in different tiers fail the whole collection ("import file
mismatch") — and only when both are collected, as `make test` does. Caught here, by name, at once."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_base_name_of_its_own() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a base name (rename one): {clashes}"
