"""One home for the lazy re-exports of setpoint's facade packages (PEP 562).

``setpoint``, ``setpoint.manager``, ``setpoint.testing`` and ``setpoint.webhook`` list their
public names with the module each comes from and load that module only when a name is first
used, so that ``import setpoint`` (or a CLI command) does not pay for what it never touches.
This module imports nothing but :mod:`importlib`, so using it costs the facades nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

Target = str | tuple[str, str | None]
"""Where a public name comes from: a module path (the attribute of the same name), or
``(module path, attribute)``, with attribute ``None`` for the module itself."""


def lazy_attribute(
    package: str, namespace: MutableMapping[str, Any], exports: Mapping[str, Target]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that loads each of ``exports`` on first use.

    The loaded value is stored in ``namespace`` (the package's ``globals()``), so later
    lookups do not come back here. A name not in ``exports`` raises :class:`AttributeError`
    naming the package, as Python's own lookup would.
    """

    def load(name: str) -> Any:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = (target, name) if isinstance(target, str) else target
        loaded = importlib.import_module(module)
        value = loaded if attr is None else getattr(loaded, attr)
        namespace[name] = value
        return value

    return load


def lazy_module(
    package: str, namespace: MutableMapping[str, Any], exports: Mapping[str, Target]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A facade's module ``__getattr__`` (see :func:`lazy_attribute`) and ``__dir__``.

    ``__dir__`` lists the package's ``__all__`` (read when called, so ``__all__`` may be
    defined after this call). A facade ends with::

        __getattr__, __dir__ = lazy_module("setpoint.manager", globals(), _EXPORTS)
    """

    def names() -> list[str]:
        return sorted(namespace.get("__all__", ()))

    return lazy_attribute(package, namespace, exports), names
