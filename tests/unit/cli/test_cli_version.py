import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from setpoint.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


def test_version_flag_reports_the_version_written_in_pyproject(
    capsys: pytest.CaptureFixture[str],
) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"setpoint {declared}"


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        # --version needs no command at all: neither the client nor the testing kit.
        (["--version"], ("setpoint.client", "setpoint.testing", "setpoint.cli.run")),
        # One command's help loads that command's module, not the runtime or the fake.
        (["crd", "--help"], ("setpoint.testing.fake", "setpoint.controller", "setpoint.manager")),
    ],
)
def test_a_command_imports_only_what_it_needs(argv: list[str], absent: tuple[str, ...]) -> None:
    """The CLI starts with the module of the command it runs (was 2 s for --version)."""
    code = (
        "import sys\n"
        "from setpoint.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {absent!r} if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_changelog_has_a_section_for_the_current_version() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    headings = [
        line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")
    ]
    assert any(f"[{declared}]" in line for line in headings), headings
