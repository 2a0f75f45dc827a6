"""A module imported on first use: what a command that never needs it does not pay for.

Owns `lazy(name)`, a stand-in for `import name as alias` at a module's top: the real import
happens on the first attribute read (then the stand-in hands that attribute over, and every
later one). numpy and pyarrow take ~0.3 s to import on a quiet machine; the store's reading side
(opening a store, scanning its parts with polars) needs neither, only its writing side does.
Must not be used for modules whose import has side effects a caller relies on.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _Lazy:
    """Stands for the module `name` until an attribute of it is read."""

    __slots__ = ("_name", "_mod")

    def __init__(self, name: str) -> None:
        self._name = name
        self._mod: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr in _Lazy.__slots__:        # not set yet (a copy being built): never recurse
            raise AttributeError(attr)
        mod = self._mod
        if mod is None:
            mod = self._mod = importlib.import_module(self._name)
        return getattr(mod, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (imported)' if self._mod is not None else ''}>"


def lazy(name: str) -> Any:
    """`np = lazy("numpy")` instead of `import numpy as np`: imported when first used."""
    return _Lazy(name)
