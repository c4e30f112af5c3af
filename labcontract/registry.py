"""The one registry idiom of the project: named variations registered once, by the module that defines them.

Step kinds (the controller's ``orchestrator.kinds``, the agent's ``agents.kinds``), report chart kinds
(``orchestrator.htmlreport.model``), export formats (``orchestrator.export.base``), compare's output formats
(``orchestrator.compare``) and the web service's routers (``orchestrator.web.api`` / ``.pages``) are each a
:class:`Registry`: a read-only mapping from name to item, filled by ``register`` calls at import, where a name
registered twice (to another item) is a programming error and an unknown name is refused with the known ones.
A new variation is then one module plus its registration (Buildbot's worker command registry, pytest's and
Ansible's plugin loaders).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Mapping[str, T], Generic[T]):
    """Name -> item, in registration order. ``what`` names the items in errors ("step kind", "chart kind");
    ``missing`` builds the exception an unknown name raises from (name, known names) (default LookupError)."""

    def __init__(self, what: str, missing: Callable[[str, list[str]], Exception] | None = None) -> None:
        self.what = what
        self._items: dict[str, T] = {}
        self._missing = missing

    def add(self, name: str, item: T) -> T:
        """Register ``item`` as ``name``; the same item again is a no-op, another item under a taken name a
        ValueError (two modules claiming one name)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a name, got {name!r}")
        held = self._items.get(name)
        if held is not None and held is not item:
            raise ValueError(f"{self.what} {name!r} is registered twice ({type(held).__name__} and "
                             f"{type(item).__name__})")
        self._items[name] = item
        return item

    def get_or_fail(self, name: str) -> T:
        """The item of ``name``; an unknown name raises ``missing``'s exception (LookupError by default) naming the
        known ones."""
        try:
            return self._items[name]
        except KeyError:
            known = sorted(self._items)
            if self._missing is not None:
                raise self._missing(name, known) from None
            raise LookupError(f"no {self.what} {str(name)[:80]!r} (known: {', '.join(known)})") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._items)})"
