"""scripts/test_pythons.py (``make test-pythons``): finding interpreters, reading pip's report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_pythons.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setpoint_test_pythons", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def fake_python(root: Path, name: str) -> Path:
    python = root / "versions" / name / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text("")
    return python


def test_the_newest_pyenv_patch_release_is_chosen(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3.12.10 over 3.12.9 (numbers, not text); 3.1 is not 3.12; a dev build is skipped."""
    for name in ("3.12.9", "3.12.10", "3.1.5", "3.12-dev", "3.13.0"):
        fake_python(tmp_path, name)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    assert script.find_interpreter("3.12") == tmp_path / "versions/3.12.10/bin/python3"
    assert script.find_interpreter("3.1") == tmp_path / "versions/3.1.5/bin/python3"


def test_a_version_the_machine_lacks_is_none(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert script.find_interpreter("3.99") is None


def test_packages_pip_built_from_source_are_named(script: ModuleType, tmp_path: Path) -> None:
    """Only sdists count: wheels (any tag) and the checkout itself (a direct URL) do not."""
    report = tmp_path / "report.json"
    install = [
        {
            "download_info": {"url": "file:///home/user/setpoint"},
            "is_direct": True,
            "metadata": {"name": "setpoint", "version": "0.1.0"},
        },
        {
            "download_info": {"url": "https://files/orjson-3.11-cp313-cp313-linux.whl"},
            "is_direct": False,
            "metadata": {"name": "orjson", "version": "3.11"},
        },
        {
            "download_info": {"url": "https://files/google_re2-1.1.tar.gz"},
            "is_direct": False,
            "metadata": {"name": "google-re2", "version": "1.1"},
        },
    ]
    report.write_text(json.dumps({"install": install}))
    assert script._sdists(report) == ["google-re2 1.1"]
    assert script._sdists(tmp_path / "missing.json") == []


def test_the_table_says_which_versions_ran(script: ModuleType) -> None:
    ran = script.PythonResult(
        version="3.13",
        full_version="3.13.0",
        status="pass",
        passed=3015,
        test_seconds=251,
        install_seconds=78,
    )
    absent = script.PythonResult(version="3.14")
    lines = script.table([ran, absent]).splitlines()
    assert lines[2] == "| 3.13.0 | pass | 3015 | 0 | 0 | 4 min 11 s | 1 min 18 s | none |"
    assert lines[3].startswith("| 3.14 | not installed | 0 |")


def test_a_version_that_is_not_3_x_is_a_usage_error(
    script: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--versions", "python3.12"])
    assert exit_info.value.code == 2
    assert "give a Python version as 3.X" in capsys.readouterr().err
