"""Every name setpoint exports: each package's and module's ``__all__``, walked once.

The name and error-root tests (``tests/unit/test_names.py``,
``tests/unit/test_public_api.py``) read the public surface from here instead of a list kept
by hand, so a new package or module is checked the day it appears.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from dataclasses import dataclass

import setpoint


@dataclass(frozen=True, slots=True)
class Export:
    """One name in one module's ``__all__`` and the object it gives."""

    module: str
    """The module whose ``__all__`` lists the name (``setpoint.cache``)."""
    name: str
    """The exported name."""
    obj: object
    """What ``getattr(module, name)`` returns."""

    @property
    def home(self) -> str:
        """``module.name``, as a reader would import it."""
        return f"{self.module}.{self.name}"


def module_names() -> list[str]:
    """Every module of the setpoint package, the facade first (no ``__main__``)."""
    walked = pkgutil.walk_packages(setpoint.__path__, "setpoint.")
    return ["setpoint", *sorted(m.name for m in walked if not m.name.endswith(".__main__"))]


@functools.cache
def exports() -> tuple[Export, ...]:
    """Every ``(module, name, object)`` of every setpoint module's ``__all__``.

    Importing every module is the point: a module that fails to import fails the caller's
    test with its own traceback. A module without ``__all__`` exports the public classes
    and functions it defines (no leading underscore), so leaving ``__all__`` out hides
    nothing from the checks.
    """
    found: list[Export] = []
    for module_name in module_names():
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:
            names = [
                name
                for name, obj in vars(module).items()
                if not name.startswith("_")
                and (inspect.isclass(obj) or inspect.isfunction(obj))
                and obj.__module__ == module_name
            ]
        for name in names:
            found.append(Export(module_name, name, getattr(module, name)))
    return tuple(found)
