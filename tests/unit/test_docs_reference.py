"""The API reference generator (docs/_ext/setpoint_api.py) covers the whole public surface."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import setpoint
import setpoint.testing

EXTENSION = Path(__file__).resolve().parents[2] / "docs" / "_ext" / "setpoint_api.py"


def load_extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setpoint_api_under_test", EXTENSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_top_level_and_testing_name_has_an_entry() -> None:
    api = load_extension()
    entries = api.collect()
    covered = set()
    for entry in entries:
        covered |= {entry.canonical, *entry.aliases}
    public = {f"setpoint.{n}" for n in setpoint.__all__}
    public |= {f"setpoint.testing.{n}" for n in setpoint.testing.__all__}
    assert public - covered == set()


def test_pages_list_every_public_name(tmp_path: Path) -> None:
    api = load_extension()
    api.write_pages(api.collect(), tmp_path)
    index = (tmp_path / "index.rst").read_text()
    for name in [*setpoint.__all__[:20], "Client", "Manager"]:
        assert f"``setpoint.{name}``" in index
    for name in setpoint.testing.__all__:
        assert f"``setpoint.testing.{name}``" in index
    assert (tmp_path / "client.rst").read_text().count(".. auto") > 10
