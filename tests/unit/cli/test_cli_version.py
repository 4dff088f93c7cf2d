import tomllib
from pathlib import Path

import pytest

from setpoint.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


def test_version_flag_reports_the_version_written_in_pyproject(
    capsys: pytest.CaptureFixture[str],
) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"setpoint {declared}"


def test_changelog_has_a_section_for_the_current_version() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    headings = [
        line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")
    ]
    assert any(f"[{declared}]" in line for line in headings), headings
