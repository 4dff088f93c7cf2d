"""Generated CRDs against a real API server: accepted, Established, served as declared."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from setpoint.client import Client
from setpoint.client.errors import UnknownKind
from tests._support.crd_golden import load_fixtures
from tests._support.crd_server import fixture_crds, kubectl

TYPES = load_fixtures()


async def test_every_generated_crd_is_accepted_and_established(
    installed_crds: dict[str, dict[str, Any]],
) -> None:
    """Each fixture CRD is accepted unchanged and becomes Established with its names.

    The server stores the generated spec (it defaulted nothing we left out but
    conversion), reports NamesAccepted and Established, and accepts exactly the
    names we declared: plural, singular, kind, listKind, short names, categories.
    """
    expected = {crd["metadata"]["name"]: crd for crd in fixture_crds()}
    assert set(installed_crds) == set(expected)
    for name, stored in installed_crds.items():
        conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert conditions.get("NamesAccepted") == "True", (name, conditions)
        assert conditions.get("Established") == "True", (name, conditions)
        assert stored["status"]["acceptedNames"] == expected[name]["spec"]["names"]
        spec = dict(stored["spec"])
        assert spec.pop("conversion") == {"strategy": "None"}
        assert spec == expected[name]["spec"], name


async def test_typed_classes_map_to_the_served_resources(
    k8s: Client, installed_crds: dict[str, dict[str, Any]]
) -> None:
    """resource_info() of each typed class agrees with what discovery reports.

    This is what lets the fake client and the RESTMapper serve typed kinds
    without asking the server.
    """
    for cls in (TYPES.Widget, TYPES.Thing, TYPES.Gadget, TYPES.GadgetV1Alpha1):
        local = cls.resource_info()
        served = await k8s.resource_info(cls)
        assert (served.plural, served.namespaced) == (local.plural, local.namespaced), cls
        assert served.subresources == local.subresources, cls
        assert set(served.short_names) == set(local.short_names), cls


async def test_unserved_versions_are_not_served(
    k8s: Client, installed_crds: dict[str, dict[str, Any]]
) -> None:
    """A version declared with served=False is in the CRD but not in discovery.

    Gadget v1beta1 exists only as a schema; asking for it fails as an unknown kind.
    """
    with pytest.raises(UnknownKind):
        await k8s.resource_info(TYPES.GadgetV1Beta1)


async def test_one_object_is_readable_in_every_served_version(
    k8s: Client, installed_crds: dict[str, dict[str, Any]]
) -> None:
    """A Gadget written as v1 reads back as v1alpha1 through its own typed class.

    With the None conversion strategy the server only rewrites apiVersion, so
    fields both versions share come through, and the typed classes of both
    versions parse the result.
    """
    created = await k8s.create(TYPES.Gadget(metadata={"name": "multi"}, spec={"size": 3}))
    try:
        assert isinstance(created, TYPES.Gadget)
        assert created.spec.size == 3
        old = await k8s.get(TYPES.GadgetV1Alpha1, "multi")
        assert isinstance(old, TYPES.GadgetV1Alpha1)
        assert old.spec.size == 3
        assert old.to_object()["apiVersion"] == "fixtures.setpoint.dev/v1alpha1"
    finally:
        await k8s.delete(TYPES.Gadget, "multi")


async def test_printer_columns_show_in_kubectl_get(
    k8s: Client,
    namespace: str,
    kubeconfig_path: Path,
    installed_crds: dict[str, dict[str, Any]],
) -> None:
    """kubectl get shows the declared columns; priority-1 columns only with -o wide.

    Replicas and Phase come from the spec and status paths, Age from
    metadata.creationTimestamp; Image (priority 1) appears only in wide output.
    """
    widget = TYPES.Widget(
        metadata={"name": "cols", "namespace": namespace},
        spec={"image": "nginx:1.27", "replicas": 0},
    )
    created = await k8s.create(widget)
    created.status = TYPES.WidgetStatus(phase=TYPES.Phase.RUNNING)
    await k8s.replace_status(created)

    def table(*extra: str) -> list[list[str]]:
        # Fully qualified: other tests install a Widget kind of their own (widgets in
        # test.setpoint.dev), and a bare "widgets" may resolve to that group.
        out = kubectl(
            kubeconfig_path, "get", "widgets.fixtures.setpoint.dev", "-n", namespace, *extra
        )
        return [line.split() for line in out.strip().splitlines()]

    header, row = await asyncio.to_thread(table)
    assert header == ["NAME", "REPLICAS", "PHASE", "AGE"]
    assert row[:3] == ["cols", "0", "Running"]
    header, row = await asyncio.to_thread(table, "-o", "wide")
    # Columns keep their declared order; Image was declared before Age.
    assert header == ["NAME", "REPLICAS", "PHASE", "IMAGE", "AGE"]
    assert row[3] == "nginx:1.27"


async def test_short_names_and_categories_resolve_in_kubectl(
    k8s: Client,
    namespace: str,
    kubeconfig_path: Path,
    installed_crds: dict[str, dict[str, Any]],
) -> None:
    """kubectl finds widgets by their short name (wd) and their category (fixtures).

    The fully qualified resource name works as well; all three name the same object.
    """
    await k8s.create(
        TYPES.Widget(metadata={"name": "named", "namespace": namespace}, spec={"image": "a:1"})
    )
    for name in ("wd", "fixtures", "widgets.fixtures.setpoint.dev"):
        out = await asyncio.to_thread(
            kubectl, kubeconfig_path, "get", name, "-n", namespace, "-o", "name"
        )
        assert out.split() == ["widget.fixtures.setpoint.dev/named"], name
