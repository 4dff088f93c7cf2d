"""The public API: every exported name resolves, and importing setpoint stays cheap."""

import subprocess
import sys

import setpoint


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


def test_unknown_names_raise_attribute_error() -> None:
    try:
        _ = setpoint.NoSuchThing
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("setpoint.NoSuchThing resolved")
