"""Finding declarations in user code, and the ``setpoint generate crd|rbac`` commands."""

from __future__ import annotations

import argparse
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from setpoint.cli.generate import register
from setpoint.crd import LoadError, find_rbac_rules, find_resources, import_targets
from tests._support.crd_golden import GOLDEN_CONFIG, GOLDEN_DIR

API_MODULE = """
from setpoint.api.declaration import resource
from setpoint.api.resource import Model, Resource

class Spec(Model):
    size: int = 1

@resource(group="cli.setpoint.dev", version="v1")
class Box(Resource):
    spec: Spec | None = None

class Base(Resource):
    pass
"""

CONTROLLER_MODULE = """
from setpoint.api.rbac import rbac
from {package}.api import Box

@rbac.for_kind(Box, verbs=["get", "list", "watch"])
async def reconcile(request):
    pass
"""


@pytest.fixture
def isolated_imports() -> Iterator[None]:
    """Undo sys.path and sys.modules changes made by importing user code."""
    path = list(sys.path)
    modules = set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


@pytest.fixture
def project(
    tmp_path: Path, isolated_imports: None, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str]:
    """A small operator project (package <name>: api.py, controllers/widget.py); cwd is its root."""
    monkeypatch.chdir(tmp_path)
    name = f"op_{uuid.uuid4().hex[:8]}"
    pkg = tmp_path / name
    (pkg / "controllers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text(textwrap.dedent(API_MODULE))
    (pkg / "controllers" / "__init__.py").write_text("")
    (pkg / "controllers" / "widget.py").write_text(
        textwrap.dedent(CONTROLLER_MODULE.format(package=name))
    )
    return tmp_path, name


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="setpoint")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


# --------------------------------------------------------------------------- loading


def test_import_a_package_by_name_includes_submodules(project: tuple[Path, str]) -> None:
    root, name = project
    modules = import_targets([name], cwd=root)
    names = [m.__name__ for m in modules]
    assert names == [name, f"{name}.api", f"{name}.controllers", f"{name}.controllers.widget"]
    (box,) = find_resources(modules)
    assert box.__name__ == "Box"
    (rule,) = find_rbac_rules(modules)
    assert rule.resources == ("boxes",)


def test_import_a_file_inside_a_package_by_its_qualified_name(
    project: tuple[Path, str],
) -> None:
    root, name = project
    (module,) = import_targets([f"{name}/controllers/widget.py"], cwd=root)
    assert module.__name__ == f"{name}.controllers.widget"
    # Only classes defined in the scanned modules count, not ones they import.
    assert find_resources([module]) == []
    assert len(find_rbac_rules([module])) == 1


def test_import_a_package_directory(project: tuple[Path, str]) -> None:
    root, name = project
    modules = import_targets([str(root / name)], cwd=root)
    assert modules[0].__name__ == name
    assert len(find_resources(modules)) == 1


def test_import_a_plain_folder_of_modules(tmp_path: Path, isolated_imports: None) -> None:
    folder = tmp_path / "scripts"
    folder.mkdir()
    module_name = f"loose_{uuid.uuid4().hex[:8]}"
    (folder / f"{module_name}.py").write_text(textwrap.dedent(API_MODULE))
    (folder / "not-a-module.py").write_text("raise SystemExit")
    modules = import_targets([str(folder)], cwd=tmp_path)
    assert [m.__name__ for m in modules] == [module_name]


def test_missing_targets_and_failing_imports_are_load_errors(
    tmp_path: Path, isolated_imports: None
) -> None:
    with pytest.raises(LoadError, match="no such file or directory"):
        import_targets(["nothing_here.py"], cwd=tmp_path)
    with pytest.raises(LoadError, match="cannot import 'no_such_module_xyz'"):
        import_targets(["no_such_module_xyz"], cwd=tmp_path)
    broken = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{broken}.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(LoadError, match=r"importing '.*' failed: RuntimeError\('boom'\)"):
        import_targets([f"{broken}.py"], cwd=tmp_path)


# --------------------------------------------------------------------------- commands


def test_generate_crd_writes_kubebuilder_layout_and_is_idempotent(
    project: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, name = project
    out = root / "config"
    assert run(["generate", "crd", name, "--output-dir", str(out)]) == 0
    target = out / "crd" / "bases" / "cli.setpoint.dev_boxes.yaml"
    crd = yaml.safe_load(target.read_text())
    assert crd["metadata"]["name"] == "boxes.cli.setpoint.dev"
    assert "created" in capsys.readouterr().out
    before = target.read_bytes()
    assert run(["generate", "crd", name, "--output-dir", str(out)]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert target.read_bytes() == before
    assert run(["generate", "crd", name, "--output-dir", str(out), "--check"]) == 0


def test_check_fails_when_generated_files_are_stale(
    project: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, name = project
    out = root / "config"
    assert run(["generate", "rbac", name, "--output-dir", str(out), "--check"]) == 1
    captured = capsys.readouterr()
    assert "OUT OF DATE" in captured.out
    assert "run the same command without --check" in captured.err
    assert not (out / "rbac" / "role.yaml").exists()


def test_generate_rbac_writes_the_role(project: tuple[Path, str]) -> None:
    root, name = project
    out = root / "config"
    assert run(["generate", "rbac", name, "--output-dir", str(out), "--role-name", "op"]) == 0
    (role,) = yaml.safe_load_all((out / "rbac" / "role.yaml").read_text())
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == "op"
    assert role["rules"] == [
        {
            "apiGroups": ["cli.setpoint.dev"],
            "resources": ["boxes"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert run(["generate", "rbac", name, "--output-dir", str(out), "--namespace", "ns1"]) == 0
    (role,) = yaml.safe_load_all((out / "rbac" / "role.yaml").read_text())
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "ns1")


def test_generate_crd_reports_declaration_errors(
    tmp_path: Path, isolated_imports: None, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"bad_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from setpoint.api.declaration import field, resource
            from setpoint.api.resource import Model, Resource

            class Spec(Model):
                size: int = field(pattern="x")

            @resource(group="cli.setpoint.dev", version="v1")
            class Bad(Resource):
                spec: Spec
            """
        )
    )
    code = run(["generate", "crd", str(tmp_path / f"{name}.py"), "--output-dir", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "Spec.size (.spec.size): pattern applies to string fields" in err
    assert not (tmp_path / "crd").exists()


def test_generate_crd_without_resources_says_so(
    tmp_path: Path, isolated_imports: None, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"empty_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("X = 1\n")
    assert run(["generate", "crd", str(tmp_path / f"{name}.py")]) == 1
    assert "no @sp.resource classes found" in capsys.readouterr().err


def test_generate_rbac_reports_load_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["generate", "rbac", "no_such_module_xyz"]) == 1
    assert "cannot import" in capsys.readouterr().err


def test_the_golden_fixtures_regenerate_to_the_golden_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = str(GOLDEN_DIR / "crd_golden_fixtures.py")
    assert run(["generate", "crd", fixtures, "--output-dir", str(GOLDEN_CONFIG), "--check"]) == 0
    assert run(["generate", "rbac", fixtures, "--output-dir", str(GOLDEN_CONFIG), "--check"]) == 0
    assert "OUT OF DATE" not in capsys.readouterr().out
