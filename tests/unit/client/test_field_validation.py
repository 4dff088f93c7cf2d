"""fieldValidation on the client's writes, and the server's warnings handed to the caller."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

import setpoint as sp
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client, ClientConfig, collect_warnings
from setpoint.client.client import field_validation_for
from setpoint.client.patch import MergePatch
from setpoint.client.server_warnings import record_warning, warning_text
from setpoint.client.transport import Response, Transport, TransportOptions

GVK = GroupVersionKind("fv.test.setpoint.dev", "v1", "Gadget")


class GadgetSpec(sp.Model):
    """A spec."""

    size: int | None = None
    """A size."""


@sp.resource(group="fv.test.setpoint.dev", version="v1")
class Gadget(sp.Resource):
    """A typed kind."""

    spec: GadgetSpec | None = None


def test_warning_text_unwraps_the_rfc7234_form() -> None:
    assert warning_text('299 - "unknown field \\"spec.foo\\""') == 'unknown field "spec.foo"'
    assert warning_text('299 - "a, b" "Sat, 05 Dec 2026 08:00:00 GMT"') == "a, b"
    assert warning_text("not a warning value") == "not a warning value"


def test_collect_warnings_nests_and_stops_at_the_block() -> None:
    record_warning("before")
    with collect_warnings() as outer:
        record_warning("one")
        with collect_warnings() as inner:
            record_warning("two")
        record_warning("three")
    record_warning("after")
    assert outer == ["one", "two", "three"]
    assert inner == ["two"]


def test_the_default_is_strict_for_typed_objects_only() -> None:
    gadget = Gadget(metadata=sp.ObjectMeta(name="g", namespace="d"))
    assert field_validation_for(gadget, None) == "Strict"
    assert field_validation_for(Gadget, None) == "Strict"  # a patch of a typed kind
    assert field_validation_for({"kind": "Gadget"}, None) is None
    assert field_validation_for(GVK, None) is None
    assert field_validation_for(gadget, "Ignore") == "Ignore"
    assert field_validation_for({}, "Warn") == "Warn"
    with pytest.raises(ValueError, match="field_validation must be"):
        field_validation_for({}, "strict")  # type: ignore[arg-type]


class _Recorder:
    """Stands in for the transport: records each request's query parameters."""

    def __init__(self) -> None:
        self.params: list[dict[str, str]] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Response:
        self.params.append(dict(kwargs.get("params") or {}))
        body = kwargs.get("body")
        if isinstance(body, bytes | type(None)) or method == "PATCH":
            body = {"apiVersion": GVK.api_version, "kind": "Gadget", "metadata": {"name": "g"}}
        return Response(200, {}, body)


async def _client(recorder: _Recorder) -> Client:
    client = Client(ClientConfig(server="http://127.0.0.1:9"))
    await client.close()

    async def path(*args: Any, **kwargs: Any) -> tuple[None, str]:
        return None, "/apis/fv.test.setpoint.dev/v1/namespaces/d/gadgets/g"

    client._path = path  # type: ignore[method-assign,assignment]
    client.transport = recorder  # type: ignore[assignment]
    return client


async def test_each_write_sends_field_validation() -> None:
    """Typed writes send Strict unless told otherwise; dict writes send nothing by default."""
    recorder = _Recorder()
    client = await _client(recorder)
    gadget = Gadget(metadata=sp.ObjectMeta(name="g", namespace="d"), spec=GadgetSpec(size=1))
    as_dict = gadget.to_object()
    await client.create(gadget)
    await client.create(as_dict)
    await client.create(as_dict, field_validation="Strict")
    await client.update(gadget, field_validation="Warn")
    await client.update(as_dict)
    await client.replace_status(as_dict, field_validation="Ignore")
    await client.patch(Gadget, "g", MergePatch({"spec": {}}), namespace="d")
    await client.patch(GVK, "g", MergePatch({"spec": {}}), namespace="d")
    await client.apply(gadget, field_manager="m")
    await client.apply(as_dict, field_manager="m", field_validation="Warn")
    sent = [p.get("fieldValidation") for p in recorder.params]
    assert sent == [
        "Strict",
        None,
        "Strict",
        "Warn",
        None,
        "Ignore",
        "Strict",
        None,
        "Strict",
        "Warn",
    ]


@pytest_asyncio.fixture
async def warning_server() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        response = web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}})
        response.headers.add("Warning", '299 - "unknown field \\"spec.foo\\""')
        response.headers.add("Warning", '299 - "unknown field \\"extra\\""')
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_server_warnings_reach_the_caller_and_the_log(
    warning_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every Warning header of an answer is logged and handed to collect_warnings, in order."""
    transport = Transport(ClientConfig(server=warning_server, token="t"), TransportOptions())
    with caplog.at_level(logging.WARNING), collect_warnings() as warnings:
        await transport.request("POST", "/api/v1/namespaces/d/configmaps", body={"a": 1})
    await transport.close()
    assert warnings == ['unknown field "spec.foo"', 'unknown field "extra"']
    logged = [r.getMessage() for r in caplog.records if "API server warning" in r.getMessage()]
    assert len(logged) == 2
    assert 'unknown field \\"spec.foo\\"' in logged[0]
