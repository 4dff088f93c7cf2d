"""setpoint's optional parts (extras), and the one error for a part that is not installed.

``pip install setpoint`` installs the runtime: what an operator imports in production and
what ``setpoint run`` needs. The tools (the other CLI commands, CRD generation and
validation, migration, scaffolding, doctor, demo, dashboards, the testing kit) need the
``tools`` extra as well (``pip install 'setpoint[tools]'``; docs/packaging.md,
docs/decisions/0019). The extras' dependency lists are written once, in ``pyproject.toml``;
this module reads them from the installed distribution's metadata, so that a check here never
disagrees with what pip installs.

Like :mod:`setpoint._lazy`, this module sits beside the layers (it imports only the error
root), so that the CLI's entry point and any package can use it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from importlib import metadata

from setpoint.api.errors import SetpointError

__all__ = ["TOOLS", "ExtraNotInstalled", "missing_distributions", "require_extra"]

TOOLS = "tools"
"""The extra the tools need (``pip install 'setpoint[tools]'``)."""

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class ExtraNotInstalled(SetpointError, ImportError):
    """Something needs an optional part of setpoint (an extra) that is not installed.

    The message names what needed it, the extra, the missing distributions when they are
    known, and the ``pip install`` command that fixes it. It is an :class:`ImportError`
    too, so code that treats an optional feature's missing import as "not available" keeps
    doing so.
    """

    def __init__(self, what: str, extra: str, missing: Iterable[str] = ()) -> None:
        names = sorted(missing)
        detail = f" ({', '.join(names)} not installed)" if names else ""
        super().__init__(
            f"{what} needs setpoint's {extra!r} extra{detail}; "
            f"install it with: pip install 'setpoint[{extra}]'"
        )
        self.extra = extra
        """The extra to install."""
        self.missing = tuple(names)
        """The extra's distributions that are not installed (may be empty when unknown)."""


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _setpoint_requires() -> list[str] | None:
    try:
        return metadata.requires("setpoint") or []
    except metadata.PackageNotFoundError:
        return None


def missing_distributions(
    extra: str,
    *,
    requires: Iterable[str] | None = None,
    installed: Callable[[str], bool] = _installed,
) -> list[str]:
    """The distributions of setpoint's ``extra`` that are not installed.

    ``requires`` defaults to the installed setpoint's requirements (``Requires-Dist``);
    ``installed`` to a look-up of the installed distributions. Both are parameters so that
    tests can check the rule without uninstalling anything.

    Guarantees:
        Reads metadata only (no import of the extra's modules): cheap enough for every
        command of the CLI.

    Caveats:
        Only requirements whose whole marker is ``extra == "<extra>"`` count; one with a
        further condition (a platform) is not checked. Versions are not compared: pip
        resolved them when it installed the extra. When setpoint itself is not installed
        (run from a source tree), nothing can be known and the list is empty.

    """
    if requires is None:
        requires = _setpoint_requires()
        if requires is None:
            return []
    wanted = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    missing: list[str] = []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        name = _NAME.match(spec)
        if name is None or wanted.fullmatch(marker.strip()) is None:
            continue
        if not installed(name.group(1)):
            missing.append(name.group(1))
    return missing


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`ExtraNotInstalled` when a distribution of ``extra`` is missing.

    ``what`` names what needs the extra, as the start of a sentence (``"setpoint crd"``).

    Raises:
        ExtraNotInstalled: a distribution the extra lists is not installed.

    """
    missing = missing_distributions(extra)
    if missing:
        raise ExtraNotInstalled(what, extra, missing)
