"""Find resource classes and RBAC rules in user code, given module names or file paths.

``setpoint generate`` is pointed at the operator's code the way controller-gen
is pointed at Go packages. Python has to import the modules to see the types
(so module-level code runs); each target may be:

* an importable module or package name (``myoperator.api``), packages
  including all their submodules;
* a ``.py`` file, imported under its package-qualified name when it sits in a
  package (so relative imports work), else under its file name;
* a directory: a package (with ``__init__.py``) or a folder of modules.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

from setpoint.api.errors import SetpointError
from setpoint.api.rbac import PolicyRule, declared_rbac_rules
from setpoint.api.resource import Resource

__all__ = ["LoadError", "find_rbac_rules", "find_resources", "import_targets"]


class LoadError(SetpointError):
    """A target could not be found or imported; the message names it and the cause."""


def import_targets(targets: Sequence[str], *, cwd: Path | None = None) -> list[ModuleType]:
    """Import every target (module name, file or directory) and return the modules, in order.

    The current directory is importable, as it is for ``python -m``.

    Raises:
        LoadError: naming the target that could not be found or imported.

    """
    base = (cwd or Path.cwd()).resolve()
    _ensure_on_path(base)
    modules: dict[str, ModuleType] = {}
    for target in targets:
        path = Path(target)
        if not path.is_absolute():
            path = base / path
        if path.suffix == ".py" or path.is_dir():
            if not path.exists():
                raise LoadError(f"{target}: no such file or directory")
            names = _module_names_for_path(path)
        else:
            names = [target]
        for name in names:
            for module in _import_with_submodules(name, target):
                modules.setdefault(module.__name__, module)
    return list(modules.values())


def _ensure_on_path(directory: Path) -> None:
    text = str(directory)
    if text not in sys.path:
        sys.path.insert(0, text)


def _package_root(directory: Path) -> Path:
    """The directory that must be on sys.path for ``directory`` (a package dir or not) to import."""
    root = directory
    while (root / "__init__.py").exists():
        root = root.parent
    return root


def _dotted(path: Path, root: Path) -> str:
    relative = path.relative_to(root).with_suffix("") if path.suffix else path.relative_to(root)
    parts = list(relative.parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_names_for_path(path: Path) -> list[str]:
    if path.is_file():
        root = _package_root(path.parent)
        _ensure_on_path(root)
        return [_dotted(path, root)]
    if (path / "__init__.py").exists():
        root = _package_root(path)
        _ensure_on_path(root)
        return [_dotted(path, root)]
    # A plain folder of modules (and packages).
    _ensure_on_path(path)
    names = []
    for child in sorted(path.iterdir()):
        if child.suffix == ".py" and child.stem.isidentifier():
            names.append(child.stem)
        elif child.is_dir() and (child / "__init__.py").exists():
            names.append(child.name)
    return names


def _import_with_submodules(name: str, target: str) -> Iterable[ModuleType]:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise LoadError(f"{target}: cannot import {name!r}: {exc}") from exc
    except Exception as exc:  # the user's module failed while running; say which
        raise LoadError(f"{target}: importing {name!r} failed: {exc!r}") from exc
    yield module
    search = getattr(module, "__path__", None)
    if search is None:
        return
    for info in sorted(pkgutil.walk_packages(search, prefix=f"{name}."), key=lambda i: i.name):
        try:
            yield importlib.import_module(info.name)
        except Exception as exc:
            raise LoadError(f"{target}: importing {info.name!r} failed: {exc!r}") from exc


def find_resources(modules: Iterable[ModuleType]) -> list[type[Resource]]:
    """Resource classes declared (with @resource) in these modules, in a stable order.

    Only classes defined in the given modules count, not ones they import, so
    scanning a controller module does not regenerate another package's CRDs.
    """
    modules = list(modules)
    names = {module.__name__ for module in modules}
    found: dict[type[Resource], None] = {}
    for module in modules:
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Resource)
                and value.is_declared()
                and value.__module__ in names
            ):
                found[value] = None
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def find_rbac_rules(modules: Iterable[ModuleType]) -> list[PolicyRule]:
    """RBAC rules declared with @rbac by code in these modules."""
    return declared_rbac_rules(module.__name__ for module in modules)
