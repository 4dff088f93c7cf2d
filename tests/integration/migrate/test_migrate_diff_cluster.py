"""`setpoint crd diff --against-cluster` and kube:// inputs on a real API server."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Mapping
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


def with_v2(v2_spec: dict[str, Any], *, webhook: bool) -> dict[str, Any]:
    """The knob CRD (v1 unchanged, storage) plus a new served v2 with ``v2_spec``."""
    crd = knob_crd(OLD_SPEC)
    v2 = copy.deepcopy(crd["spec"]["versions"][0])
    v2.update(name="v2", storage=False)
    v2["schema"]["openAPIV3Schema"]["properties"]["spec"] = v2_spec
    crd["spec"]["versions"].append(v2)
    if webhook:
        crd["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"url": "https://converter.invalid/convert"},
                "conversionReviewVersions": ["v1"],
            },
        }
    return crd


async def test_new_version_without_conversion_is_checked_relabelled(
    k8s: Client, namespace: str, knobs: dict[str, Any]
) -> None:
    """A version the new CRD adds, converted by strategy None, gets the live objects relabelled.

    The API server converts with strategy None by changing only apiVersion, so each live
    object read at the storage version (v1) must satisfy v2's tighter schema as it is: the
    three objects that break it are listed at v2, v1 (unchanged) rejects none.
    """
    report = await objects_rejected_by(k8s, with_v2(NEW_SPEC, webhook=False))
    assert report.checked == 8
    assert report.converted_versions == ("v2",)
    assert report.converted_from == "v1"
    assert report.skipped_versions == ()
    assert {(r.version, r.name) for r in report.rejections} == {
        ("v2", "too-big"),
        ("v2", "too-long"),
        ("v2", "three"),
    }


V2_SPEC = {
    "type": "object",
    "required": ["amount"],
    "properties": {"amount": {"type": "integer", "maximum": 5}, "s": {"type": "string"}},
}


def a_to_amount(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """A converter to v2: spec.a becomes spec.amount; it refuses the object named three."""
    if obj["metadata"]["name"] == "three":
        raise ValueError("three has no v2 form")
    spec = dict(obj["spec"])
    spec["amount"] = spec.pop("a")
    return {**obj, "apiVersion": api_version, "spec": spec}


async def test_new_version_with_webhook_is_checked_through_the_converter(
    k8s: Client, namespace: str, knobs: dict[str, Any]
) -> None:
    """A version converted by a webhook is checked with the caller's converter, or skipped.

    Without a converter v2 cannot be checked and is reported as skipped. With one, each
    live object is converted and the converter's output must satisfy v2's schema: an
    output breaking it (amount 10 > 5) and a conversion that fails are both listed; the
    objects whose conversion is valid pass.
    """
    crd = with_v2(V2_SPEC, webhook=True)
    report = await objects_rejected_by(k8s, crd)
    assert (report.checked, report.skipped_versions, report.converted_versions) == (4, ("v2",), ())

    report = await objects_rejected_by(k8s, crd, converter=a_to_amount)
    assert report.checked == 8
    assert report.converted_versions == ("v2",)
    found = {r.name: r for r in report.rejections}
    assert set(found) == {"too-big", "three"}
    assert found["too-big"].version == "v2"
    assert any("spec.amount" in reason for reason in found["too-big"].reasons)
    assert found["three"].reasons == (
        f"conversion to {GROUP}/v2 failed: ValueError: three has no v2 form",
    )


KNOB_TYPES = """
from typing import Self

import setpoint as sp

GROUP = "dryrun.migrate.setpoint.dev"


class KnobSpec(sp.Model):
    a: int | None = None
    s: str | None = None


class KnobStatus(sp.Model):
    level: int | None = None


@sp.resource(group=GROUP, version="v1", kind="Knob", storage=True)
class Knob(sp.Resource):
    spec: KnobSpec
    status: KnobStatus | None = None


class KnobSpecV2(sp.Model):
    amount: int
    s: str | None = None


@sp.resource(group=GROUP, version="v2", kind="Knob")
class KnobV2(sp.Resource, sp.Convertible[Knob]):
    spec: KnobSpecV2

    def to_hub(self) -> Knob:
        return Knob(metadata=self.metadata, spec=KnobSpec(a=self.spec.amount, s=self.spec.s))

    @classmethod
    def from_hub(cls, hub: Knob) -> Self:
        if hub.spec.a == 3:
            raise ValueError("three has no v2 form")
        return cls(metadata=hub.metadata, spec=KnobSpecV2(amount=hub.spec.a or 0, s=hub.spec.s))
"""


@pytest.mark.usefixtures("knobs")
async def test_cli_checks_a_new_version_through_the_python_converters(
    namespace: str,
    kubeconfig_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`crd diff kube://NAME MODULE:Class --against-cluster` runs the types' converters.

    NEW is given as Python types whose new v2 is a spoke with converter functions (the
    generated CRD converts by webhook). The live objects are read at v1, converted to v2
    by those functions, and dry-run against v2's schema: the one whose converter raises
    is listed with the converter's message, the others pass, and no version is left
    unchecked.
    """
    module = tmp_path / "knob_types_cli.py"
    module.write_text(KNOB_TYPES)
    argv = [
        "crd",
        "diff",
        f"kube://knobs.{GROUP}",
        f"{module}:Knob",
        "--against-cluster",
        "--kubeconfig",
        str(kubeconfig_path),
    ]
    code = await asyncio.to_thread(main, argv)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "8 live object(s) checked against the new schema, 1 rejected" in out
    assert "new versions ['v2'] checked after converting from v1" in out
    assert f"REJECTED {namespace}/three (v2): conversion to {GROUP}/v2 failed" in out
    assert "three has no v2 form" in out
    assert "not checked" not in out
