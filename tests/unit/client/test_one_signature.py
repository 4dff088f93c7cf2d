"""Each client method has one signature, stated by every implementation (issue 28).

The protocols of :mod:`setpoint.client.protocols` type kinds as ``Kind[T]`` and objects as
the type they were given, with no ``Any``; the live client, the tracking client, the
cache, its consistent reader and the testing fake state those signatures as they are
(adding optional keywords only), without ``@overload`` copies. mypy checks this module too:
the ``assert_type`` calls below fail the type check if a signature loses precision.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, assert_type

import pytest

from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.cache import Cache
from setpoint.cache.consistency import ConsistentReader, TrackingClient
from setpoint.client import protocols
from setpoint.client.client import Client
from setpoint.client.objects import Applied, ObjectList
from setpoint.client.patch import MergePatch
from setpoint.client.protocols import ReadWriter
from setpoint.testing import FakeClient
from tests._support.gadgets import Gadget, GadgetSpec

PROTOCOLS = [
    protocols.Reader,
    protocols.Writer,
    protocols.StatusWriter,
    protocols.ReadWriter,
    protocols.IndexReader,
    protocols.ListWatcher,
    protocols.ApiClient,
    protocols.CachedClient,
]

# Which protocols each implementation states (the cache is a reader with indexes).
IMPLEMENTATIONS: dict[type, list[type]] = {
    Client: [protocols.ApiClient],
    FakeClient: [protocols.ApiClient, protocols.IndexReader],
    TrackingClient: [protocols.ApiClient, protocols.CachedClient],
    Cache: [protocols.IndexReader],
    ConsistentReader: [protocols.IndexReader],
}


def _methods(protocol: type) -> dict[str, Callable[..., Any]]:
    """The public methods of ``protocol``, a subclass's overriding its bases' (``delete``)."""
    found: dict[str, Callable[..., Any]] = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or not getattr(klass, "_is_protocol", False):
            continue
        for name, value in vars(klass).items():
            if inspect.isfunction(value) and not name.startswith("_"):
                found[name] = value
    return found


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_protocol_signatures_are_precise(protocol: type) -> None:
    loose = [
        f"{protocol.__name__}.{name}({parameter.name}: {parameter.annotation})"
        for name, method in _methods(protocol).items()
        for parameter in inspect.signature(method).parameters.values()
        if "Any" in str(parameter.annotation)
    ] + [
        f"{protocol.__name__}.{name} -> {inspect.signature(method).return_annotation}"
        for name, method in _methods(protocol).items()
        if "Any" in str(inspect.signature(method).return_annotation)
    ]
    assert loose == []


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_implementations_have_no_overload_copies(implementation: type) -> None:
    copied = [
        name
        for name, value in vars(implementation).items()
        if inspect.isfunction(value) and typing.get_overloads(value)
    ]
    assert copied == []


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_implementations_state_the_protocol_signature(implementation: type) -> None:
    differences = []
    for protocol in IMPLEMENTATIONS[implementation]:
        for name, method in _methods(protocol).items():
            expected = inspect.signature(method)
            implemented = getattr(implementation, name)
            if isinstance(implemented, property):
                continue
            actual = inspect.signature(implemented).parameters
            for parameter in expected.parameters.values():
                got = actual.get(parameter.name)
                if got is None:
                    differences.append(f"{name}: no {parameter.name}")
                elif (got.kind, got.default, str(got.annotation)) != (
                    parameter.kind,
                    parameter.default,
                    str(parameter.annotation),
                ):
                    differences.append(f"{name}: {got} is not {parameter}")
            for extra in actual.keys() - expected.parameters.keys():
                parameter = actual[extra]
                if parameter.default is parameter.empty and parameter.kind not in (
                    parameter.VAR_KEYWORD,
                    parameter.VAR_POSITIONAL,
                ):
                    differences.append(f"{name}: {extra} is required")
            # A watch returns the implementation's own stream class (``Watch[T]``, ...).
            if name != "watch" and str(inspect.signature(implemented).return_annotation) != str(
                expected.return_annotation
            ):
                differences.append(
                    f"{name} -> {inspect.signature(implemented).return_annotation}, not "
                    f"{expected.return_annotation}"
                )
    assert differences == []


async def _round_trip(client: ReadWriter, namespace: str) -> Gadget:
    """What a helper typed against ReadWriter sees, whatever implementation it is given."""
    desired = Gadget(metadata={"name": "g", "namespace": namespace}, spec=GadgetSpec(size=1))
    created = await client.create(desired)
    assert_type(created, Gadget)
    fetched = await client.get(Gadget, "g", namespace=namespace)
    assert_type(fetched, Gadget)
    listed = await client.list(Gadget, namespace=namespace)
    assert_type(listed, ObjectList[Gadget])
    patched = await client.patch(
        Gadget, "g", MergePatch({"spec": {"size": 2}}), namespace=namespace
    )
    assert_type(patched, Gadget)
    patched.spec.size = 3
    updated = await client.update(patched)
    assert_type(updated, Gadget)
    applied = await client.apply(updated, field_manager="test", force=True)
    assert_type(applied, Gadget)
    as_json = await client.get(Gadget.gvk, "g", namespace=namespace)
    assert_type(as_json, JsonObject)
    assert isinstance(as_json, dict) and as_json["spec"]["size"] == 3
    assert all(isinstance(item, Gadget) for item in listed)
    return await client.replace_status(applied)


async def test_one_helper_fits_the_fake_and_the_tracking_client() -> None:
    fake = FakeClient(resources=[Gadget])
    cache = Cache(fake)
    tracking = cache.tracking_client(fake)
    assert (await _round_trip(fake, "a")).spec.size == 3
    assert (await _round_trip(tracking, "b")).spec.size == 3
    outcome = await tracking.apply_outcome(
        Gadget(metadata={"name": "new", "namespace": "b"}, spec=GadgetSpec()),
        field_manager="test",
    )
    assert_type(outcome, Applied[Gadget])
    assert outcome.created and isinstance(outcome.object, Gadget)


async def test_readers_type_what_they_read() -> None:
    fake = FakeClient(
        resources=[Gadget],
        objects=[
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
        ],
    )
    cache = Cache(fake)
    await cache.start()
    try:
        await cache.wait_for_sync(5)
        reader = cache.reader(read_after_write_timeout=5)
        config = await reader.get(kinds.ConfigMap, "c", namespace="n")
        assert_type(config, JsonObject)
        assert config["metadata"]["name"] == "c"
        listed = await cache.list(kinds.ConfigMap, namespace="n")
        assert_type(listed, ObjectList[JsonObject])
        assert [item["metadata"]["name"] for item in listed] == ["c"]
        assert_type(fake.lookup(kinds.ConfigMap, "c", namespace="n"), JsonObject | None)
    finally:
        await cache.stop(5)
