"""Golden files: the generated CRDs and role for the fixture types must not change by accident.

A failing comparison prints a unified diff. When the change is intended,
regenerate with ``SETPOINT_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/crd/test_crd_golden.py``
and review the diff of tests/golden/crd/config in the commit.
"""

from __future__ import annotations

import difflib
import os

from setpoint.crd import (
    Manifest,
    find_rbac_rules,
    find_resources,
    generate_crds,
    generate_rbac,
    write_manifests,
)
from tests._support.crd_golden import GOLDEN_CONFIG, UPDATE_ENV, load_fixtures

FIXTURES = load_fixtures()


def _manifests() -> list[Manifest]:
    return [
        *generate_crds(find_resources([FIXTURES])),
        generate_rbac(find_rbac_rules([FIXTURES])),
    ]


def test_golden_files_cover_every_fixture_kind() -> None:
    paths = sorted(m.path for m in _manifests())
    assert paths == [
        "crd/bases/fixtures.setpoint.dev_gadgets.yaml",
        "crd/bases/fixtures.setpoint.dev_thingies.yaml",
        "crd/bases/fixtures.setpoint.dev_widgets.yaml",
        "rbac/role.yaml",
    ]


def test_generated_manifests_match_golden_files() -> None:
    manifests = _manifests()
    if os.environ.get(UPDATE_ENV) == "1":
        write_manifests(manifests, GOLDEN_CONFIG)
    problems = []
    for manifest in manifests:
        target = GOLDEN_CONFIG / manifest.path
        expected = target.read_text(encoding="utf-8") if target.exists() else ""
        actual = manifest.render()
        if actual != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"golden/{manifest.path}",
                    tofile=f"generated/{manifest.path}",
                )
            )
            problems.append(diff or f"{manifest.path}: golden file missing")
    assert not problems, (
        "generated manifests differ from the golden files; if intended, rerun with "
        f"{UPDATE_ENV}=1 and review the diff:\n" + "\n".join(problems)
    )


def test_generation_is_deterministic() -> None:
    first = [m.render() for m in _manifests()]
    second = [m.render() for m in _manifests()]
    assert first == second
