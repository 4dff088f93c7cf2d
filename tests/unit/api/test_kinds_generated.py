"""The generated built-in kinds are what scripts/gen_kinds.py makes of the checked-in snapshot.

Decision 0032: the modules under ``src/setpoint/api/kinds/`` are generated from
``scripts/kinds_openapi.json`` (the plane's OpenAPI v3 documents, trimmed) and checked in;
an edit by hand, or a generator change not run, fails here. The checks ``sp.Model`` skips at
class creation for generated classes (JSON names that round-trip) run here, once.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.kinds._model import KindModel, KindObject
from setpoint.api.resource import _json_name_problems

ROOT = Path(__file__).resolve().parents[3]
CONNECT = frozenset({"attach", "exec", "portforward", "proxy"})


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_kinds", ROOT / "scripts" / "gen_kinds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_kinds", module)
    spec.loader.exec_module(module)
    return module


def _modules() -> list[ModuleType]:
    """Every generated class's module (``setpoint.api.kinds.core_v1._pod_spec``, ...)."""
    gen = _generator()
    names = [path[: -len(".py")].replace("/", ".") for path in gen.generated_files()]
    return [importlib.import_module(f"setpoint.api.kinds.{name}") for name in sorted(names)]


def _classes() -> list[type[KindModel]]:
    return [
        value
        for module in _modules()
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, KindModel)
        and value.__module__ == module.__name__
    ]


def test_the_checked_in_modules_are_what_the_snapshot_generates() -> None:
    gen = _generator()
    data: dict[str, Any] = json.loads(gen.SNAPSHOT.read_text())
    expected = gen.generate(data)
    on_disk = gen.generated_files()
    assert sorted(set(on_disk) - set(expected)) == []  # generated files no longer generated
    stale = sorted(name for name, source in expected.items() if on_disk.get(name) != source)
    assert stale == [], f"run python scripts/gen_kinds.py; out of date: {stale}"


def test_each_class_is_loaded_when_first_used() -> None:
    code = (
        "import sys; from setpoint.api.kinds import core_v1; core_v1.Namespace; "
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
        "if m.startswith('setpoint.api.kinds.core_v1.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == [
        "['_namespace',",
        "'_namespace_condition',",
        "'_namespace_spec',",
        "'_namespace_status']",
    ]


def test_the_lazy_modules_listed_are_the_generated_group_versions() -> None:
    gen = _generator()
    generated = {gen._module_of_gv(gv) for gv in gen.GROUP_VERSIONS} | {"meta_v1"}
    assert set(kinds.TYPED_MODULES) == generated


def test_every_generated_field_has_a_json_name_that_round_trips() -> None:
    classes = _classes()
    assert len(classes) > 300
    problems = []
    for cls in classes:
        cls.model_rebuild(force=True)
        problems += _json_name_problems(cls)
    assert problems == []


def test_the_generated_resource_table_agrees_with_builtin_resources() -> None:
    compared = 0
    for cls in _classes():
        if not issubclass(cls, KindObject) or cls.resource is None:
            continue
        builtin = kinds.BUILTIN_RESOURCES.get(cls.gvk)
        if builtin is None:
            continue
        compared += 1
        info = cls.resource_info()
        assert (info.plural, info.namespaced, info.singular, info.short_names) == (
            builtin.plural,
            builtin.namespaced,
            builtin.singular,
            builtin.short_names,
        ), cls.gvk
        # The paths also give a Pod's connect subresources, which the table leaves out.
        assert info.subresources - builtin.subresources <= CONNECT, cls.gvk
        assert builtin.subresources <= info.subresources, cls.gvk
    assert compared >= 12  # ConfigMap ... NetworkPolicy: every constant of a generated group


@pytest.mark.parametrize(
    ("json_name", "python_name"),
    [
        ("podIPs", "pod_ips"),
        ("hostIPC", "host_ipc"),
        ("targetCPUUtilizationPercentage", "target_cpu_utilization_percentage"),
        ("setHostnameAsFQDN", "set_hostname_as_fqdn"),
        ("continue", "continue_"),
        ("readOnlyRootFilesystem", "read_only_root_filesystem"),
    ],
)
def test_python_names_read_as_the_json_names_do(json_name: str, python_name: str) -> None:
    assert _generator().python_name(json_name) == python_name
