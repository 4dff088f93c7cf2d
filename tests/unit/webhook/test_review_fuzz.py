"""Fuzzed ConversionReview and AdmissionReview bodies through the real HTTPS webhook server.

Truncated, wrongly typed, huge and unknown-version bodies: every one gets a 4xx or a review
answering with ``Failure`` (conversion) or ``allowed: false`` (admission), each within a
deadline; the server never answers 5xx, never stops, and serves a good review afterwards.

The server runs on its own event loop in a thread; hypothesis drives plain blocking HTTPS
requests at it (``http.client``) over one kept-alive connection (a new one after an error).
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.observability.metrics import Metrics
from setpoint.testing import serving_certificate
from setpoint.webhook import StaticCertificate, WebhookServer, WebhookServerOptions
from tests._support.machines import GROUP as MACHINE_GROUP
from tests._support.machines import VERSIONS, hub_object
from tests._support.vessels import GROUP as VESSEL_GROUP
from tests._support.vessels import VesselDefaulter, VesselValidator

MIB = 1024 * 1024
MAX_BODY = 2 * MIB
DEADLINE = 10.0


@dataclass
class Served:
    """The running server and how to reach it."""

    port: int
    context: ssl.SSLContext
    paths: tuple[str, ...]
    server: WebhookServer
    metrics: Metrics
    connection: http.client.HTTPSConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body``; ``(status, body)``, failing on a timeout (a hang)."""
        if self.connection is None:
            self.connection = http.client.HTTPSConnection(
                "127.0.0.1", self.port, context=self.context, timeout=DEADLINE
            )
        try:
            self.connection.request(
                "POST", path, body=body, headers={"Content-Type": "application/json"}
            )
            response = self.connection.getresponse()
            return response.status, response.read()
        except BaseException:
            self.connection.close()
            self.connection = None
            raise


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """A webhook server with /convert (Machine) and the Vessel admission webhooks."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzzed-webhook", daemon=True)
    thread.start()
    ca, pair = serving_certificate()
    metrics = Metrics.isolated()
    server = WebhookServer(
        WebhookServerOptions(
            bind_address="127.0.0.1:0",
            certificate=StaticCertificate(pair),
            admission_max_body_size=MAX_BODY,
            conversion_max_body_size=MAX_BODY,
        ),
        metrics=metrics,
    )
    server.add_conversion(*VERSIONS)
    validator, defaulter = server.add_admission(VesselValidator(), VesselDefaulter())
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    assert server.address is not None
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    served = Served(
        server.address[1],
        context,
        ("/convert", validator.spec.path, defaulter.spec.path),
        server,
        metrics,
    )
    try:
        yield served
    finally:
        if served.connection is not None:
            served.connection.close()  # else the server's stop waits for this client
        asyncio.run_coroutine_threadsafe(server.stop(5.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# --------------------------------------------------------------------------- strategies

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
api_versions = st.sampled_from(
    [
        *(c.gvk.api_version for c in VERSIONS),
        f"{MACHINE_GROUP}/v9",
        "other.example.com/v1",
        f"{VESSEL_GROUP}/v1",
        "v1",
        "",
    ]
)
uids = st.text(min_size=1, max_size=12) | json_values


@st.composite
def machine_objects(draw: st.DrawFn) -> Any:
    """A Machine at some version, or something that only looks like one."""
    obj = hub_object(name=draw(st.text(min_size=1, max_size=10)), replicas=draw(st.integers(0, 9)))
    obj["apiVersion"] = draw(api_versions)
    return draw(st.just(obj) | json_values)


def conversion_review(draw: st.DrawFn) -> Any:
    return {
        "apiVersion": draw(
            st.sampled_from(["apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1"])
        ),
        "kind": draw(st.sampled_from(["ConversionReview", "AdmissionReview"])),
        "request": {
            "uid": draw(uids),
            "desiredAPIVersion": draw(api_versions | json_values),
            "objects": draw(st.lists(machine_objects(), max_size=5) | json_values),
        },
    }


def vessel_object(draw: st.DrawFn) -> Any:
    spec = {
        "capacity": draw(st.integers(-3, 5) | json_values),
        "crew": draw(st.lists(st.text(max_size=5), max_size=6) | json_values),
        "captain": draw(st.none() | st.sampled_from(["nemo", "raise"]) | json_values),
    }
    obj = {
        "apiVersion": draw(api_versions),
        "kind": draw(st.sampled_from(["Vessel", "Machine", ""])),
        "metadata": draw(st.just({"name": "v", "namespace": "sea"}) | json_values),
        "spec": spec,
    }
    return draw(st.just(obj) | json_values)


def admission_review(draw: st.DrawFn) -> Any:
    return {
        "apiVersion": draw(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])),
        "kind": draw(st.sampled_from(["AdmissionReview", "ConversionReview"])),
        "request": {
            "uid": draw(uids),
            "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "x"])),
            "object": vessel_object(draw),
            "oldObject": vessel_object(draw),
            "name": draw(st.text(max_size=5) | json_values),
            "namespace": draw(st.just("sea") | json_values),
            "dryRun": draw(st.booleans() | json_values),
        },
    }


@st.composite
def mutated(draw: st.DrawFn, kind: str) -> bytes:
    """A review, then damaged: a field replaced or removed, or the bytes cut short."""
    review = conversion_review(draw) if kind == "conversion" else admission_review(draw)
    for _ in range(draw(st.integers(0, 2))):
        node: Any = review
        keys: list[Any] = []
        while isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node)))
            keys.append(key)
            node = node[key]
        if not keys:
            continue
        parent: Any = review
        for key in keys[:-1]:
            parent = parent[key]
        if draw(st.booleans()):
            parent.pop(keys[-1])
        else:
            parent[keys[-1]] = draw(json_values)
    body = orjson.dumps(review)
    if draw(st.integers(0, 3)) == 0:
        body = body[: draw(st.integers(0, max(0, len(body) - 1)))]
    return body


def judge(status: int, body: bytes, sent: bytes, kind: str) -> None:
    """4xx, or a 200 review that echoes the uid and answers one of the allowed ways."""
    assert status < 500, f"HTTP {status} for {sent[:300]!r}: {body[:300]!r}"
    if status != 200:
        assert 400 <= status < 500
        assert body, "a 4xx must say what is wrong"
        return
    answer = orjson.loads(body)
    request = orjson.loads(sent)["request"]
    response = answer["response"]
    assert response["uid"] == request["uid"]
    if kind == "conversion":
        assert answer["kind"] == "ConversionReview"
        assert response["result"]["status"] in ("Success", "Failure")
        if response["result"]["status"] == "Success":
            assert len(response["convertedObjects"]) == len(request["objects"])
    else:
        assert answer["kind"] == "AdmissionReview"
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            assert 400 <= response["status"]["code"] <= 599


# --------------------------------------------------------------------------- tests

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(body=mutated("conversion"))
def test_fuzzed_conversion_reviews_get_a_4xx_or_a_review(served: Served, body: bytes) -> None:
    """Any ConversionReview-like body: 4xx or a Success/Failure review echoing the uid."""
    status, answer = served.post("/convert", body)
    judge(status, answer, body, "conversion")


@FUZZ
@given(body=mutated("admission"), mutating=st.booleans())
def test_fuzzed_admission_reviews_get_a_4xx_or_a_review(
    served: Served, body: bytes, mutating: bool
) -> None:
    """Any AdmissionReview-like body, to the validator or the defaulter: 4xx or an answer."""
    status, answer = served.post(served.paths[2 if mutating else 1], body)
    judge(status, answer, body, "admission")


@pytest.mark.parametrize("path_index", [0, 1])
def test_huge_bodies_are_refused_or_answered(served: Served, path_index: int) -> None:
    """A body over the limit is 413; a big review under it (2,000 objects) is answered."""
    path = served.paths[path_index]
    status, _ = served.post(path, b"{" + b" " * (MAX_BODY + 10) + b"}")
    assert status == 413
    objects = [hub_object(name=f"m{i}", replicas=1) for i in range(2000)]
    review = orjson.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": "big",
                "desiredAPIVersion": VERSIONS[1].gvk.api_version,
                "objects": objects,
            },
        }
    )
    assert len(review) < MAX_BODY
    status, answer = served.post(path, review)
    assert status in (200, 400)
    if path_index == 0:
        assert orjson.loads(answer)["response"]["result"]["status"] == "Success"
    deep = b"[" * 5000 + b"]" * 5000
    assert served.post(path, deep)[0] == 400


def test_the_server_is_still_serving_after_the_fuzzing(served: Served) -> None:
    """After every fuzzed body: a good review converts, and nothing was counted as a 5xx."""
    review = orjson.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": "after",
                "desiredAPIVersion": VERSIONS[1].gvk.api_version,
                "objects": [hub_object(name="m", replicas=2)],
            },
        }
    )
    status, answer = served.post("/convert", review)
    assert status == 200 and orjson.loads(answer)["response"]["result"]["status"] == "Success"
    assert served.server.failure() is None
    for path in served.paths:
        assert (
            served.metrics.value(
                "controller_runtime_webhook_requests_total", webhook=path, code="500"
            )
            == 0
        )
