"""Property tests: for every version pair, both directions, a round trip gives the object back.

Objects are generated from each version's generated CRD schema (tests/_support/
crd_strategies), so every field, bound and optional part is exercised. The kinds are the
Machine test kind (three versions, restructured fields, hub-only data, lists of objects) and
the tenants example's Tenant (v1alpha1 beside v1).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tenants.api import Tenant, TenantV1Alpha1

from setpoint.api.conversion import CONVERSION_DATA_ANNOTATION, KindConversion
from setpoint.api.resource import Resource
from setpoint.crd import resource_schema
from tests._support.crd_strategies import for_schema
from tests._support.machines import VERSIONS

KINDS = {"Machine": VERSIONS, "Tenant": (Tenant, TenantV1Alpha1)}
PAIRS = [
    pytest.param(kind, a, b, id=f"{kind}-{a.gvk.version}-{b.gvk.version}")
    for kind, classes in KINDS.items()
    for a, b in itertools.permutations(classes, 2)
]
CONVERSIONS = {kind: KindConversion.of(*classes) for kind, classes in KINDS.items()}
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def objects_of(cls: type[Resource]) -> Any:
    """Objects valid under the version's schema, with server-like metadata."""
    gvk = cls.declaration().gvk
    return for_schema(resource_schema(cls).schema, unknown_fields=False, resource_root=True).map(
        lambda obj: {**obj, "apiVersion": gvk.api_version, "kind": gvk.kind}
    )


def normalized(cls: type[Resource], obj: dict[str, Any]) -> Resource:
    """``obj`` as a typed object without the conversion annotation (defaults filled in, so an
    omitted default equals the default written out, as on the server)."""
    typed = cls.from_object(obj)
    typed.metadata.annotations.pop(CONVERSION_DATA_ANNOTATION, None)
    return typed


@pytest.mark.parametrize(("kind", "source", "target"), PAIRS)
@SETTINGS
@given(data=st.data())
def test_there_and_back_gives_the_object_and_its_metadata_back(
    kind: str, source: type[Resource], target: type[Resource], data: Any
) -> None:
    conversion = CONVERSIONS[kind]
    obj = data.draw(objects_of(source))
    there = conversion.convert(obj, target.gvk.api_version)
    assert there["apiVersion"] == target.gvk.api_version
    target.from_object(there)  # what comes out parses as the target version
    back = conversion.convert(there, source.gvk.api_version)
    assert normalized(source, back) == normalized(source, obj)
    # Metadata is the server's, apart from the conversion annotation.
    for converted in (there, back):
        assert without_annotation(converted["metadata"]) == without_annotation(obj["metadata"])


def without_annotation(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata without the conversion annotation (and without empty annotations)."""
    out = dict(meta)
    annotations = out.pop("annotations", None) or {}
    kept = {k: v for k, v in annotations.items() if k != CONVERSION_DATA_ANNOTATION}
    if kept:
        out["annotations"] = kept
    return out
