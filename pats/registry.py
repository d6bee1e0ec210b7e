"""Registries by name for the extension points another package may add to (environments, by entry
point: pats.spec.environments); an unknown name is answered with the known ones. Judge, reviser and
backend kinds are the spec's closed unions, found in plain dicts (pats.build, pats.engine.run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from pats.errors import PrerequisiteError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str):
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items and self._items[name] is not item:
                raise ValueError(f"{self.what} '{name}' is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise PrerequisiteError(f"no {self.what} named '{name}'; known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._items)


ENVIRONMENTS: Registry[Callable] = Registry("environment")
"""environment kind -> factory(section) -> Env; built-ins in pats.envs, others by entry point."""
