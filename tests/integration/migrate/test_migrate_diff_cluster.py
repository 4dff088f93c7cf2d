"""`setpoint crd diff --against-cluster` and kube:// inputs on a real API server."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.cli.main import main
from setpoint.client import Client
from setpoint.client.errors import NotFound
from setpoint.migrate.dryrun import objects_rejected_by
from setpoint.migrate.install import apply_crd
from setpoint.testing.waits import eventually

GROUP = "dryrun.migrate.setpoint.dev"
KIND = GroupVersionKind(GROUP, "v1", "Knob")


def knob_crd(spec_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"knobs.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": "Knob", "plural": "knobs"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": spec_schema,
                                "status": {
                                    "type": "object",
                                    "properties": {"level": {"type": "integer"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


OLD_SPEC = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "s": {"type": "string", "maxLength": 100}},
}
NEW_SPEC = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "maximum": 5},
        "s": {"type": "string", "maxLength": 3},
    },
    "x-kubernetes-validations": [{"rule": "self.a != 3", "message": "three is not allowed"}],
}


@pytest.fixture
async def knobs(k8s: Client, namespace: str) -> Any:
    crd = await apply_crd(k8s, knob_crd(OLD_SPEC))
    for name, spec in {
        "fine": {"a": 1, "s": "ok"},
        "too-big": {"a": 10, "s": "ok"},
        "too-long": {"a": 1, "s": "longer"},
        "three": {"a": 3},
    }.items():
        await k8s.create(
            {
                "apiVersion": KIND.api_version,
                "kind": "Knob",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
        )
    yield crd
    with contextlib.suppress(NotFound):
        await k8s.delete(kinds.CustomResourceDefinition, crd["metadata"]["name"])


async def test_against_cluster_lists_the_objects_the_new_schema_rejects(
    k8s: Client, namespace: str, knobs: dict[str, Any]
) -> None:
    """Objects breaking a tightened bound, length or CEL rule are listed; the rest pass.

    The check runs in a temporary shadow CRD, which is gone afterwards; the
    live CRD and its objects are untouched.
    """
    report = await objects_rejected_by(k8s, knob_crd(NEW_SPEC))
    assert report.checked == 4
    found = {r.name: r.reasons for r in report.rejections}
    assert set(found) == {"too-big", "too-long", "three"}
    assert any("spec.a" in reason and "5" in reason for reason in found["too-big"])
    assert any("spec.s" in reason for reason in found["too-long"])
    assert any("three is not allowed" in reason for reason in found["three"])
    assert all(r.namespace == namespace and r.version == "v1" for r in report.rejections)

    async def shadows_gone() -> bool:
        crds = await k8s.list(kinds.CustomResourceDefinition)
        return not [c for c in crds if "dryrun-" in c["metadata"]["name"]]

    await eventually(shadows_gone, timeout=30, description="the shadow CRD deleted")
    live = await k8s.get(kinds.CustomResourceDefinition, knobs["metadata"]["name"])
    assert live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] == (
        OLD_SPEC
    )


@pytest.mark.usefixtures("knobs")
async def test_cli_diff_against_a_live_crd(
    namespace: str,
    kubeconfig_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`crd diff kube://NAME NEW --against-cluster` prints the findings and the rejected objects."""
    new_file = tmp_path / "new.yaml"
    new_file.write_text(yaml.safe_dump(knob_crd(copy.deepcopy(NEW_SPEC))))
    argv = [
        "crd",
        "diff",
        f"kube://knobs.{GROUP}",
        str(new_file),
        "--against-cluster",
        "--kubeconfig",
        str(kubeconfig_path),
    ]
    code = await asyncio.to_thread(main, argv)
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"ERROR [maximum] knobs.{GROUP} v1 .spec.a" in out
    assert "4 live object(s) checked against the new schema, 3 rejected" in out
    assert f"REJECTED {namespace}/too-big (v1)" in out
