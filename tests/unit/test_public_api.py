"""The public API: every exported name resolves, and importing setpoint stays cheap."""

import subprocess
import sys

import setpoint
from tests._support.exports import exports


def test_every_exported_name_resolves() -> None:
    missing = [name for name in setpoint.__all__ if getattr(setpoint, name, None) is None]
    assert missing == []


def test_import_setpoint_loads_no_http_stack() -> None:
    code = "import sys, setpoint; print(sorted(m for m in ('aiohttp', 'pydantic', 'yaml', "
    code += "'prometheus_client', 'orjson') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == "[]"


def test_a_dict_operator_loads_neither_pydantic_nor_an_http_server() -> None:
    """An operator on dicts (Manager, a controller, apply_child, update_status) imports no
    pydantic (typed models) and no aiohttp server side (the probe/metrics servers start it).

    Each is several MiB of RSS and tens of milliseconds of start-up (issue 13)."""
    code = (
        "import sys\n"
        "from setpoint import Manager, apply_child, update_status, set_condition\n"
        "import setpoint.controller, setpoint.cache, setpoint.client.safe\n"
        "print(sorted(m for m in ('pydantic', 'aiohttp.web', 'setpoint.api.resource', "
        "'setpoint.webhook.admission_review', 'setpoint.webhook.conversion_review') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == "[]"


def test_unknown_names_raise_attribute_error() -> None:
    try:
        _ = setpoint.NoSuchThing
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("setpoint.NoSuchThing resolved")


def test_errors_show_their_public_path() -> None:
    error = setpoint.NotFound('configmaps "x" not found', code=404, reason="NotFound")
    assert repr(error) == "setpoint.NotFound('configmaps \"x\" not found')"
    assert f"{type(error).__module__}.{type(error).__qualname__}" == "setpoint.NotFound"
    assert repr(setpoint.TerminalError("no")) == "setpoint.TerminalError('no')"


def test_every_exported_error_derives_from_setpoint_error() -> None:
    """Every exception class in any setpoint module's ``__all__`` is a ``SetpointError``.

    Walked, not listed: a new package or module cannot add an error outside the root
    unnoticed (docs/architecture.md, Conventions; the tree is in ``setpoint.api.errors``).
    """
    homes: dict[type, list[str]] = {}
    for export in exports():
        obj = export.obj
        if isinstance(obj, type) and issubclass(obj, BaseException):
            homes.setdefault(obj, []).append(export.home)
    outside = sorted(
        " = ".join(places) + f" ({', '.join(base.__name__ for base in error.__mro__[1:-2])})"
        for error, places in homes.items()
        if not issubclass(error, setpoint.SetpointError)
    )
    assert outside == [], (
        "derive these from setpoint.api.errors.SetpointError (keeping their built-in base) "
        "and add them to the tree in api/errors.py's docstring: " + "; ".join(outside)
    )


def test_errors_keep_their_builtin_base() -> None:
    assert issubclass(setpoint.ConfigError, ValueError)
    assert issubclass(setpoint.DeclarationError, TypeError)
    assert issubclass(setpoint.ReadAfterWriteTimeout, TimeoutError)


def test_dir_lists_the_public_names_only() -> None:
    names = dir(setpoint)
    assert names == sorted(setpoint.__all__)
    assert not {"Any", "importlib", "TYPE_CHECKING"} & set(names)
    assert {"FinalizerResult", "MutationScopeError", "ClientError"} <= set(names)
    assert not {"Runnable", "RunnableGroup", "FieldSchema", "TypedObject"} & set(names)
