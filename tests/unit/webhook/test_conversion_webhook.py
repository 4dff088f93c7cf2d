"""/convert over real HTTPS on loopback: reviews, failures, malformed bodies, metrics."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any, Self

import aiohttp
import orjson
import pytest

import setpoint as sp
from setpoint.api.conversion import CONVERSION_DATA_ANNOTATION
from setpoint.api.runnable import RunnableGroup
from setpoint.observability.metrics import Metrics
from setpoint.testing import LocalWebhook
from setpoint.webhook import ConversionWebhook, WebhookServer, WebhookServerOptions
from tests._support.machines import GROUP, V1, V2, VERSIONS, Machine, MachineV1, hub_object


def review(objects: list[Any], desired: str = V1, uid: str = "3f1c-uid") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    }


@pytest.fixture
def metrics() -> Metrics:
    return Metrics.isolated()


@pytest.fixture
async def hook(metrics: Metrics) -> AsyncIterator[LocalWebhook]:
    async with LocalWebhook(metrics=metrics) as running:
        running.server.add_conversion(*VERSIONS)
        yield running


@pytest.fixture
async def http(hook: LocalWebhook) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    ctx = ssl.create_default_context(cadata=hook.ca.cert_pem.decode())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        yield session, hook.server.url("/convert")


async def post(http: tuple[aiohttp.ClientSession, str], body: bytes) -> tuple[int, Any]:
    session, url = http
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        raw = await r.read()
        if r.content_type == "application/json":
            return r.status, orjson.loads(raw)
        return r.status, raw.decode()


async def test_a_batch_converts_in_order_and_echoes_the_uid(
    http: tuple[aiohttp.ClientSession, str], metrics: Metrics
) -> None:
    objects = [hub_object(name=f"m{i}", replicas=i) for i in range(3)]
    status, answer = await post(http, orjson.dumps(review(objects, uid="abc-123")))
    assert status == 200
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1"
    assert answer["kind"] == "ConversionReview"
    response = answer["response"]
    assert response["uid"] == "abc-123"
    assert response["result"] == {"status": "Success"}
    converted = response["convertedObjects"]
    assert [o["metadata"]["name"] for o in converted] == ["m0", "m1", "m2"]
    assert [o["spec"]["size"] for o in converted] == [0, 1, 2]
    assert all(o["apiVersion"] == V1 for o in converted)
    assert (
        metrics.value("controller_runtime_webhook_requests_total", webhook="/convert", code="200")
        == 1
    )
    assert metrics.value("controller_runtime_webhook_requests_in_flight", webhook="/convert") == 0
    assert (
        metrics.value("controller_runtime_webhook_latency_seconds_count", webhook="/convert") == 1
    )


async def test_a_large_batch_converts_off_the_event_loop(
    http: tuple[aiohttp.ClientSession, str],
) -> None:
    objects = [hub_object(name=f"m{i}") for i in range(200)]
    status, answer = await post(http, orjson.dumps(review(objects)))
    assert status == 200
    assert len(answer["response"]["convertedObjects"]) == 200
    back = review(answer["response"]["convertedObjects"], desired=V2)
    status, again = await post(http, orjson.dumps(back))
    assert again["response"]["convertedObjects"] == objects


async def test_an_object_that_fails_makes_a_failure_naming_it_and_its_version(
    http: tuple[aiohttp.ClientSession, str], metrics: Metrics
) -> None:
    good = hub_object(name="good")
    bad = hub_object(name="bad", namespace="ns1")
    bad["spec"]["replicas"] = "three"
    status, answer = await post(http, orjson.dumps(review([good, bad, bad])))
    assert status == 200
    response = answer["response"]
    assert response["uid"] == "3f1c-uid"
    assert "convertedObjects" not in response
    assert response["result"]["status"] == "Failure"
    message = response["result"]["message"]
    assert message.startswith(f"Machine ns1/bad ({V2}) -> {V1}: ")
    assert "spec.replicas" in message
    assert message.endswith("(and 1 more of 3 objects)")
    # Bad input is not a panic.
    assert metrics.value("controller_runtime_conversion_webhook_panics_total") == 0


async def test_a_converter_exception_is_a_counted_failure_and_the_server_stays_up(
    metrics: Metrics,
) -> None:
    class ExplodingV1(MachineV1):
        @classmethod
        def from_hub(cls, hub: Machine) -> Self:
            raise RuntimeError("boom")

    exploding = sp.resource(group=GROUP, version="v1", kind="Machine")(ExplodingV1)
    async with LocalWebhook(metrics=metrics) as hook:
        hook.server.add_conversion(Machine, exploding)
        ctx = ssl.create_default_context(cadata=hook.ca.cert_pem.decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            http = (session, hook.server.url("/convert"))
            status, answer = await post(http, orjson.dumps(review([hub_object()])))
            assert status == 200
            result = answer["response"]["result"]
            assert result["status"] == "Failure"
            assert "ExplodingV1.from_hub() raised RuntimeError: boom" in result["message"]
            assert metrics.value("controller_runtime_conversion_webhook_panics_total") == 1
            # Up-conversion does not call from_hub: the server still converts.
            spoke = {"apiVersion": V1, "kind": "Machine", "metadata": {"name": "s"}}
            spoke["spec"] = {"image": "redis:7"}
            status, answer = await post(http, orjson.dumps(review([spoke], desired=V2)))
            assert answer["response"]["result"] == {"status": "Success"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{", "the body is not JSON"),
        (b"[]", "the body is a JSON array, not an object"),
        (b'"x"', "the body is a JSON string"),
        (
            orjson.dumps({**review([]), "apiVersion": "apiextensions.k8s.io/v1beta1"}),
            "expected apiVersion apiextensions.k8s.io/v1 kind ConversionReview",
        ),
        (
            orjson.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}),
            "request is null, expected an object",
        ),
        (orjson.dumps(review([], uid="")), "request.uid is '', expected a non-empty string"),
        (
            orjson.dumps({**review([]), "request": {"uid": "u", "objects": []}}),
            "request.desiredAPIVersion is None",
        ),
        (
            orjson.dumps({**review([]), "request": {"uid": "u", "desiredAPIVersion": V1}}),
            "request.objects is null, expected a list",
        ),
        (orjson.dumps(review([hub_object(), 7])), "request.objects[1] is number"),
    ],
)
async def test_a_malformed_review_gets_400_saying_what_is_wrong(
    http: tuple[aiohttp.ClientSession, str], body: bytes, expected: str
) -> None:
    status, text = await post(http, body)
    assert status == 400
    assert text.startswith("malformed ConversionReview: ")
    assert expected in text


async def test_unknown_kinds_and_versions_fail_the_review(
    http: tuple[aiohttp.ClientSession, str],
) -> None:
    other = {"apiVersion": "x.example.com/v1", "kind": "Thing", "metadata": {"name": "t"}}
    _, answer = await post(http, orjson.dumps(review([other])))
    message = answer["response"]["result"]["message"]
    assert "no conversion for Thing.x.example.com" in message
    assert "it converts: Machine.conv.setpoint.dev" in message
    _, answer = await post(http, orjson.dumps(review([hub_object()], desired=f"{GROUP}/v7")))
    assert (
        "'conv.setpoint.dev/v7' is not a version of Machine"
        in (answer["response"]["result"]["message"])
    )


async def test_unknown_paths_get_404_and_other_methods_405(
    hook: LocalWebhook, http: tuple[aiohttp.ClientSession, str], metrics: Metrics
) -> None:
    session, url = http
    async with session.get(url) as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST"
    async with session.post(hook.server.url("/nope"), data=b"{}") as response:
        assert response.status == 404
        assert "served: /convert" in await response.text()
    assert metrics.value("controller_runtime_webhook_requests_total", code="405") == 1


async def test_the_server_is_a_webhooks_group_runnable_with_a_certificate_check() -> None:
    server = WebhookServer(WebhookServerOptions(bind_address="127.0.0.1:0"))
    assert server.group is RunnableGroup.WEBHOOKS
    assert not server.needs_leader_election
    assert not await server.ready()
    with pytest.raises(RuntimeError, match="has not started"):
        server.url("/convert")
    with pytest.raises(ValueError, match="would disable the webhook server"):
        WebhookServerOptions(bind_address="0")


async def test_a_missing_certificate_directory_is_a_clear_start_error(tmp_path: Any) -> None:
    from setpoint.tls.pem import CertificateError
    from setpoint.webhook import CertificateDirectory

    server = WebhookServer(
        WebhookServerOptions(
            bind_address="127.0.0.1:0", certificate=CertificateDirectory(str(tmp_path))
        ),
        metrics=Metrics.isolated(),
    )
    with pytest.raises(CertificateError) as info:
        await server.start()
    assert str(tmp_path) in str(info.value)
    assert "Mount a kubernetes.io/tls Secret" in str(info.value)


def test_review_is_usable_without_a_server() -> None:
    webhook = ConversionWebhook()
    webhook.register(*VERSIONS)
    status, body = webhook.review(orjson.dumps(review([hub_object()])))
    assert status == 200
    (converted,) = orjson.loads(body)["response"]["convertedObjects"]
    assert CONVERSION_DATA_ANNOTATION in converted["metadata"]["annotations"]
    with pytest.raises(ValueError, match="registered already"):
        webhook.register(*VERSIONS)
