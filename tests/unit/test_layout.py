"""The test tree's layout rules, checked on the source so they cannot erode.

Test modules are imported by pytest with ``--import-mode=importlib`` as members of the
``tests`` package, so basenames need not be unique and nothing edits ``sys.path``: shared
helpers live in ``tests._support`` and are imported by their package path. Integration and
end-to-end tests never import unit-test modules (what they share belongs in ``_support``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TEST_TREES = [TESTS, *sorted((ROOT / "examples").glob("*/tests"))]


def python_files() -> Iterator[Path]:
    for tree in TEST_TREES:
        yield from sorted(p for p in tree.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_no_test_module_edits_sys_path() -> None:
    offenders = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in {"insert", "append", "extend"}
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "path"
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "sys"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], f"sys.path edited in {offenders}; import from tests._support instead"


def test_every_test_directory_is_a_package() -> None:
    """Module names come from packages: tests/a/test_x.py and tests/b/test_x.py can coexist."""
    missing = [
        str(d.relative_to(ROOT))
        for d in [TESTS, *sorted(TESTS.rglob("*"))]
        if d.is_dir()
        and d.name != "__pycache__"
        and any(d.glob("*.py"))
        and "golden" not in d.relative_to(TESTS).parts
        and not (d / "__init__.py").exists()
    ]
    assert missing == []


def test_integration_and_e2e_tests_do_not_import_unit_tests() -> None:
    offenders = []
    for area in ("integration", "e2e"):
        for path in sorted((TESTS / area).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for module in imported_modules(tree):
                if module == "tests.unit" or module.startswith(("tests.unit.", "test_")):
                    offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_example_operators_are_imported_by_their_package_name() -> None:
    """``import tenants`` (pytest's pythonpath), never ``examples.tenants.tenants``.

    The dotted form works only when the current directory happens to be on sys.path
    (``python -m pytest``), and it would load a second copy of the operator's modules.
    """
    offenders = []
    for path in python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for module in imported_modules(tree):
            if module == "examples" or module.startswith("examples."):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_support_modules_are_not_collected_as_tests() -> None:
    """Helpers in tests/_support hold scenarios and fakes, never test_* modules."""
    assert sorted(p.name for p in (TESTS / "_support").glob("test_*.py")) == []
    assert any((TESTS / "_support").glob("*.py"))
