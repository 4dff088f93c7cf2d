"""The runtime apart from the tools (docs/packaging.md, docs/decisions/0019).

``pip install setpoint`` carries only what the runtime needs; the tools' own dependencies
come with the ``tools`` extra, and a tool run without it says which extra to install, in
one line, never with a traceback. The import-linter contract ``runtime`` keeps the runtime's
imports apart; the release check installs the runtime alone and runs an operator with it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from setpoint._extras import ExtraNotInstalled, missing_distributions

ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _names(requirements: object) -> set[str]:
    assert isinstance(requirements, list)
    return {
        str(r).split(";")[0].split("[")[0].split("<")[0].split(">")[0].strip() for r in requirements
    }


def test_the_runtime_does_not_depend_on_the_tools_dependencies() -> None:
    """google-re2 is for CRD pattern checks (a tool): in the tools extra, not the runtime."""
    project = _project()
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    assert "google-re2" not in _names(project["dependencies"])
    assert "google-re2" in _names(extras["tools"])


@pytest.mark.parametrize("extra", ["testing", "dev"])
def test_the_testing_kit_and_the_repository_install_the_tools(extra: str) -> None:
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert "setpoint[tools]" in extras[extra]


def test_missing_distributions_reads_the_extras_requirements() -> None:
    requires = [
        "orjson<4,>=3.10",
        'google-re2<2,>=1.1; extra == "tools"',
        "other-tool>=1 ; extra == 'tools'",
        'pytest<10,>=8.2; extra == "testing"',
        'setpoint[tools]; extra == "testing"',
    ]
    installed = {"orjson", "pytest", "setpoint", "other-tool"}
    assert missing_distributions("tools", requires=requires, installed=installed.__contains__) == [
        "google-re2"
    ]
    assert (
        missing_distributions("testing", requires=requires, installed=installed.__contains__) == []
    )
    everything = {"google-re2", *installed}
    assert (
        missing_distributions("tools", requires=requires, installed=everything.__contains__) == []
    )


def test_the_error_names_what_needed_the_extra_and_the_command_that_fixes_it() -> None:
    error = ExtraNotInstalled("setpoint crd", "tools", ["google-re2"])
    assert str(error) == (
        "setpoint crd needs setpoint's 'tools' extra (google-re2 not installed); "
        "install it with: pip install 'setpoint[tools]'"
    )
    assert isinstance(error, ImportError)
    assert error.missing == ("google-re2",)


def _run(code: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = None
    if pythonpath is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_a_tool_command_without_the_tools_extra_says_to_install_it(tmp_path: Path) -> None:
    """The installed metadata says a distribution of the extra is missing: one line, exit 1.

    A ``setpoint`` distribution earlier on ``sys.path`` stands for an install whose tools
    extra is incomplete (its ``Requires-Dist`` names a distribution that is not installed);
    the package itself still comes from the checkout.
    """
    info = tmp_path / "meta" / "setpoint-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: setpoint\nVersion: 0.1.0\n"
        'Requires-Dist: orjson\nRequires-Dist: setpoint-no-such-tool; extra == "tools"\n'
    )
    done = _run(
        """
        import sys
        from setpoint.cli.main import main
        sys.exit(main(["crd", "diff", "old.yaml", "new.yaml"]))
        """,
        cwd=tmp_path,
        pythonpath=tmp_path / "meta",
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "setpoint: error: setpoint crd needs setpoint's 'tools' extra "
        "(setpoint-no-such-tool not installed); install it with: pip install 'setpoint[tools]'"
    )


def test_run_needs_no_tools(tmp_path: Path) -> None:
    """``setpoint run`` is the runtime's command: the tools extra is never asked for."""
    info = tmp_path / "meta" / "setpoint-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: setpoint\nVersion: 0.1.0\n"
        'Requires-Dist: setpoint-no-such-tool; extra == "tools"\n'
    )
    done = _run(
        """
        from setpoint.cli.main import main
        try:
            main(["run", "--help"])
        except SystemExit as exit:
            print("exit", exit.code)
        """,
        cwd=tmp_path,
        pythonpath=tmp_path / "meta",
    )
    assert done.returncode == 0, done.stderr
    assert "exit 0" in done.stdout
    assert "tools" not in done.stderr


CRD_WITH_PATTERN = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              name: {type: string, pattern: '^[a-z]+$'}
"""


def test_a_pattern_check_without_re2_says_to_install_the_tools_extra(tmp_path: Path) -> None:
    """RE2 missing (the runtime alone): the CLI prints one line naming the extra, no traceback.

    ``sys.modules["re2"] = None`` makes ``import re2`` fail as it does where google-re2 is
    not installed.
    """
    (tmp_path / "crd.yaml").write_text(CRD_WITH_PATTERN)
    done = _run(
        """
        import sys
        sys.modules["re2"] = None
        from setpoint.crd.patterns import compile_pattern
        try:
            compile_pattern("^[a-z]+$")
        except ImportError as exc:
            print(type(exc).__name__, exc)
        from setpoint.cli.main import main
        sys.exit(main(["crd", "migrate", "crd.yaml"]))
        """,
        cwd=tmp_path,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("ExtraNotInstalled ")
    assert "pip install 'setpoint[tools]'" in done.stdout
    assert "pip install 'setpoint[tools]'" in done.stderr.strip().splitlines()[-1]


def _runtime_contract() -> tuple[set[str], set[str]]:
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    section = parser["importlinter:contract:runtime"]
    return set(section["source_modules"].split()), set(section["forbidden_modules"].split())


def test_every_cli_module_is_runtime_or_forbidden_to_the_runtime() -> None:
    """A new tool command's module joins the contract's forbidden list, or this fails.

    The contract names the CLI's tool modules one by one (``setpoint.cli.run`` is runtime, so
    the package cannot be forbidden whole); the runtime's commands are ``RUNTIME_COMMANDS``.
    """
    from setpoint.cli.main import COMMANDS, RUNTIME_COMMANDS

    sources, forbidden = _runtime_contract()
    runtime = {COMMANDS[command] for command in RUNTIME_COMMANDS} | {"setpoint.cli.main"}
    assert runtime <= sources
    cli = ROOT / "src" / "setpoint" / "cli"
    modules = {f"setpoint.cli.{p.stem}" for p in cli.glob("*.py") if p.stem != "__init__"}
    modules |= {f"setpoint.cli.{p.parent.name}" for p in cli.glob("*/__init__.py")}
    modules |= {module for command, module in COMMANDS.items() if command not in RUNTIME_COMMANDS}
    assert sorted(modules - runtime - forbidden) == []
